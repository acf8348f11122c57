//! Renders summaries: a Markdown table (stdout), CSV files and an SVG chart.

mod csv;
mod markdown;
mod svg;

pub use csv::{layout_csv, pods_csv, summary_csv, timeseries_csv};
pub use markdown::markdown_table;
pub use svg::chart;

use crate::metrics::{Sample, Summary};
use crate::strategy::StrategyKind;
use crate::trace::Millis;

/// One strategy's state averaged over a time bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub start: Millis,
    pub end: Millis,
    pub memory_share: f64,
    pub compute_share: f64,
    pub running: f64,
    pub pending: f64,
}

/// When the last of the compared runs ended: the common horizon of the time series and chart.
pub fn latest_end(summaries: &[Summary]) -> Millis {
    summaries.iter().map(|s| s.end).max().unwrap_or(0)
}

/// The p95 waits over the pods both `summary` and the run's `greedy` served: `summary`'s, then
/// greedy's ([`Summary::shared_wait_percentile`]); `None` for greedy itself or without it.
fn p95_shared_with_greedy(summary: &Summary, summaries: &[Summary]) -> Option<(f64, f64)> {
    let greedy = StrategyKind::Greedy.to_string();
    if summary.strategy == greedy {
        return None;
    }
    let baseline = summaries.iter().find(|s| s.strategy == greedy)?;
    summary.shared_wait_percentile(baseline, 0.95)
}

/// Time-averages a step series over `count` equal buckets of `[0, end]`; after its own end a
/// series keeps its last state.
pub fn resample(summary: &Summary, end: Millis, count: usize) -> Vec<Bucket> {
    let count = count.max(1);
    let end = end.max(1);
    let series = &summary.series;
    let mut buckets = Vec::with_capacity(count);
    let mut i = 0usize;
    for b in 0..count {
        let start = end * b as u64 / count as u64;
        let stop = end * (b as u64 + 1) / count as u64;
        let (mut memory, mut compute, mut running, mut pending) = (0.0, 0.0, 0.0, 0.0);
        let mut t = start;
        while t < stop {
            while i + 1 < series.len() && series[i + 1].time <= t {
                i += 1;
            }
            let next = series.get(i + 1).map_or(stop, |s| s.time.min(stop));
            let next = if next <= t { stop } else { next };
            let s: &Sample = &series[i];
            let dt = (next - t) as f64;
            memory += s.memory_slices as f64 * dt;
            compute += s.compute_slices as f64 * dt;
            running += f64::from(s.running) * dt;
            pending += f64::from(s.pending) * dt;
            t = next;
        }
        let span = (stop - start).max(1) as f64;
        buckets.push(Bucket {
            start,
            end: stop,
            memory_share: memory / span / summary.capacity_memory.max(1) as f64,
            compute_share: compute / span / summary.capacity_compute.max(1) as f64,
            running: running / span,
            pending: pending / span,
        });
    }
    buckets
}
