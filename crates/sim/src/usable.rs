//! The most memory slices the cluster's pods could hold at an instant: the bound printed next to
//! "memory slices allocated while demand > capacity".
//!
//! Demand exceeding capacity does not mean every slice is wanted: a pod may only use the GPU
//! models its constraints allow, and a whole-GPU pod only a GPU that is whole or may become so
//! (an Ampere GPU changes MIG mode only through a GPU reset, which the planners leave to an
//! administrator, so they never turn one whole). Each running or pending pod's memory slices may
//! go to any model it may use, split at will; the most that can be placed so is a maximum flow
//! from pods to models, and no packer allocates more. Placements, nodes, CPU and memory are
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
    /// Per set of models (a bit set over `Cluster::models`): memory slices of the pods that
    /// may use exactly those models. Set 0 (pods no GPU can take) never counts.
    demand: Vec<u64>,
    /// Per pod: the models it may use.
    pod_models: Vec<u32>,
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
        let sets = if cluster.models.len() <= MAX_MODELS_FOR_CUTS { 1 << cluster.models.len() } else { 2 };
        let pod_models = workload
            .pods
            .iter()
            .map(|p| {
                let models = usable_models(cluster, workload, p, whole_gpu, whole_at_start);
                if sets == 2 {
                    u32::from(models != 0)
                } else {
                    models
                }
            })
            .collect();
        UsableMemory { capacity, demand: vec![0; sets], pod_models }
    }

    /// Pod `pod`, holding or asking for `memory` slices, arrives.
    pub fn add(&mut self, pod: usize, memory: u64) {
        self.demand[self.pod_models[pod] as usize] += memory;
    }

    /// Pod `pod` finishes.
    pub fn remove(&mut self, pod: usize, memory: u64) {
        self.demand[self.pod_models[pod] as usize] -= memory;
    }

    /// The most memory slices the current pods could hold: the least cut `S` of models, paying
    /// their capacity plus the demand of every pod that may use a model outside `S`.
    pub fn value(&self) -> u64 {
        let total: u64 = self.capacity.iter().sum();
        if self.demand.len() == 2 {
            return total.min(self.demand[1]);
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

/// The models `pod` may use under the strategy, as a bit set.
fn usable_models(
    cluster: &Cluster,
    workload: &Workload,
    pod: &SimPod,
    whole_gpu: bool,
    whole_at_start: &[bool],
) -> u32 {
    let mut set = 0;
    for (m, model) in cluster.models.iter().enumerate() {
        if pod.models.as_ref().is_some_and(|list| !list.contains(&m)) {
            continue;
        }
        let offered = |key: usize| {
            if key == WHOLE_GPU {
                whole_at_start[m] || !model.mode_change_needs_reset
            } else {
                model.profile(&workload.profiles[key]).is_some()
            }
        };
        let fits = if whole_gpu {
            pod.whole_gpus > 0
        } else {
            !pod.mig.is_empty() && pod.mig.iter().all(|&(k, _)| offered(k))
        };
        if fits {
            set |= 1 << m;
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usable(capacity: Vec<u64>, demand: &[(u32, u64)]) -> u64 {
        let sets = 1 << capacity.len();
        let mut u = UsableMemory { capacity, demand: vec![0; sets], pod_models: Vec::new() };
        for &(set, memory) in demand {
            u.demand[set as usize] += memory;
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
    }
}
