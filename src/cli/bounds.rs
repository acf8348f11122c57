//! Bounds on numeric command-line options: every number a flag takes has a range, and one
//! outside it is refused by clap with the flag, the value and the range, instead of sizing
//! memory or a wait by it (`simulate --buckets 10000000000`, `demo --duration 1e12`).

// Most of these bound the developer tools' flags (demo, simulate, apiserver), which the
// operator's build (`--no-default-features`) leaves out.
#![cfg_attr(not(feature = "demo"), allow(dead_code))]

use std::ops::RangeInclusive;

use geometer_solver::words::quoted;

/// A number within `range`, in `unit`s, as clap's value parser.
fn within<T>(text: &str, range: RangeInclusive<T>, unit: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let value: T = text.trim().parse().map_err(|_| format!("{} is not a number", quoted(text)))?;
    // Written so that NaN, which compares false with everything, is refused too.
    if !(value >= *range.start() && value <= *range.end()) {
        return Err(format!("{text} is out of range: give {} to {} {unit}", range.start(), range.end()));
    }
    Ok(value)
}

macro_rules! bounded {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $range:expr, $unit:literal;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name(text: &str) -> Result<$ty, String> {
            within(text, $range, $unit)
        }
    )*};
}

bounded! {
    /// Solver time limits: up to 10 minutes.
    time_limit_ms: u64 = 1..=600_000, "milliseconds";
    /// Scenario lengths: up to a week of simulated time.
    scenario_seconds: f64 = 0.0..=604_800.0, "seconds";
    /// Positive scenario intervals (submissions, progress lines): up to an hour.
    interval_seconds: f64 = 0.001..=3_600.0, "seconds";
    /// Replay speed-ups.
    speed: f64 = 0.01..=1_000.0, "times real time";
    /// Simulated NVML call latency: up to a minute.
    nvml_latency_ms: u64 = 0..=60_000, "milliseconds";
    /// Simulated demo nodes.
    demo_nodes: usize = 1..=64, "nodes";
    /// Time buckets of the simulator's time series.
    buckets: usize = 1..=100_000, "buckets";
    /// Pods of a generated trace.
    generated_pods: usize = 1..=10_000_000, "pods";
    /// Load as a multiple of the cluster's GPUs.
    load_share: f64 = 0.001..=100.0, "times the GPUs";
    /// A GPU count to take a load share of.
    load_gpus: u64 = 1..=10_000_000, "GPUs";
    /// Watch history of the in-memory API server.
    history: usize = 1..=10_000_000, "changes";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_name_the_range() {
        assert_eq!(buckets("200"), Ok(200));
        assert_eq!(buckets("0"), Err("0 is out of range: give 1 to 100000 buckets".into()));
        assert!(buckets("10000000000").unwrap_err().contains("out of range"));
        assert!(scenario_seconds("1e12").unwrap_err().contains("604800"));
        assert_eq!(scenario_seconds("NaN"), Err("NaN is out of range: give 0 to 604800 seconds".into()));
        assert_eq!(scenario_seconds("inf"), Err("inf is out of range: give 0 to 604800 seconds".into()));
        assert_eq!(speed("-1"), Err("-1 is out of range: give 0.01 to 1000 times real time".into()));
        assert_eq!(time_limit_ms("abc"), Err("\"abc\" is not a number".into()));
    }
}
