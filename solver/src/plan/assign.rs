//! Pods onto the slices a decision leaves free: which node each pending (and each evicted) pod
//! is expected to land on and which instances it takes. Both planners end here, so their plans
//! are scored the same way.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::geometry::Geometry;

use super::prepare::{Needs, Problem};

/// Where a pod lands: a node and `(gpu, instance index in the target)` per slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    pub node: usize,
    pub instances: Vec<(usize, usize)>,
}

/// Preferred node groups per pod class, from the ILP's aggregated answer.
#[derive(Clone)]
pub(crate) struct Hints {
    pub pending_class: Vec<usize>,
    pub running_class: BTreeMap<usize, usize>,
    pub node_group: Vec<usize>,
    /// `(pod class, node group) -> pods`.
    pub quota: BTreeMap<(usize, usize), u32>,
    /// `(pod class, node) -> pods`, where an exact placement was solved for (see
    /// `ilp::placement`): each pod of the class takes a node with pods left in its quota.
    pub node_quota: Option<BTreeMap<(usize, usize), u32>>,
}

/// What is left of the hints' quotas while pods are placed.
struct Quotas {
    group: BTreeMap<(usize, usize), u32>,
    node: Option<BTreeMap<(usize, usize), u32>>,
}

pub(crate) struct Assignment {
    /// Per index of `Problem::pending`; `None` for pods not placed by the planner.
    pub pending: Vec<Option<Slot>>,
    /// Per evicted running pod.
    pub evicted: BTreeMap<usize, Option<Slot>>,
    /// Per GPU, per instance of its target: taken by a pod (kept, reserved or placed).
    pub used: Vec<Vec<bool>>,
}

struct FreeSlice {
    instance: usize,
    key: usize,
    created: bool,
}

/// Assigns evicted pods first (they must land again), then pending pods in priority order.
pub(crate) fn assign(
    problem: &Problem,
    targets: &[Geometry],
    evicted: &BTreeSet<usize>,
    hints: Option<&Hints>,
) -> Assignment {
    let keys = problem.profiles.len();
    let mut used: Vec<Vec<bool>> =
        targets.iter().enumerate().map(|(g, target)| held_in_target(problem, g, target, evicted)).collect();
    let mut free: Vec<Vec<FreeSlice>> = Vec::with_capacity(targets.len());
    for (g, target) in targets.iter().enumerate() {
        let gpu = &problem.gpus[g];
        let mut slices: Vec<FreeSlice> = target
            .instances()
            .iter()
            .enumerate()
            .filter(|(i, _)| !used[g][*i])
            .filter_map(|(i, p)| {
                problem.key_of(g, p).map(|key| FreeSlice {
                    instance: i,
                    key,
                    created: !gpu.current.contains(p),
                })
            })
            .collect();
        // Existing instances first, so that a GPU whose new slices stay unused can be left alone.
        slices.sort_by_key(|s| (s.created, s.instance));
        free.push(slices);
    }
    let mut node_free: Vec<Vec<u32>> = vec![vec![0; keys]; problem.nodes.len()];
    for (g, slices) in free.iter().enumerate() {
        for s in slices {
            node_free[problem.gpus[g].node][s.key] += 1;
        }
    }
    let (mut cpu, mut memory) = problem.free_after(evicted);
    let mut quota = Quotas {
        group: hints.map(|h| h.quota.clone()).unwrap_or_default(),
        node: hints.and_then(|h| h.node_quota.clone()),
    };

    let mut state = State {
        problem,
        free: &mut free,
        node_free: &mut node_free,
        cpu: &mut cpu,
        memory: &mut memory,
        used: &mut used,
        cursors: HashMap::new(),
    };
    let mut evicted_out = BTreeMap::new();
    for &r in evicted {
        let pod = &problem.running[r];
        let class = hints.and_then(|h| h.running_class.get(&r).copied());
        let slot = state.place(&pod.needs, &pod.eligible, class, hints, &mut quota);
        evicted_out.insert(r, slot);
    }
    let mut order: Vec<usize> = problem.plannable().map(|(i, _)| i).collect();
    order.sort_by_key(|&i| {
        let p = &problem.pending[i];
        let slices: u32 = p.needs.slices.iter().map(|s| s.1).sum();
        (std::cmp::Reverse(p.weight), p.eligible.len(), std::cmp::Reverse(slices), i)
    });
    let mut pending = vec![None; problem.pending.len()];
    for i in order {
        let pod = &problem.pending[i];
        let class = hints.map(|h| h.pending_class[i]);
        pending[i] = state.place(&pod.needs, &pod.eligible, class, hints, &mut quota);
    }
    Assignment { pending, evicted: evicted_out, used }
}

/// Per instance of GPU `g`'s `target`: held by a pod that stays (every pod but those in
/// `evicted`).
pub(crate) fn held_in_target(
    problem: &Problem,
    g: usize,
    target: &Geometry,
    evicted: &BTreeSet<usize>,
) -> Vec<bool> {
    let gpu = &problem.gpus[g];
    let mut held = vec![false; target.len()];
    for (placed, user) in gpu.current.instances().iter().zip(&gpu.users) {
        if user.stays(evicted) {
            let at = target.instances().binary_search(placed).expect("planners keep every instance in use");
            held[at] = true;
        }
    }
    held
}

struct State<'s, 'p> {
    problem: &'s Problem<'p>,
    free: &'s mut Vec<Vec<FreeSlice>>,
    node_free: &'s mut Vec<Vec<u32>>,
    cpu: &'s mut Vec<Option<u64>>,
    memory: &'s mut Vec<Option<u64>>,
    used: &'s mut Vec<Vec<bool>>,
    /// Per kind of pod (class, eligible list, needs): how far each of the three scans of
    /// [`State::place`] got. Nodes only fill up and quotas only fall while pods are placed, so
    /// a node a scan passed over never suits that kind of pod again: the next pod of the kind
    /// starts where the last one stopped, and placing every pod costs each node once per kind,
    /// not once per pod.
    cursors: HashMap<(Option<usize>, usize, Needs), [usize; 3]>,
}

impl State<'_, '_> {
    fn fits(&self, n: usize, needs: &Needs) -> bool {
        needs.slices.iter().all(|&(k, c)| self.node_free[n][k] >= c)
            && self.cpu[n].is_none_or(|c| c >= needs.cpu)
            && self.memory[n].is_none_or(|m| m >= needs.memory)
    }

    fn place(
        &mut self,
        needs: &Needs,
        eligible: &[usize],
        class: Option<usize>,
        hints: Option<&Hints>,
        quota: &mut Quotas,
    ) -> Option<Slot> {
        // The node an exact placement chose, else nodes of a group the ILP meant for this
        // class, then any eligible node.
        let exact = |n: usize, quota: &Quotas| match (class, &quota.node) {
            (Some(c), Some(nodes)) => nodes.get(&(c, n)).is_some_and(|&q| q > 0),
            _ => false,
        };
        let hinted = |n: usize, quota: &Quotas| match (class, hints) {
            (Some(c), Some(h)) => quota.group.get(&(c, h.node_group[n])).is_some_and(|&q| q > 0),
            _ => false,
        };
        let key = (class, eligible.as_ptr() as usize, needs.clone());
        let mut at = self.cursors.get(&key).copied().unwrap_or_default();
        let scan = |from: &mut usize, suits: &dyn Fn(usize) -> bool| -> Option<usize> {
            while let Some(&n) = eligible.get(*from) {
                if suits(n) {
                    return Some(n);
                }
                *from += 1;
            }
            None
        };
        let [first, second, third] = &mut at;
        let chosen = scan(first, &|n| exact(n, quota) && self.fits(n, needs));
        // An exact placement is the whole answer: a pod it left out would only take room it
        // gave another pod.
        let node = if quota.node.is_some() {
            chosen
        } else {
            chosen
                .or_else(|| scan(second, &|n| hinted(n, quota) && self.fits(n, needs)))
                .or_else(|| scan(third, &|n| self.fits(n, needs)))
        };
        self.cursors.insert(key, at);
        let node = node?;
        if let (Some(c), Some(h)) = (class, hints) {
            if let Some(q) = quota.group.get_mut(&(c, h.node_group[node])) {
                *q = q.saturating_sub(1);
            }
            if let Some(q) = quota.node.as_mut().and_then(|nodes| nodes.get_mut(&(c, node))) {
                *q = q.saturating_sub(1);
            }
        }
        let mut instances = Vec::new();
        for &(k, count) in &needs.slices {
            let mut left = count;
            // Prefer existing instances anywhere on the node before created ones.
            let mut options: Vec<(bool, usize, usize)> = Vec::new();
            for &g in &self.problem.nodes[node].gpus {
                for (pos, s) in self.free[g].iter().enumerate() {
                    if s.key == k {
                        options.push((s.created, g, pos));
                    }
                }
            }
            options.sort();
            let mut taken: Vec<(usize, usize)> = Vec::new();
            for (_, g, pos) in options {
                if left == 0 {
                    break;
                }
                taken.push((g, pos));
                left -= 1;
            }
            // Remove from the back so positions stay valid.
            taken.sort_by(|a, b| b.cmp(a));
            for (g, pos) in taken {
                let s = self.free[g].remove(pos);
                self.used[g][s.instance] = true;
                instances.push((g, s.instance));
            }
            self.node_free[node][k] -= count;
        }
        if let Some(c) = &mut self.cpu[node] {
            *c -= needs.cpu;
        }
        if let Some(m) = &mut self.memory[node] {
            *m -= needs.memory;
        }
        instances.sort();
        Some(Slot { node, instances })
    }
}
