//! Which nodes' CPU or memory could bind a plan. Where it cannot, the model needs no CPU or
//! memory rows for the node and evicting a pod from it frees nothing that matters.

use std::collections::BTreeMap;

use super::{Problem, User};

/// What the pods of one eligibility list ask: in all, and the most one pod asks.
#[derive(Default, Clone, Copy)]
struct Asked {
    total: u64,
    most: u64,
}

impl Asked {
    fn add(&mut self, amount: u64) {
        self.total += amount;
        self.most = self.most.max(amount);
    }

    fn merge(&mut self, other: Asked) {
        self.total += other.total;
        self.most = self.most.max(other.most);
    }

    /// At most `pods` of them land: the most they can ask together.
    fn at_most(self, pods: u64) -> u64 {
        self.total.min(self.most.saturating_mul(pods))
    }
}

/// Per node: whether its free CPU or memory is less than what the pods that may land there
/// (pending and evictable) could ask together. At most one pod lands per placement unit of the
/// node's GPUs that no pinned pod holds (every instance takes one unit at least), each asking
/// at most the most any of them asks. (Evictions only add to what is free.)
pub(crate) fn resources_may_bind(problem: &Problem) -> Vec<bool> {
    // Pods of one template share one eligibility list: sum per list, then per node.
    let mut per_list: BTreeMap<usize, (&[usize], Asked, Asked)> = BTreeMap::new();
    let pods = problem
        .plannable()
        .map(|(_, p)| (&p.eligible, &p.needs))
        .chain(problem.running.iter().map(|r| (&r.eligible, &r.needs)));
    for (eligible, needs) in pods {
        let entry = per_list.entry(eligible.as_ptr() as usize).or_insert((
            eligible,
            Asked::default(),
            Asked::default(),
        ));
        entry.1.add(needs.cpu);
        entry.2.add(needs.memory);
    }
    let mut per_node = vec![(Asked::default(), Asked::default()); problem.nodes.len()];
    for (nodes, cpu, memory) in per_list.into_values() {
        for &n in nodes {
            per_node[n].0.merge(cpu);
            per_node[n].1.merge(memory);
        }
    }
    problem
        .nodes
        .iter()
        .zip(per_node)
        .map(|(node, (cpu, memory))| {
            let units: u64 = node.gpus.iter().map(|&g| open_units(problem, g)).sum();
            node.free_cpu.is_some_and(|free| free < cpu.at_most(units))
                || node.free_memory.is_some_and(|free| free < memory.at_most(units))
        })
        .collect()
}

/// Placement units of GPU `g` that no pinned pod holds.
fn open_units(problem: &Problem, g: usize) -> u64 {
    let gpu = &problem.gpus[g];
    let model = problem.models[gpu.model];
    let pinned: u64 = gpu
        .current
        .instances()
        .iter()
        .zip(&gpu.users)
        .filter(|(_, u)| **u == User::Pinned)
        .map(|(p, _)| model.profile_info(p.profile).memory_slices as u64)
        .sum();
    (model.placement_units as u64).saturating_sub(pinned)
}
