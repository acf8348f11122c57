//! An upper bound on the pods any packer could serve on a cluster: the row the strategies are
//! measured against in the comparison table.
//!
//! A whole GPU (MIG mode off, `--whole-gpus whole`) counts as all of its GPU's memory and
//! compute slices, like the full-GPU profile it replaces.
//!
//! A pod that never finishes (load mode) holds its slices to the end, so the pods served at the
//! end fit in the cluster together. The bound relaxes that: per dimension (memory slices,
//! compute slices) the most pods whose needs sum within the capacity of the models they may use,
//! which taking the smallest needs first gives exactly. Geometry (placements, one 4g per GPU),
//! nodes, CPU and memory are left out, so no packing beats the bound, and how far a strategy
//! stays under it is at most what it lost. A pod that finishes (trace timestamps) frees its
//! slices, so the bound only asks that it fits on its models at all.

use crate::cluster::Cluster;
use crate::workload::{SimPod, Workload};

/// Slices a pod needs, and the models it can run on (as a bit set over `Cluster::models`).
#[derive(Debug, Clone, Copy)]
struct Need {
    memory: u64,
    compute: u64,
    models: u32,
}

/// The most pods any strategy could have served in this run.
pub fn served_bound(cluster: &Cluster, workload: &Workload) -> usize {
    let gpus: Vec<u64> = (0..cluster.models.len())
        .map(|m| cluster.nodes.iter().filter(|n| n.model == m).map(|n| u64::from(n.gpus)).sum())
        .collect();
    let needs: Vec<Option<Need>> = workload.pods.iter().map(|p| need(cluster, &gpus, workload, p)).collect();
    let finishing =
        workload.pods.iter().zip(&needs).filter(|(p, n)| p.duration.is_some() && n.is_some()).count();
    let staying: Vec<Need> = workload
        .pods
        .iter()
        .zip(&needs)
        .filter(|(p, _)| p.duration.is_none())
        .filter_map(|(_, n)| *n)
        .collect();
    finishing + staying_bound(cluster, &staying)
}

/// What `pod` needs on the models it may use; `None` when no model of the cluster can hold it.
/// `gpus` is each model's GPU count.
fn need(cluster: &Cluster, gpus: &[u64], workload: &Workload, pod: &SimPod) -> Option<Need> {
    let mut models = 0u32;
    let (mut memory, mut compute) = (0u64, 0u64);
    for (m, model) in cluster.models.iter().enumerate() {
        let gpus = gpus[m];
        if !pod.may_use(m) || gpus == 0 {
            continue;
        }
        let Some((mem, comp)) = pod.slices_on(model, &workload.profiles) else { continue };
        if mem > gpus * u64::from(model.memory_slices) {
            continue;
        }
        // Profile sizes are the same on every model that has the profile; keep the smallest.
        memory = if models == 0 { mem } else { memory.min(mem) };
        compute = if models == 0 { comp } else { compute.min(comp) };
        models |= 1 << m;
    }
    (models != 0).then_some(Need { memory, compute, models })
}

/// Pods that hold their slices to the end: for each dimension and each set of models `T`, the
/// pods confined to `T` fit in `T`'s capacity and the rest in the whole cluster's; the least of
/// those counts holds for every packing.
fn staying_bound(cluster: &Cluster, pods: &[Need]) -> usize {
    let all = (1u32 << cluster.models.len()) - 1;
    let mut best = pods.len();
    for dim in [Dimension::Memory, Dimension::Compute] {
        for set in 1..=all {
            let (inside, outside): (Vec<&Need>, Vec<&Need>) = pods.iter().partition(|n| n.models & !set == 0);
            let sizes = |list: Vec<&Need>| list.into_iter().map(|n| dim.of(n)).collect::<Vec<_>>();
            let bound = most_that_fit(sizes(inside), dim.capacity(cluster, set))
                + most_that_fit(sizes(outside), dim.capacity(cluster, all));
            best = best.min(bound);
        }
    }
    best
}

#[derive(Debug, Clone, Copy)]
enum Dimension {
    Memory,
    Compute,
}

impl Dimension {
    fn of(self, need: &Need) -> u64 {
        match self {
            Dimension::Memory => need.memory,
            Dimension::Compute => need.compute,
        }
    }

    /// Slices of this dimension on the GPUs of the models in `set`.
    fn capacity(self, cluster: &Cluster, set: u32) -> u64 {
        cluster
            .nodes
            .iter()
            .filter(|n| set & (1 << n.model) != 0)
            .map(|n| {
                let model = &cluster.models[n.model];
                let per_gpu = match self {
                    Dimension::Memory => model.memory_slices,
                    Dimension::Compute => model.compute_slices,
                };
                u64::from(n.gpus) * u64::from(per_gpu)
            })
            .sum()
    }
}

/// The most items whose sizes sum within `capacity`: the smallest first.
fn most_that_fit(mut sizes: Vec<u64>, capacity: u64) -> usize {
    sizes.sort_unstable();
    let mut used = 0u64;
    sizes
        .iter()
        .take_while(|&&s| {
            used += s;
            used <= capacity
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ModelInfo, NodeSpec, ProfileInfo};
    use crate::mapping::{Mapping, WholeGpus};
    use crate::trace::{GpuRequest, Trace, TracePod};

    fn model(name: &str) -> ModelInfo {
        let profile = |name: &str, c: u8, m: u8| ProfileInfo {
            name: name.into(),
            compute_slices: c,
            memory_slices: m,
            memory_mib: u64::from(m) * 10_240,
        };
        ModelInfo {
            name: name.into(),
            compute_slices: 7,
            memory_slices: 8,
            memory_mib: 81_920,
            mode_change_needs_reset: false,
            profiles: vec![profile("1g.10gb", 1, 1), profile("3g.40gb", 3, 4), profile("7g.80gb", 7, 8)],
        }
    }

    fn cluster(gpus_per_model: &[u32]) -> Cluster {
        let names = ["A100-80GB", "H100-80GB"];
        let models = gpus_per_model.iter().enumerate().map(|(i, _)| model(names[i])).collect();
        let nodes = gpus_per_model
            .iter()
            .enumerate()
            .map(|(i, &gpus)| NodeSpec {
                name: format!("n{i}"),
                model: i,
                gpus,
                cpu_milli: None,
                memory_mib: None,
            })
            .collect();
        Cluster::new(models, nodes).unwrap()
    }

    fn pod(profile: &str, model: Option<&str>, duration: Option<u64>) -> TracePod {
        TracePod {
            name: format!("p-{profile}"),
            request: GpuRequest::Mig(vec![(profile.into(), 1)]),
            gpu_models: model.map(|m| vec![m.to_string()]).unwrap_or_default(),
            arrival: 0,
            duration,
            cpu_milli: 0,
            memory_mib: 0,
            priority: 0,
            nodes: Vec::new(),
            do_not_disrupt: false,
            gang: None,
        }
    }

    fn bound(cluster: &Cluster, pods: Vec<TracePod>) -> usize {
        let trace = Trace { pods, notes: Vec::new() };
        served_bound(cluster, &Workload::new(&trace, cluster, Mapping::Compute, WholeGpus::Whole))
    }

    #[test]
    fn seven_small_slices_fill_a_gpu_though_its_memory_has_room_for_eight() {
        let c = cluster(&[1]);
        assert_eq!(bound(&c, (0..9).map(|_| pod("1g.10gb", None, None)).collect()), 7);
    }

    #[test]
    fn the_smallest_pods_count_first() {
        let c = cluster(&[1]);
        let pods = vec![pod("7g.80gb", None, None), pod("3g.40gb", None, None), pod("3g.40gb", None, None)];
        assert_eq!(bound(&c, pods), 2);
    }

    #[test]
    fn pods_confined_to_one_model_share_only_its_capacity() {
        // Two GPUs, one per model; four 3g pods allowed only on H100 fit two at most, and two
        // free pods take the A100.
        let c = cluster(&[1, 1]);
        let mut pods: Vec<TracePod> = (0..4).map(|_| pod("3g.40gb", Some("H100-80GB"), None)).collect();
        pods.extend((0..2).map(|_| pod("3g.40gb", None, None)));
        assert_eq!(bound(&c, pods), 4);
    }

    fn whole(gpus: u32, model: Option<&str>) -> TracePod {
        TracePod {
            name: format!("w-{gpus}"),
            request: GpuRequest::Share { num_gpu: gpus, gpu_milli: 1000 },
            ..pod("7g.80gb", model, None)
        }
    }

    #[test]
    fn a_whole_gpu_counts_as_all_of_its_slices() {
        // One GPU: a whole-GPU pod fills it as the 7g.80gb it replaces would; two never fit.
        let c = cluster(&[1]);
        assert_eq!(bound(&c, vec![whole(1, None)]), 1);
        assert_eq!(bound(&c, vec![whole(1, None), whole(1, None)]), 1);
        // A whole GPU and any slice exceed one GPU: the slice, smallest first, counts.
        assert_eq!(bound(&c, vec![whole(1, None), pod("1g.10gb", None, None)]), 1);
        // Asking for more GPUs than the models it may use have: never servable.
        let c = cluster(&[2, 1]);
        assert_eq!(bound(&c, vec![whole(2, Some("H100-80GB"))]), 0);
        assert_eq!(bound(&c, vec![whole(2, Some("A100-80GB")), whole(1, None)]), 2);
    }

    #[test]
    fn pods_that_finish_count_when_they_fit_at_all() {
        let c = cluster(&[1]);
        let mut pods: Vec<TracePod> = (0..5).map(|_| pod("7g.80gb", None, Some(1000))).collect();
        pods.push(pod("7g.80gb", Some("B200"), Some(1000)));
        assert_eq!(bound(&c, pods), 5);
    }
}
