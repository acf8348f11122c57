//! Right-sizing's measurement: what each pod holding a whole GPU alone uses of it.
//!
//! Each round samples, through NVML, the memory the GPU's compute processes use together
//! (`nvmlDeviceGetComputeRunningProcesses`, `usedGpuMemory`) and the GPU's utilisation
//! (`nvmlDeviceGetUtilizationRates`). PodResources says which pod holds the GPU; a GPU shared by
//! several pods (time-slicing, MPS) is not measured, because NVML's process list cannot tell
//! their processes apart without reading each process's cgroup. A pod's samples fold into a
//! bounded summary (peak, a histogram of [`BUCKETS`] memory buckets for the 95th percentile,
//! utilisation peak and sum): a few hundred bytes per pod whatever the number of samples.
//!
//! The summary reaches `MigNode.status.usage` when it changes by a bucket or more, when the pods
//! measured change, and otherwise at most once per publish interval (`--usage-publish-interval`,
//! 5 minutes), so that a node of idle pods does not write its status every round.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::nvml::{NvmlBackend, NvmlError};
use geometer_api::{GpuInventory, PodGpuUsage};
use geometer_solver::catalog::Catalog;

/// Memory buckets of the per-pod histogram: the percentile's resolution is the GPU's memory
/// divided by this (640 MiB on an 80 GB GPU), finer than the smallest MIG slice.
pub(crate) const BUCKETS: usize = 128;

/// One GPU's reading in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sample {
    pub pod: String,
    pub gpu: u32,
    pub model: String,
    /// The model's memory, MiB (the histogram's range).
    pub total_mib: u64,
    pub memory_mib: u64,
    pub utilization: u32,
}

/// A whole GPU held by exactly one pod, of a model the catalog knows: what a round measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pod: String,
    gpu: u32,
    model: String,
    total_mib: u64,
}

/// The GPUs of the inventory a round measures (none on a node without whole GPUs in use).
pub(crate) fn targets(catalog: &Catalog, gpus: &[GpuInventory]) -> Vec<Target> {
    gpus.iter()
        .filter(|g| !g.mig_mode.current && g.shared_with.is_empty())
        .filter_map(|g| {
            let (pod, model) = (g.pod.as_ref()?, catalog.find(&g.model)?);
            Some(Target {
                pod: pod.clone(),
                gpu: g.index,
                model: model.key.clone(),
                total_mib: model.total_memory_mib(),
            })
        })
        .collect()
}

/// Reads a sample of every target. A GPU NVML cannot read this time is left out of this round
/// (and said in the returned errors); the others are still sampled.
pub(crate) fn sample(nvml: &dyn NvmlBackend, targets: Vec<Target>) -> (Vec<Sample>, Vec<NvmlError>) {
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    for t in targets {
        let read = nvml.gpu_processes(t.gpu).and_then(|p| Ok((p, nvml.utilization(t.gpu)?)));
        match read {
            Ok((processes, utilization)) => samples.push(Sample {
                pod: t.pod,
                gpu: t.gpu,
                model: t.model,
                total_mib: t.total_mib,
                memory_mib: processes
                    .iter()
                    .filter_map(|p| p.used_memory_bytes)
                    .sum::<u64>()
                    .div_ceil(1 << 20),
                utilization: utilization.min(100),
            }),
            Err(e) => errors.push(e),
        }
    }
    (samples, errors)
}

/// One pod's summary so far.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Track {
    gpu: u32,
    model: String,
    total_mib: u64,
    since: Timestamp,
    samples: u32,
    peak_mib: u64,
    histogram: Vec<u32>,
    utilization_sum: u64,
    utilization_peak: u32,
}

impl Track {
    fn new(sample: &Sample, since: Timestamp) -> Track {
        Track {
            gpu: sample.gpu,
            model: sample.model.clone(),
            total_mib: sample.total_mib.max(1),
            since,
            samples: 0,
            peak_mib: 0,
            histogram: vec![0; BUCKETS],
            utilization_sum: 0,
            utilization_peak: 0,
        }
    }

    /// A track taken back from a published summary (after an agent restart): the peak, the
    /// count and the mean are exact; the histogram puts 95% of the samples at the published
    /// percentile and the rest at the peak.
    fn from_published(u: &PodGpuUsage, total_mib: u64) -> Track {
        let mut track = Track {
            gpu: u.gpu,
            model: u.model.clone(),
            total_mib: total_mib.max(1),
            since: u.since.0,
            samples: u.samples,
            peak_mib: u.peak_memory_mib,
            histogram: vec![0; BUCKETS],
            utilization_sum: u64::from(u.mean_utilization_percent.min(100)) * u64::from(u.samples),
            utilization_peak: u.peak_utilization_percent,
        };
        let at_p95 = u.samples - u.samples / 20;
        let p95 = track.bucket(u.p95_memory_mib);
        let peak = track.bucket(u.peak_memory_mib);
        track.histogram[p95] += at_p95;
        track.histogram[peak] += u.samples - at_p95;
        track
    }

    fn bucket(&self, mib: u64) -> usize {
        // Bucket b holds (b * width, (b + 1) * width]; its upper edge is what the summary says.
        // Saturating: a summary read back from the status may hold any value the CRD allows.
        let b = mib.saturating_mul(BUCKETS as u64).div_ceil(self.total_mib).saturating_sub(1);
        (b as usize).min(BUCKETS - 1)
    }

    fn upper_edge(&self, bucket: usize) -> u64 {
        ((bucket as u64 + 1).saturating_mul(self.total_mib)).div_ceil(BUCKETS as u64)
    }

    fn add(&mut self, sample: &Sample) {
        self.samples = self.samples.saturating_add(1);
        self.peak_mib = self.peak_mib.max(sample.memory_mib);
        let b = self.bucket(sample.memory_mib);
        self.histogram[b] = self.histogram[b].saturating_add(1);
        self.utilization_sum = self.utilization_sum.saturating_add(u64::from(sample.utilization));
        self.utilization_peak = self.utilization_peak.max(sample.utilization);
    }

    /// The 95th percentile: the upper edge of the bucket holding it, never above the peak.
    fn p95_mib(&self) -> u64 {
        let rank = (u64::from(self.samples) * 95).div_ceil(100).max(1);
        let mut seen = 0u64;
        for (b, &n) in self.histogram.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                return self.upper_edge(b).min(self.peak_mib);
            }
        }
        self.peak_mib
    }

    fn summary(&self, pod: &str) -> PodGpuUsage {
        PodGpuUsage {
            pod: pod.to_string(),
            gpu: self.gpu,
            model: self.model.clone(),
            since: Time(self.since),
            samples: self.samples,
            peak_memory_mib: self.peak_mib,
            p95_memory_mib: self.p95_mib(),
            peak_utilization_percent: self.utilization_peak,
            mean_utilization_percent: self.utilization_sum.checked_div(u64::from(self.samples)).unwrap_or(0)
                as u32,
        }
    }
}

/// Every measured pod's summary, kept across rounds by the agent.
#[derive(Debug, Default)]
pub(crate) struct UsageBook {
    tracks: BTreeMap<String, Track>,
    published_at: Option<Timestamp>,
    /// Taken back from the status once, at the agent's first round.
    resumed: bool,
}

impl UsageBook {
    /// Folds this round's samples in. Pods no longer sampled (gone, moved, now sharing) are
    /// dropped; a pod found on another GPU starts again. The first call takes back what the
    /// status published (a restarted agent keeps the peaks it had measured).
    pub(crate) fn record(&mut self, published: &[PodGpuUsage], samples: &[Sample], now: Timestamp) {
        if !self.resumed {
            self.resumed = true;
            for u in published {
                if let Some(s) =
                    samples.iter().find(|s| s.pod == u.pod && s.gpu == u.gpu && s.model == u.model)
                {
                    self.tracks.insert(u.pod.clone(), Track::from_published(u, s.total_mib));
                }
            }
        }
        self.tracks.retain(|pod, t| samples.iter().any(|s| &s.pod == pod && s.gpu == t.gpu));
        for s in samples {
            let track = self.tracks.entry(s.pod.clone()).or_insert_with(|| Track::new(s, now));
            track.add(s);
        }
    }

    /// What `status.usage` should say now: the fresh summaries when they differ from
    /// `published` by a histogram bucket or more (or 10 points of peak utilisation, or in the
    /// pods measured), or when `every` has passed since the last publication; otherwise
    /// `published` as it is.
    pub(crate) fn publication(
        &mut self,
        published: &[PodGpuUsage],
        now: Timestamp,
        every: SignedDuration,
    ) -> Vec<PodGpuUsage> {
        let fresh: Vec<PodGpuUsage> = self.tracks.iter().map(|(pod, t)| t.summary(pod)).collect();
        let due = self.published_at.is_none_or(|at| now.duration_since(at) >= every);
        if due || self.coarse(&fresh) != self.coarse(published) {
            self.published_at = Some(now);
            return fresh;
        }
        published.to_vec()
    }

    /// Summaries at the histogram's resolution: what must change for a publication.
    fn coarse(&self, list: &[PodGpuUsage]) -> Vec<(String, u32, usize, usize, u32)> {
        list.iter()
            .map(|u| {
                let bucket = |mib| self.tracks.get(&u.pod).map_or(usize::MAX, |t| t.bucket(mib));
                (
                    u.pod.clone(),
                    u.gpu,
                    bucket(u.peak_memory_mib),
                    bucket(u.p95_memory_mib),
                    u.peak_utilization_percent / 10,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pod: &str, memory_mib: u64, utilization: u32) -> Sample {
        Sample {
            pod: pod.into(),
            gpu: 0,
            model: "H100-80GB".into(),
            total_mib: 81_920,
            memory_mib,
            utilization,
        }
    }

    const FIVE_MINUTES: SignedDuration = SignedDuration::from_mins(5);

    fn at(minutes: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_mins(minutes)
    }

    #[test]
    fn summary_has_peak_percentile_and_utilisation() {
        let mut book = UsageBook::default();
        for i in 0..100u64 {
            // 99 samples near 6 GiB, one spike to 9 GiB.
            let memory = if i == 50 { 9_000 } else { 6_000 + i };
            book.record(&[], &[sample("ml/a", memory, (i % 50) as u32)], at(i as i64));
        }
        let usage = book.publication(&[], at(100), FIVE_MINUTES);
        assert_eq!(usage.len(), 1);
        let u = &usage[0];
        assert_eq!((u.pod.as_str(), u.samples, u.peak_memory_mib), ("ml/a", 100, 9_000));
        assert!(u.p95_memory_mib >= 6_099 && u.p95_memory_mib <= 6_099 + 640, "{u:?}");
        assert_eq!((u.peak_utilization_percent, u.mean_utilization_percent), (49, 24));
        assert_eq!(u.since.0, at(0));
    }

    #[test]
    fn unchanged_summaries_are_published_every_few_minutes_only() {
        let mut book = UsageBook::default();
        book.record(&[], &[sample("ml/a", 6_000, 10)], at(0));
        let first = book.publication(&[], at(0), FIVE_MINUTES);
        book.record(&first, &[sample("ml/a", 6_010, 10)], at(1));
        assert_eq!(
            book.publication(&first, at(1), FIVE_MINUTES),
            first,
            "same bucket, same peak bucket: not rewritten"
        );
        book.record(&first, &[sample("ml/a", 20_000, 10)], at(2));
        let spiked = book.publication(&first, at(2), FIVE_MINUTES);
        assert_eq!(spiked[0].peak_memory_mib, 20_000, "a new peak is published at once");
        book.record(&spiked, &[sample("ml/a", 6_000, 10)], at(3));
        assert_eq!(book.publication(&spiked, at(3), FIVE_MINUTES), spiked);
        book.record(&spiked, &[sample("ml/a", 6_000, 10)], at(8));
        assert_eq!(
            book.publication(&spiked, at(8), FIVE_MINUTES)[0].samples,
            5,
            "counts refreshed after the publish interval"
        );
    }

    #[test]
    fn pods_that_leave_are_dropped_and_a_restart_keeps_the_peak() {
        let mut book = UsageBook::default();
        book.record(&[], &[sample("ml/a", 30_000, 90), sample("ml/b", 5_000, 5)], at(0));
        book.record(&[], &[sample("ml/b", 5_000, 5)], at(1));
        let published = book.publication(&[], at(1), FIVE_MINUTES);
        assert_eq!(published.iter().map(|u| u.pod.as_str()).collect::<Vec<_>>(), ["ml/b"]);

        let mut restarted = UsageBook::default();
        restarted.record(&published, &[sample("ml/b", 4_000, 5)], at(2));
        let again = restarted.publication(&published, at(2), FIVE_MINUTES);
        assert_eq!((again[0].samples, again[0].peak_memory_mib), (3, 5_000));
        assert_eq!(again[0].since.0, at(0), "measured since the first sample, across the restart");
    }

    #[test]
    fn any_published_value_is_taken_back_without_overflow() {
        let mut book = UsageBook::default();
        let hostile = PodGpuUsage {
            pod: "ml/a".into(),
            gpu: 0,
            model: "H100-80GB".into(),
            since: Time(at(0)),
            samples: u32::MAX,
            peak_memory_mib: u64::MAX,
            p95_memory_mib: u64::MAX,
            peak_utilization_percent: u32::MAX,
            mean_utilization_percent: u32::MAX,
        };
        book.record(std::slice::from_ref(&hostile), &[sample("ml/a", 6_000, 10)], at(1));
        let again = book.publication(&[hostile], at(1), FIVE_MINUTES);
        assert_eq!(again[0].peak_memory_mib, u64::MAX);
    }
}
