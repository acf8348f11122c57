use std::fmt::Write as _;

use super::p95_shared_with_greedy;
use crate::metrics::Summary;

fn wait(summary: &Summary, q: f64) -> String {
    seconds(summary.wait_percentile(q))
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |s| format!("{s:.0}"))
}

/// The p95 wait over the pods both `summary` and the run's greedy served, "this / greedy"; "-"
/// for greedy itself or without it.
fn shared(summary: &Summary, summaries: &[Summary]) -> String {
    p95_shared_with_greedy(summary, summaries).map_or_else(
        || "-".into(),
        |(this, greedy)| format!("{} / {}", seconds(Some(this)), seconds(Some(greedy))),
    )
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// Memory allocated while demand exceeded capacity, and the most the pods could have held
/// ([`crate::usable`]): "94.9% / 100.0%".
fn saturated(summary: &Summary) -> String {
    match (summary.saturated_memory_share(), summary.saturated_usable_share()) {
        (Some(held), Some(usable)) => format!("{} / {}", percent(Some(held)), percent(Some(usable))),
        _ => "-".into(),
    }
}

/// Where the memory no pod held was while demand exceeded capacity, as shares of the capacity:
/// on nodes reconfiguring / on nodes in their stabilisation window ("1.2% / 4.0%"). The rest of
/// what allocation falls short of the usable share was on nodes a plan could change.
fn out_of_play(summary: &Summary) -> String {
    summary.saturated_unheld_shares().map_or_else(
        || "-".into(),
        |(reconfiguring, stabilising)| {
            format!("{} / {}", percent(Some(reconfiguring)), percent(Some(stabilising)))
        },
    )
}

/// The gang columns, in a table of a workload with gangs.
const GANG_HEADER: &str = " gangs started / total | memory slice-s held idle by waiting gang members | gang Permit timeouts | GPUs reconfigured for nothing |";

/// The comparison table printed on stdout; its last row is `bound`, the most pods any strategy
/// could have served (`crate::bound`), when given. A workload with gangs gets four more
/// columns: gangs started, the memory slice-seconds their members held while waiting for the
/// rest, how often that wait timed out, and GPUs reconfigured for nothing (`engine::changes`).
pub fn markdown_table(summaries: &[Summary], bound: Option<usize>) -> String {
    let gangs = summaries.iter().any(|s| s.gangs > 0);
    let mut out = String::from(
        "| strategy | pods served | not served | wait p50 (s) | wait p95 (s) | wait p95 on the pods greedy also served (s), this / greedy | wait p99 (s) | memory slices allocated (mean) | memory slices allocated / usable by the pods, while demand > capacity | memory no pod held while demand > capacity, on nodes reconfiguring / in their stabilisation window | compute slices allocated (mean) | GPUs reconfigured | GPUs whole (mean / end) | pods evicted | planner calls | planner time total / max (ms) |",
    );
    if gangs {
        out.push_str(GANG_HEADER);
    }
    out.push_str("\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    if gangs {
        out.push_str("---:|---:|---:|---:|");
    }
    out.push('\n');
    for s in summaries {
        let planner = if s.planner_calls == 0 {
            "-".to_string()
        } else {
            format!(
                "{:.0} / {:.1}",
                s.planner_time.as_secs_f64() * 1000.0,
                s.planner_time_max.as_secs_f64() * 1000.0
            )
        };
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} / {} | {} | {} | {} |",
            s.strategy,
            s.served,
            s.not_served,
            wait(s, 0.50),
            wait(s, 0.95),
            shared(s, summaries),
            wait(s, 0.99),
            percent(Some(s.memory_share())),
            saturated(s),
            out_of_play(s),
            percent(Some(s.compute_share())),
            s.gpus_reconfigured,
            s.whole_gpus_mean(),
            s.whole_gpus_end,
            s.evictions,
            s.planner_calls,
            planner,
        );
        if gangs {
            let _ = write!(
                out,
                " {} / {} | {:.0} | {} | {} |",
                s.gangs_started,
                s.gangs,
                s.gang_idle_slice_seconds(),
                s.gang_timeouts,
                s.gpus_reconfigured_for_nothing
            );
        }
        out.push('\n');
    }
    if let (Some(bound), Some(first)) = (bound, summaries.first()) {
        let _ = write!(
            out,
            "| upper bound (capacity) | {bound} | {} | - | - | - | - | - | - | - | - | - | - | - | - | - |",
            first.pods.saturating_sub(bound)
        );
        if gangs {
            out.push_str(" - | - | - | - |");
        }
        out.push('\n');
    }
    out
}
