//! The load mode of the Alibaba trace's authors: pods in shuffled (seeded) order, submitted one
//! after another until what they request reaches a chosen share of the cluster's GPUs (e.g. 1.3).
//! Their timestamps would replay as a nearly idle cluster; this keeps the request shapes and
//! makes demand exceed capacity.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{gangs, Millis, Trace, TracePod};

/// How long a pod runs in load mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Pods never finish, as in the authors' simulator: the cluster only fills up.
    Forever,
    /// Pods keep the lifetime the trace gives them (none: forever).
    Trace,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadMode {
    /// Stop once submitted requests reach this multiple of the cluster's GPUs.
    pub load: f64,
    pub seed: u64,
    /// Time between two submissions.
    pub interval: Millis,
    pub lifetime: Lifetime,
}

/// Picks and orders jobs (a pod, or a gang's members, which arrive together). `gpus_of` says how
/// many GPUs a pod requests (a share counts as a fraction); the job that crosses the target is
/// still submitted. When the trace runs out first, a note says how far it got.
pub fn apply(
    trace: &Trace,
    mode: &LoadMode,
    capacity_gpus: f64,
    gpus_of: impl Fn(&TracePod) -> f64,
) -> Trace {
    let mut order = gangs::jobs(&trace.pods);
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(mode.seed));
    let target = mode.load * capacity_gpus;
    let mut requested = 0.0;
    let mut out = Trace { pods: Vec::new(), notes: trace.notes.clone() };
    let mut submitted = 0u64;
    for job in order {
        if requested >= target {
            break;
        }
        for index in job {
            let mut pod = trace.pods[index].clone();
            requested += gpus_of(&pod);
            pod.arrival = submitted * mode.interval;
            if mode.lifetime == Lifetime::Forever {
                pod.duration = None;
            }
            out.pods.push(pod);
        }
        submitted += 1;
    }
    let reached = if capacity_gpus > 0.0 { requested / capacity_gpus } else { 0.0 };
    out.notes.push(format!(
        "load mode (seed {}): {} of {} pods submitted, one {} every {} s, requesting {:.1} GPUs = {:.0}% of {} GPUs{}",
        mode.seed,
        out.pods.len(),
        trace.pods.len(),
        if out.pods.len() as u64 == submitted { "pod" } else { "job (a pod, or a gang's members together)" },
        mode.interval as f64 / 1000.0,
        requested,
        reached * 100.0,
        capacity_gpus,
        if requested < target {
            format!(" (the trace ran out before the {:.0}% asked for)", mode.load * 100.0)
        } else {
            String::new()
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::GpuRequest;

    fn pod(i: usize) -> TracePod {
        TracePod {
            name: format!("p{i}"),
            arrival: 0,
            duration: Some(5000),
            request: GpuRequest::Share { num_gpu: 1, gpu_milli: 500 },
            cpu_milli: 0,
            memory_mib: 0,
            priority: 0,
            gpu_models: vec![],
            nodes: vec![],
            do_not_disrupt: false,
            gang: None,
        }
    }

    #[test]
    fn stops_at_the_load_and_spaces_arrivals() {
        let trace = Trace { pods: (0..100).map(pod).collect(), notes: vec![] };
        let mode = LoadMode { load: 1.3, seed: 42, interval: 2000, lifetime: Lifetime::Forever };
        let out = apply(&trace, &mode, 10.0, |_| 0.5);
        // 13 GPUs of half-GPU pods: exactly 26 pods.
        assert_eq!(out.pods.len(), 26);
        assert_eq!(out.pods[3].arrival, 6000);
        assert!(out.pods.iter().all(|p| p.duration.is_none()));
        let again = apply(&trace, &mode, 10.0, |_| 0.5);
        assert_eq!(out, again);
        let other = apply(&trace, &LoadMode { seed: 43, ..mode }, 10.0, |_| 0.5);
        assert_ne!(out.pods, other.pods);
    }

    #[test]
    fn says_when_the_trace_runs_out() {
        let trace = Trace { pods: (0..4).map(pod).collect(), notes: vec![] };
        let mode = LoadMode { load: 1.3, seed: 1, interval: 1000, lifetime: Lifetime::Trace };
        let out = apply(&trace, &mode, 10.0, |_| 0.5);
        assert_eq!(out.pods.len(), 4);
        assert_eq!(out.pods[0].duration, Some(5000));
        assert!(out.notes.last().unwrap().contains("ran out"));
    }

    #[test]
    fn a_gang_arrives_together_and_counts_all_its_gpus() {
        let mut pods: Vec<TracePod> = (0..10).map(pod).collect();
        for p in [2, 7, 9] {
            pods[p].gang = Some(crate::trace::GangRef { name: "g".into(), min_members: None });
        }
        let trace = Trace { pods, notes: vec![] };
        let mode = LoadMode { load: 1.0, seed: 5, interval: 1000, lifetime: Lifetime::Trace };
        let out = apply(&trace, &mode, 100.0, |_| 0.5);
        assert_eq!(out.pods.len(), 10, "{:?}", out.notes);
        let members: Vec<&TracePod> = out.pods.iter().filter(|p| p.gang.is_some()).collect();
        assert_eq!(members.len(), 3);
        assert!(members.iter().all(|p| p.arrival == members[0].arrival));
        // Eight jobs, one a second.
        assert_eq!(out.pods.last().unwrap().arrival, 7_000);
        assert!(out.notes.last().unwrap().contains("one job"), "{:?}", out.notes);
    }
}
