//! The demo's closing numbers: pods served, waits, GPUs reconfigured, evictions, and how much
//! of the GPUs' memory slices pods held before and after Geometer reshaped them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::{Ending, PodRun};
use geometer_controller::rightsizing::recommend::{Recommendation, Verdict};

use super::workload::Submitted;

/// One sample of how much of the GPUs' memory slices running pods hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageSample {
    pub at: Instant,
    pub used: u64,
    pub total: u64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    pub submitted: usize,
    /// Pods that started running (replacements of evicted pods included).
    pub served: usize,
    pub succeeded: usize,
    /// Submitted but never started by the end.
    pub unserved: usize,
    pub evictions: usize,
    pub admission_failures: usize,
    /// From creation to running, over the pods served.
    pub wait_median: Option<Duration>,
    pub wait_p95: Option<Duration>,
    pub wait_max: Option<Duration>,
    /// Per profile: (submitted, served).
    pub by_profile: BTreeMap<String, (usize, usize)>,
    pub plans: usize,
    pub plans_applied: usize,
    /// Distinct GPUs whose instances were destroyed or created.
    pub gpus_reconfigured: usize,
    /// Mean share of memory slices held by pods before the first reconfiguration, and from the
    /// first reconfigured node until the last pod arrived (None when there was no such stretch).
    pub utilisation_before: Option<f64>,
    pub utilisation_after: Option<f64>,
    /// What right-sizing found: one line per workload that a slice would hold, and one for
    /// those that need their whole GPUs.
    pub rightsizing: Vec<String>,
    /// The same workload on the initial layout kept fixed (its `utilisation_before` is its mean
    /// memory-slice use until the last arrival).
    pub without_geometer: Option<Box<Summary>>,
    /// This run's mean memory-slice use until the last arrival, to compare with it.
    pub utilisation: Option<f64>,
}

/// The summary's right-sizing lines from the recommendations seen during the run.
pub fn rightsizing_lines<'a>(recommended: impl Iterator<Item = &'a Recommendation>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut whole = 0;
    for r in recommended {
        match &r.verdict {
            Verdict::Slice { profile, gpus_now, gpus_as_slices, .. } => lines.push(format!(
                "{}/{} on {}: {} pods measured, peak {} MiB, {}% busy -> ask for {profile}: {gpus_now} whole GPUs become {gpus_as_slices}",
                r.owner.kind.to_lowercase(),
                r.owner.name,
                r.model,
                r.pods.len(),
                r.peak_memory_mib,
                r.mean_utilization_percent,
            )),
            Verdict::WholeGpu { .. } => whole += 1,
            _ => {}
        }
    }
    if whole > 0 {
        lines.push(format!("{whole} measured workloads need their whole GPUs"));
    }
    if !lines.is_empty() {
        // The chat replicas keep running after the summary, so the cluster still says the same.
        lines.push(
            "the cluster says the same: geometer recommend --min-samples 3 (with --keep-serving, or --join)"
                .into(),
        );
    }
    lines
}

/// The `q` quantile (0..=1) of sorted durations, nearest rank.
pub fn quantile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Mean of `used/total` over the samples in `[from, to)`.
pub fn mean_utilisation(samples: &[UsageSample], from: Option<Instant>, to: Option<Instant>) -> Option<f64> {
    let picked: Vec<f64> = samples
        .iter()
        .filter(|s| from.is_none_or(|f| s.at >= f) && to.is_none_or(|t| s.at < t) && s.total > 0)
        .map(|s| s.used as f64 / s.total as f64)
        .collect();
    (!picked.is_empty()).then(|| picked.iter().sum::<f64>() / picked.len() as f64)
}

/// Puts the numbers together from what the workload submitted and what the kubelet ran.
pub fn summarize(submitted: &BTreeMap<String, Submitted>, runs: &BTreeMap<String, PodRun>) -> Summary {
    let mut s = Summary { submitted: submitted.len(), ..Summary::default() };
    let mut waits = Vec::new();
    for (uid, sub) in submitted {
        let entry = s.by_profile.entry(sub.profile.to_string()).or_insert((0, 0));
        entry.0 += 1;
        match runs.get(uid) {
            Some(run) if run.ended.map(|e| e.1) != Some(Ending::AdmissionFailed) => {
                s.served += 1;
                entry.1 += 1;
                waits.push(run.started.saturating_duration_since(sub.at));
                match run.ended.map(|e| e.1) {
                    Some(Ending::Succeeded) => s.succeeded += 1,
                    Some(Ending::Stopped) => s.evictions += 1,
                    _ => {}
                }
            }
            Some(_) => {
                s.admission_failures += 1;
                s.unserved += 1;
            }
            None => s.unserved += 1,
        }
    }
    waits.sort();
    s.wait_median = quantile(&waits, 0.5);
    s.wait_p95 = quantile(&waits, 0.95);
    s.wait_max = waits.last().copied();
    s
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_string(), |d| format!("{:.1}s", d.as_secs_f64()))
}

fn percent(f: Option<f64>) -> String {
    f.map_or_else(|| "-".to_string(), |f| format!("{:.0}%", f * 100.0))
}

impl Summary {
    /// The closing block the demo prints.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Summary");
        let _ = writeln!(out, "  pods submitted      {}", self.submitted);
        let _ = writeln!(
            out,
            "  pods served         {} ({} finished, {} evicted and resubmitted), {} never started",
            self.served, self.succeeded, self.evictions, self.unserved
        );
        if self.admission_failures > 0 {
            let _ = writeln!(out, "  refused by kubelet  {}", self.admission_failures);
        }
        let _ = writeln!(
            out,
            "  wait to run         median {}, p95 {}, max {} (wall clock)",
            secs(self.wait_median),
            secs(self.wait_p95),
            secs(self.wait_max)
        );
        let profiles: Vec<String> =
            self.by_profile.iter().map(|(p, (sub, served))| format!("{p} {served}/{sub}")).collect();
        let _ = writeln!(out, "  served per profile  {}", profiles.join(", "));
        let _ =
            writeln!(out, "  plans               {} published, {} applied", self.plans, self.plans_applied);
        let _ = writeln!(out, "  GPUs reconfigured   {}", self.gpus_reconfigured);
        let _ = writeln!(out, "  evictions           {}", self.evictions);
        let _ = writeln!(
            out,
            "  memory slices used  {} before the first reconfiguration, {} after it (until the last arrival)",
            percent(self.utilisation_before),
            percent(self.utilisation_after)
        );
        if let Some(base) = &self.without_geometer {
            let _ = writeln!(out, "  without Geometer    the same workload, replayed at the same time on the initial layout kept fixed:");
            let _ = writeln!(
                out,
                "                      pods served {} of {} ({} never started) vs {} with Geometer",
                base.served, base.submitted, base.unserved, self.served
            );
            let _ = writeln!(
                out,
                "                      wait median {}, p95 {} vs {}, {} with Geometer",
                secs(base.wait_median),
                secs(base.wait_p95),
                secs(self.wait_median),
                secs(self.wait_p95)
            );
            let _ = writeln!(
                out,
                "                      memory slices used {} vs {} with Geometer (mean until the last arrival)",
                percent(base.utilisation_before),
                percent(self.utilisation)
            );
        }
        for (i, line) in self.rightsizing.iter().enumerate() {
            let label = if i == 0 { "right-sizing" } else { "" };
            let _ = writeln!(out, "  {label:<19} {line}");
        }
        out
    }
}

/// Distinct `(node, gpu)` pairs among NVML calls that create or destroy GPU instances.
pub fn reconfigured_gpus<'a>(calls: impl Iterator<Item = (&'a str, Option<u32>, bool)>) -> usize {
    calls
        .filter(|(_, gpu, changes)| *changes && gpu.is_some())
        .map(|(n, g, _)| (n, g))
        .collect::<BTreeSet<_>>()
        .len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let d: Vec<Duration> = (1..=20).map(Duration::from_secs).collect();
        assert_eq!(quantile(&d, 0.5), Some(Duration::from_secs(10)));
        assert_eq!(quantile(&d, 0.95), Some(Duration::from_secs(19)));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn waits_evictions_and_unserved_pods_are_counted() {
        let t0 = Instant::now();
        let sub = |name: &str, profile: &'static str| Submitted {
            name: name.into(),
            original: name.into(),
            profile,
            phase: 0,
            at: t0,
            retry: 0,
        };
        let run = |secs: u64, ending: Option<Ending>| PodRun {
            pod: String::new(),
            node: "n".into(),
            started: t0 + Duration::from_secs(secs),
            ended: ending.map(|e| (t0 + Duration::from_secs(99), e)),
            profiles: vec![],
        };
        let submitted = BTreeMap::from([
            ("a".to_string(), sub("a", "1g.10gb")),
            ("b".to_string(), sub("b", "1g.10gb")),
            ("c".to_string(), sub("c", "3g.40gb")),
            ("d".to_string(), sub("d", "3g.40gb")),
        ]);
        let runs = BTreeMap::from([
            ("a".to_string(), run(1, Some(Ending::Succeeded))),
            ("b".to_string(), run(3, Some(Ending::Stopped))),
            ("c".to_string(), run(5, None)),
        ]);
        let s = summarize(&submitted, &runs);
        assert_eq!((s.submitted, s.served, s.succeeded, s.evictions, s.unserved), (4, 3, 1, 1, 1));
        assert_eq!(s.wait_median, Some(Duration::from_secs(3)));
        assert_eq!(s.wait_max, Some(Duration::from_secs(5)));
        assert_eq!(s.by_profile["3g.40gb"], (2, 1));
        assert!(s.render().contains("median 3.0s"));
    }

    #[test]
    fn utilisation_is_averaged_within_the_window() {
        let t0 = Instant::now();
        let at = |s: u64, used: u64| UsageSample { at: t0 + Duration::from_secs(s), used, total: 100 };
        let samples = [at(0, 10), at(1, 30), at(2, 90), at(3, 70)];
        assert_eq!(mean_utilisation(&samples, None, Some(t0 + Duration::from_secs(2))), Some(0.2));
        assert_eq!(mean_utilisation(&samples, Some(t0 + Duration::from_secs(2)), None), Some(0.8));
        assert_eq!(mean_utilisation(&samples, Some(t0 + Duration::from_secs(9)), None), None);
    }
}
