use std::fmt::Write as _;

use super::{latest_end, p95_shared_with_greedy, resample};
use crate::metrics::Summary;
use crate::workload::Workload;

fn opt(value: Option<f64>) -> String {
    value.map_or_else(String::new, |v| format!("{v:.3}"))
}

/// A share as a fraction to four places; empty for none.
fn fraction(value: Option<f64>) -> String {
    value.map_or_else(String::new, |v| format!("{v:.4}"))
}

/// One row per strategy, machine-readable (times in seconds, shares as fractions).
pub fn summary_csv(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "strategy,pods,served,not_served,wait_p50_s,wait_p95_s,wait_p99_s,memory_share_mean,memory_share_saturated,memory_share_saturated_usable,saturated_s,compute_share_mean,gpus_reconfigured,whole_gpus_mean,whole_gpus_end,evictions,planner_calls,planner_ms_total,planner_ms_max,end_s,gangs,gangs_started,gang_timeouts,gang_idle_slice_s,gpus_reconfigured_for_nothing,wait_p95_s_shared_with_greedy,greedy_wait_p95_s_shared,memory_unheld_saturated_reconfiguring,memory_unheld_saturated_stabilising\n",
    );
    for s in summaries {
        let shared = p95_shared_with_greedy(s, summaries);
        let out_of_play = s.saturated_unheld_shares();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{:.4},{},{},{:.3},{:.4},{},{:.3},{},{},{},{:.1},{:.1},{:.3},{},{},{},{:.3},{},{},{},{},{}",
            s.strategy,
            s.pods,
            s.served,
            s.not_served,
            opt(s.wait_percentile(0.50)),
            opt(s.wait_percentile(0.95)),
            opt(s.wait_percentile(0.99)),
            s.memory_share(),
            fraction(s.saturated_memory_share()),
            fraction(s.saturated_usable_share()),
            s.saturated_time as f64 / 1000.0,
            s.compute_share(),
            s.gpus_reconfigured,
            s.whole_gpus_mean(),
            s.whole_gpus_end,
            s.evictions,
            s.planner_calls,
            s.planner_time.as_secs_f64() * 1000.0,
            s.planner_time_max.as_secs_f64() * 1000.0,
            s.end as f64 / 1000.0,
            s.gangs,
            s.gangs_started,
            s.gang_timeouts,
            s.gang_idle_slice_seconds(),
            s.gpus_reconfigured_for_nothing,
            opt(shared.map(|w| w.0)),
            opt(shared.map(|w| w.1)),
            fraction(out_of_play.map(|o| o.0)),
            fraction(out_of_play.map(|o| o.1)),
        );
    }
    out
}

/// Every strategy on a common grid of `buckets` time buckets (means over each bucket).
pub fn timeseries_csv(summaries: &[Summary], buckets: usize) -> String {
    let end = latest_end(summaries);
    let mut out = String::from("strategy,start_s,end_s,memory_share,compute_share,running,pending\n");
    for s in summaries {
        for b in resample(s, end, buckets) {
            let _ = writeln!(
                out,
                "{},{:.3},{:.3},{:.4},{:.4},{:.2},{:.2}",
                s.strategy,
                b.start as f64 / 1000.0,
                b.end as f64 / 1000.0,
                b.memory_share,
                b.compute_share,
                b.running,
                b.pending
            );
        }
    }
    out
}

/// One row per pod and strategy: what it asked for, when it first started, how long it waited.
pub fn pods_csv(summaries: &[Summary], workload: &Workload) -> String {
    let mut out = String::from("strategy,pod,request,arrival_s,first_start_s,wait_s,evictions,served\n");
    let requests: Vec<String> = workload
        .pods
        .iter()
        .map(|p| {
            let items: Vec<String> = p
                .mig
                .iter()
                .map(|&(k, c)| {
                    if c == 1 {
                        workload.profiles[k].clone()
                    } else {
                        format!("{}*{c}", workload.profiles[k])
                    }
                })
                .collect();
            items.join("|")
        })
        .collect();
    for s in summaries {
        for ((pod, request), o) in workload.pods.iter().zip(&requests).zip(&s.outcomes) {
            let _ = writeln!(
                out,
                "{},{},{},{:.3},{},{:.3},{},{}",
                s.strategy,
                pod.name,
                request,
                pod.arrival as f64 / 1000.0,
                o.first_start.map_or_else(String::new, |t| format!("{:.3}", t as f64 / 1000.0)),
                o.waited as f64 / 1000.0,
                o.evictions,
                o.served
            );
        }
    }
    out
}

/// One row per strategy, model and geometry the GPUs ended the run with: how many GPUs.
pub fn layout_csv(summaries: &[Summary]) -> String {
    let mut out = String::from("strategy,model,geometry,gpus\n");
    for s in summaries {
        for l in &s.layout {
            let _ = writeln!(out, "{},{},{},{}", s.strategy, l.model, l.geometry, l.gpus);
        }
    }
    out
}
