use std::fmt::Write as _;

use crate::metrics::Summary;

fn wait(summary: &Summary, q: f64) -> String {
    summary.wait_percentile(q).map_or_else(|| "-".into(), |s| format!("{s:.0}"))
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// The comparison table printed on stdout; its last row is `bound`, the most pods any strategy
/// could have served (`crate::bound`), when given.
pub fn markdown_table(summaries: &[Summary], bound: Option<usize>) -> String {
    let mut out = String::from(
        "| strategy | pods served | not served | wait p50 (s) | wait p95 (s) | wait p99 (s) | memory slices allocated (mean) | memory slices allocated while demand > capacity | compute slices allocated (mean) | GPUs reconfigured | GPUs whole (mean / end) | pods evicted | planner calls | planner time total / max (ms) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
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
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} / {} | {} | {} | {} |",
            s.strategy,
            s.served,
            s.not_served,
            wait(s, 0.50),
            wait(s, 0.95),
            wait(s, 0.99),
            percent(Some(s.memory_share())),
            percent(s.saturated_memory_share()),
            percent(Some(s.compute_share())),
            s.gpus_reconfigured,
            s.whole_gpus_mean(),
            s.whole_gpus_end,
            s.evictions,
            s.planner_calls,
            planner,
        );
    }
    if let (Some(bound), Some(first)) = (bound, summaries.first()) {
        let _ = writeln!(
            out,
            "| upper bound (capacity) | {bound} | {} | - | - | - | - | - | - | - | - | - | - | - |",
            first.pods.saturating_sub(bound)
        );
    }
    out
}
