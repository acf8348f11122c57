//! Pods onto the slices a decision leaves free: which node each pending (and each evicted) pod
//! is expected to land on and which instances it takes. Both planners end here, so their plans
//! are scored the same way.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::geometry::Geometry;

use super::prepare::{Needs, Problem};
use crate::snapshot::GpuSpread;

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
            && (needs.spread.is_any() || self.pick(n, needs).is_some())
    }

    /// The free slices (GPU, position in its free list) a pod with `needs` takes on node `n`:
    /// existing instances before created ones, and on GPUs as its spread asks.
    fn pick(&self, n: usize, needs: &Needs) -> Option<Vec<(usize, usize)>> {
        let gpus = &self.problem.nodes[n].gpus;
        match needs.spread {
            GpuSpread::Any => {
                let mut taken = Vec::new();
                for &(k, count) in &needs.slices {
                    let mut options: Vec<(bool, usize, usize)> = gpus
                        .iter()
                        .flat_map(|&g| self.free_of(g, k).map(move |(pos, created)| (created, g, pos)))
                        .collect();
                    options.sort();
                    taken.extend(options.into_iter().take(count as usize).map(|(_, g, pos)| (g, pos)));
                }
                Some(taken)
            }
            GpuSpread::OneGpu => gpus
                .iter()
                .filter_map(|&g| {
                    let mut taken = Vec::new();
                    let mut created = 0;
                    for &(k, count) in &needs.slices {
                        let found: Vec<(usize, bool)> = self.free_of(g, k).take(count as usize).collect();
                        if found.len() < count as usize {
                            return None;
                        }
                        created += found.iter().filter(|f| f.1).count();
                        taken.extend(found.into_iter().map(|(pos, _)| (g, pos)));
                    }
                    Some((created, g, taken))
                })
                .min_by_key(|(created, g, _)| (*created, *g))
                .map(|(_, _, taken)| taken),
            GpuSpread::DistinctGpus => {
                let devices: Vec<usize> =
                    needs.slices.iter().flat_map(|&(k, c)| std::iter::repeat_n(k, c as usize)).collect();
                let gpu_of = distinct_gpus(&devices, gpus, |g, k| self.free_of(g, k).next().is_some())?;
                Some(
                    devices
                        .iter()
                        .zip(gpu_of)
                        .map(|(&k, g)| (g, self.free_of(g, k).next().expect("matched to a GPU with one").0))
                        .collect(),
                )
            }
        }
    }

    /// Positions in GPU `g`'s free list of slices of profile key `k`, existing ones first, and
    /// whether each would be created.
    fn free_of(&self, g: usize, k: usize) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.free[g].iter().enumerate().filter(move |(_, s)| s.key == k).map(|(pos, s)| (pos, s.created))
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
        let mut taken = self.pick(node, needs).expect("the node fits");
        // Remove from the back so positions stay valid.
        taken.sort_by(|a, b| b.cmp(a));
        let mut instances = Vec::new();
        for (g, pos) in taken {
            let s = self.free[g].remove(pos);
            self.used[g][s.instance] = true;
            self.node_free[node][s.key] -= 1;
            instances.push((g, s.instance));
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

/// A GPU of its own for each device (a profile key): `has(g, k)` says whether GPU `g` has a
/// free slice of `k`. Bipartite matching by augmenting paths (Kuhn's algorithm): a pod has a
/// few devices and a node a few GPUs, so this is exact and cheap. `None` when no such choice
/// exists.
fn distinct_gpus(
    devices: &[usize],
    gpus: &[usize],
    has: impl Fn(usize, usize) -> bool,
) -> Option<Vec<usize>> {
    // For each GPU (by position in `gpus`), the device matched to it.
    let mut holder: Vec<Option<usize>> = vec![None; gpus.len()];
    fn augment(
        d: usize,
        devices: &[usize],
        gpus: &[usize],
        has: &dyn Fn(usize, usize) -> bool,
        seen: &mut [bool],
        holder: &mut [Option<usize>],
    ) -> bool {
        for (i, &g) in gpus.iter().enumerate() {
            if seen[i] || !has(g, devices[d]) {
                continue;
            }
            seen[i] = true;
            if holder[i].is_none_or(|other| augment(other, devices, gpus, has, seen, holder)) {
                holder[i] = Some(d);
                return true;
            }
        }
        false
    }
    for d in 0..devices.len() {
        let mut seen = vec![false; gpus.len()];
        if !augment(d, devices, gpus, &has, &mut seen, &mut holder) {
            return None;
        }
    }
    let mut gpu_of = vec![0; devices.len()];
    for (i, d) in holder.iter().enumerate() {
        if let Some(d) = d {
            gpu_of[*d] = gpus[i];
        }
    }
    Some(gpu_of)
}

#[cfg(test)]
mod tests {
    use super::distinct_gpus;

    #[test]
    fn each_device_gets_a_gpu_of_its_own_when_one_exists() {
        // GPU 10 has both profiles, GPU 11 only profile 0: profile 1 must take GPU 10, so
        // profile 0 moves to GPU 11 (a first-come choice would fail).
        let has = |g: usize, k: usize| g == 10 || k == 0;
        assert_eq!(distinct_gpus(&[0, 1], &[10, 11], has), Some(vec![11, 10]));
        // Three devices, two GPUs.
        assert_eq!(distinct_gpus(&[0, 0, 0], &[10, 11], |_, _| true), None);
        // GPU 11 has no profile 2.
        assert_eq!(distinct_gpus(&[2], &[11], has), None);
    }
}
