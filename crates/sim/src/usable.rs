//! The most memory slices the cluster's pods could hold at an instant: the bound printed next to
//! "memory slices allocated while demand > capacity".
//!
//! Demand exceeding capacity does not mean every slice is wanted: a pod may only use the GPU
//! models its constraints allow, and a whole-GPU pod only a GPU that is whole or may become so
//! (an Ampere GPU changes MIG mode only through a GPU reset, which the planners leave to an
//! administrator, so they never turn one whole). Each running or pending pod's memory slices (the
//! most it holds on any model it may use) may go to any of those models, split at will; the most
//! that can be placed so is a maximum flow from pods to models, and no packer allocates more. Placements, nodes, CPU and memory are
//! ignored, so the bound is loose where those bite, never too low.

use crate::cluster::Cluster;
use crate::workload::{SimPod, Workload, WHOLE_GPU};

/// Beyond this many GPU models the cut over every subset of them (`4^n` steps per instant) is
/// replaced by the two trivial cuts: all demand, all capacity.
const MAX_MODELS_FOR_CUTS: usize = 8;

/// Memory slices of running and pending pods, grouped by the set of models they may use.
#[derive(Debug, Clone)]
pub struct UsableMemory {
    /// Per model: memory slices of its GPUs.
    capacity: Vec<u64>,
    /// Per set of models (a bit set over `Cluster::models`; with more than
    /// [`MAX_MODELS_FOR_CUTS`] models, set 1 is "some model"): memory slices of the pods that
    /// may use exactly those models. Set 0 (pods no GPU can take) never counts.
    demand: Vec<u64>,
    /// Per pod: the models it may use, and the most memory slices it holds on any of them (a
    /// profile's slices differ between models: `1g.10gb` is 2 on an A100-40GB, 1 on an H100).
    pods: Vec<(usize, u64)>,
    /// [`UsableMemory::value`], kept up to date by `add` and `remove`.
    value: u64,
}

impl UsableMemory {
    /// `whole_gpu`: the strategy runs every pod on whole GPUs; `whole_at_start`: per model,
    /// whether its GPUs start with MIG off.
    pub fn new(cluster: &Cluster, workload: &Workload, whole_gpu: bool, whole_at_start: &[bool]) -> Self {
        let capacity = (0..cluster.models.len())
            .map(|m| {
                let per_gpu = u64::from(cluster.models[m].memory_slices);
                cluster.nodes.iter().filter(|n| n.model == m).map(|n| per_gpu * u64::from(n.gpus)).sum()
            })
            .collect();
        let cuts = cluster.models.len() <= MAX_MODELS_FOR_CUTS;
        let pods = workload
            .pods
            .iter()
            .map(|p| {
                let held: Vec<(usize, u64)> = (0..cluster.models.len())
                    .filter_map(|m| {
                        held_on(cluster, workload, p, m, whole_gpu, whole_at_start).map(|h| (m, h))
                    })
                    .collect();
                let most = held.iter().map(|&(_, h)| h).max().unwrap_or(0);
                let set = if cuts {
                    held.iter().map(|&(m, _)| 1 << m).sum()
                } else {
                    usize::from(!held.is_empty())
                };
                (set, most)
            })
            .collect();
        let sets = if cuts { 1 << cluster.models.len() } else { 2 };
        UsableMemory { capacity, demand: vec![0; sets], pods, value: 0 }
    }

    /// Pod `pod` arrives (pending, then running until it finishes).
    pub fn add(&mut self, pod: usize) {
        let (set, memory) = self.pods[pod];
        self.demand[set] += memory;
        self.value = self.cut();
    }

    /// Pod `pod` finishes.
    pub fn remove(&mut self, pod: usize) {
        let (set, memory) = self.pods[pod];
        self.demand[set] -= memory;
        self.value = self.cut();
    }

    /// The most memory slices the current pods could hold.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// The least cut `S` of models: their capacity plus the demand of every pod that may use a
    /// model outside `S`.
    fn cut(&self) -> u64 {
        if self.demand.len() == 2 {
            return self.capacity.iter().sum::<u64>().min(self.demand[1]);
        }
        let sets = self.demand.len();
        (0..sets)
            .map(|cut| {
                let kept: u64 =
                    (0..self.capacity.len()).filter(|m| cut & (1 << m) != 0).map(|m| self.capacity[m]).sum();
                let outside: u64 = (1..sets).filter(|t| t & !cut != 0).map(|t| self.demand[t]).sum();
                kept + outside
            })
            .min()
            .unwrap_or(0)
    }
}

/// The memory slices `pod` holds on a GPU of model `m` under the strategy, or `None` when it
/// may not run there.
fn held_on(
    cluster: &Cluster,
    workload: &Workload,
    pod: &SimPod,
    m: usize,
    whole_gpu: bool,
    whole_at_start: &[bool],
) -> Option<u64> {
    let model = &cluster.models[m];
    if !pod.may_use(m) {
        return None;
    }
    if whole_gpu {
        return (pod.whole_gpus > 0).then(|| u64::from(model.memory_slices) * u64::from(pod.whole_gpus));
    }
    // A whole GPU only where one is whole or may become so.
    let whole_ok = whole_at_start[m] || !model.mode_change_needs_reset;
    if !whole_ok && pod.mig.iter().any(|&(key, _)| key == WHOLE_GPU) {
        return None;
    }
    pod.slices_on(model, &workload.profiles).map(|(memory, _)| memory)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usable(capacity: Vec<u64>, demand: &[(u32, u64)]) -> u64 {
        let sets = 1 << capacity.len();
        let pods = demand.iter().map(|&(set, memory)| (set as usize, memory)).collect();
        let mut u = UsableMemory { capacity, demand: vec![0; sets], pods, value: 0 };
        for pod in 0..demand.len() {
            u.add(pod);
        }
        u.value()
    }

    #[test]
    fn demand_a_model_cannot_take_leaves_its_slices_unusable() {
        // Model 0 (an A100) 2048 slices, model 1 (an H100) 2048; whole-GPU pods may only use
        // the H100s, MIG pods either.
        assert_eq!(usable(vec![2048, 2048], &[(0b10, 3000), (0b11, 1000)]), 3048);
        assert_eq!(usable(vec![2048, 2048], &[(0b10, 1000), (0b11, 1000)]), 2000);
        assert_eq!(usable(vec![2048, 2048], &[(0b10, 3000), (0b11, 3000)]), 4096);
        assert_eq!(usable(vec![2048, 2048], &[(0b01, 500), (0b10, 500)]), 1000);
    }

    #[test]
    fn pods_no_model_can_take_count_nothing() {
        assert_eq!(usable(vec![64], &[(0, 500), (1, 10)]), 10);
        assert_eq!(usable(vec![64, 64], &[(0, 500), (0b01, 10), (0b10, 20)]), 30);
    }
}
