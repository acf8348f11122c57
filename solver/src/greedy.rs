//! The greedy baseline, planning the way existing dynamic-MIG tools do: count the slices the
//! pending pods lack, walk the nodes in name order, and on each GPU pick the allowed geometry
//! that adds the most lacking slices without touching an instance in use. It never evicts.
//!
//! It stays for comparison (benchmarks) and as the ILP's fallback, so it honours the policy's
//! limits and pod eligibility like the ILP does.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::time::Instant;

use crate::catalog::Catalog;
use crate::geometry::{maximal_extensions_until, Geometry, GeometryCache};
use crate::plan::prepare::{Needs, Problem, User};
use crate::plan::realize::{realize, Decision};
use crate::plan::{Plan, PlanError, PlanOptions, SolverUsed};
use crate::snapshot::Snapshot;

/// Plans with the greedy baseline. `bound` is all plannable demand (no LP is solved). Gangs are
/// held by planning again without the ones it leaves short (see [`crate::plan::gangs`]).
pub fn plan(snapshot: &Snapshot, catalog: &Catalog, options: &PlanOptions) -> Result<Plan, PlanError> {
    crate::plan::gangs::all_or_nothing(snapshot, catalog, options.ignore_gangs, |s| {
        plan_round(s, catalog, options)
    })
}

fn plan_round(snapshot: &Snapshot, catalog: &Catalog, options: &PlanOptions) -> Result<Plan, PlanError> {
    let started = Instant::now();
    let problem = Problem::new(snapshot, catalog, options)?;
    let decision = decide(&problem);
    Ok(realize(&problem, decision, SolverUsed::Greedy, problem.trivial_bound() as f64, started, Vec::new()))
}

pub(crate) fn decide(problem: &Problem) -> Decision {
    // As a scheduler would, pods first take free slices already there, in priority order; those
    // slices then stay, and the rest of the pods are what the baseline repartitions for.
    let mut own = problem.clone();
    let taken = take_existing(&mut own);
    let problem = &own;
    let keys = problem.profiles.len();
    let mut targets: Vec<Geometry> = problem.gpus.iter().map(|g| g.current.clone()).collect();
    // Pending pods only: the baseline plans for no forecast.
    let unserved: Vec<usize> = problem
        .plannable()
        .filter(|(i, _)| !problem.is_expected(*i) && !taken.contains(i))
        .map(|(i, _)| i)
        .collect();
    let mut left = unserved.len();
    let mut extensions: BTreeMap<(usize, Geometry), Vec<Geometry>> = BTreeMap::new();
    let (mut gpus_changed, mut nodes_changed) = (0u32, 0u32);
    let mut kinds = Kinds::new(problem, &unserved);
    for (n, node) in problem.nodes.iter().enumerate() {
        if left == 0 {
            break;
        }
        let mut cpu = node.free_cpu;
        let mut memory = node.free_memory;
        // Free slices per profile on this node under the targets chosen so far.
        let mut node_free = vec![0i64; keys];
        for &g in &node.gpus {
            add_free(problem, g, &targets[g], &mut node_free, 1);
        }
        let mut node_touched = false;
        for &g in &node.gpus {
            let mut lacking = kinds.lacking(n, keys);
            for k in 0..keys {
                lacking[k] = (lacking[k] - node_free[k]).max(0);
            }
            if lacking.iter().all(|&l| l == 0) {
                continue;
            }
            let limit_reached = problem.max_gpus_changed.is_some_and(|m| gpus_changed >= m)
                || (!node_touched && problem.max_nodes_changed.is_some_and(|m| nodes_changed >= m));
            if limit_reached {
                continue;
            }
            let gpu = &problem.gpus[g];
            let fixed = Geometry::new(
                gpu.current
                    .instances()
                    .iter()
                    .zip(&gpu.users)
                    .filter(|(_, u)| **u != User::Free)
                    .map(|(p, _)| *p)
                    .collect(),
            );
            let options = extensions.entry((gpu.model, fixed.clone())).or_insert_with(|| {
                // Bounded by the plan's deadline like the ILP's search; a cut-short search
                // leaves the greedy plan fewer layouts to choose from (the ILP's plan says so).
                let (model, allowed) = (problem.models[gpu.model], &problem.allowed[gpu.model]);
                // `extensions` is the memo; the search's own cache has nothing to add.
                let once = GeometryCache::new();
                maximal_extensions_until(model, &fixed, allowed, &once, Some(problem.deadline)).geometries
            });
            let mut current_free = vec![0i64; keys];
            add_free(problem, g, &gpu.current, &mut current_free, 1);
            let mut best: Option<(i64, &Geometry)> = None;
            let reachable = |o: &&Geometry| {
                o.reachable_from(&gpu.current, problem.models[gpu.model], problem.resets_allowed)
            };
            for option in options.iter().filter(reachable) {
                let mut free = vec![0i64; keys];
                add_free(problem, g, option, &mut free, 1);
                let gain: i64 = (0..keys).map(|k| (free[k] - current_free[k]).max(0).min(lacking[k])).sum();
                if gain > 0 && best.is_none_or(|(b, _)| gain > b) {
                    best = Some((gain, option));
                }
            }
            let Some((_, chosen)) = best else { continue };
            add_free(problem, g, &targets[g], &mut node_free, -1);
            targets[g] = chosen.clone();
            add_free(problem, g, &targets[g], &mut node_free, 1);
            gpus_changed += 1;
            if !node_touched {
                node_touched = true;
                nodes_changed += 1;
            }
            // Pods that now fit on this node are served, in priority order; the rest stay
            // lacking.
            left -= kinds.serve(n, |needs| {
                let fits = needs.slices.iter().all(|&(k, c)| node_free[k] >= c as i64)
                    && cpu.is_none_or(|c| c >= needs.cpu)
                    && memory.is_none_or(|m| m >= needs.memory);
                if fits {
                    for &(k, c) in &needs.slices {
                        node_free[k] -= c as i64;
                    }
                    cpu = cpu.map(|c| c - needs.cpu);
                    memory = memory.map(|m| m - needs.memory);
                }
                fits
            });
        }
    }
    Decision { targets, evicted: BTreeSet::new(), hints: None }
}

/// Pending pods by kind: one eligibility list and the same needs. Pods of a kind are
/// interchangeable but for priority, so they are served in priority order and a cursor says
/// which are left; and when one does not fit on a node, none of its kind does. A node's
/// lacking slices and the pods it serves then cost a few kinds, not every pod eligible there
/// (pods x nodes: 100 million on 5,000 nodes with 20,000 pods).
struct Kinds {
    needs: Vec<Needs>,
    /// Per kind, its pods in priority order.
    pods: Vec<Vec<usize>>,
    /// Per kind, how many of its pods are served (the first ones).
    served: Vec<usize>,
    /// Per node, the kinds eligible there.
    at: Vec<Vec<usize>>,
}

impl Kinds {
    fn new(problem: &Problem, pods: &[usize]) -> Kinds {
        let mut index: HashMap<(usize, &Needs), usize> = HashMap::new();
        let mut kinds = Kinds {
            needs: Vec::new(),
            pods: Vec::new(),
            served: Vec::new(),
            at: vec![Vec::new(); problem.nodes.len()],
        };
        for &i in pods {
            let pod = &problem.pending[i];
            let q = *index.entry((pod.eligible.as_ptr() as usize, &pod.needs)).or_insert_with(|| {
                for &n in pod.eligible.iter() {
                    kinds.at[n].push(kinds.pods.len());
                }
                kinds.needs.push(pod.needs.clone());
                kinds.pods.push(Vec::new());
                kinds.served.push(0);
                kinds.pods.len() - 1
            });
            kinds.pods[q].push(i);
        }
        kinds
    }

    /// Per profile key, the slices the waiting pods eligible on node `n` need.
    fn lacking(&self, n: usize, keys: usize) -> Vec<i64> {
        let mut lacking = vec![0i64; keys];
        for &q in &self.at[n] {
            let waiting = (self.pods[q].len() - self.served[q]) as i64;
            for &(k, c) in &self.needs[q].slices {
                lacking[k] += c as i64 * waiting;
            }
        }
        lacking
    }

    /// Offers the waiting pods eligible on node `n`, in priority order, to `take` (which says
    /// whether it took the pod) until each kind has a pod refused; returns how many were taken.
    fn serve(&mut self, n: usize, mut take: impl FnMut(&Needs) -> bool) -> usize {
        let head = |k: &Kinds, q: usize| k.pods[q].get(k.served[q]).map(|&i| Reverse((i, q)));
        let mut heads: BinaryHeap<Reverse<(usize, usize)>> =
            self.at[n].iter().filter_map(|&q| head(self, q)).collect();
        let mut taken = 0;
        while let Some(Reverse((_, q))) = heads.pop() {
            if take(&self.needs[q]) {
                self.served[q] += 1;
                taken += 1;
                heads.extend(head(self, q));
            }
        }
        taken
    }
}

/// Each pending pod, by priority, onto the first eligible node whose free instances, CPU and
/// memory cover it: those instances become pinned and the node's CPU and memory less. Returns
/// the pods placed so. Pods of one kind (needs, eligible list) resume the node scan where the
/// last one stopped: nodes only lose room here, so one passed over stays unfit.
fn take_existing(problem: &mut Problem) -> BTreeSet<usize> {
    let mut free = vec![vec![0i64; problem.profiles.len()]; problem.nodes.len()];
    for (g, gpu) in problem.gpus.iter().enumerate() {
        add_free(problem, g, &gpu.current, &mut free[gpu.node], 1);
    }
    let mut taken = BTreeSet::new();
    let pods: Vec<usize> =
        problem.plannable().filter(|(i, _)| !problem.is_expected(*i)).map(|(i, _)| i).collect();
    let mut cursors: HashMap<(usize, Needs), usize> = HashMap::new();
    for i in pods {
        let (needs, eligible) = (problem.pending[i].needs.clone(), problem.pending[i].eligible.clone());
        let fits = |n: usize| {
            let node = &problem.nodes[n];
            needs.slices.iter().all(|&(k, c)| free[n][k] >= c as i64)
                && node.free_cpu.is_none_or(|c| c >= needs.cpu)
                && node.free_memory.is_none_or(|m| m >= needs.memory)
        };
        let at = cursors.entry((eligible.as_ptr() as usize, needs.clone())).or_default();
        while eligible.get(*at).is_some_and(|&n| !fits(n)) {
            *at += 1;
        }
        let Some(&n) = eligible.get(*at) else { continue };
        for &(k, count) in &needs.slices {
            free[n][k] -= count as i64;
            pin_free(problem, n, k, count);
        }
        let node = &mut problem.nodes[n];
        node.free_cpu = node.free_cpu.map(|c| c - needs.cpu);
        node.free_memory = node.free_memory.map(|m| m - needs.memory);
        taken.insert(i);
    }
    taken
}

/// Pins `count` free instances of profile key `k` on node `n`.
fn pin_free(problem: &mut Problem, n: usize, k: usize, count: u32) {
    let mut left = count;
    for g in problem.nodes[n].gpus.clone() {
        for at in 0..problem.gpus[g].users.len() {
            let placed = problem.gpus[g].current.instances()[at];
            if left > 0 && problem.gpus[g].users[at] == User::Free && problem.key_of(g, &placed) == Some(k) {
                problem.gpus[g].users[at] = User::Pinned;
                left -= 1;
            }
        }
    }
}

/// Adds `sign` times the instances of `target` that no pod holds, per profile key.
fn add_free(problem: &Problem, g: usize, target: &Geometry, free: &mut [i64], sign: i64) {
    let gpu = &problem.gpus[g];
    for p in target.instances() {
        let held = gpu.current.instances().iter().zip(&gpu.users).any(|(q, u)| q == p && *u != User::Free);
        if held {
            continue;
        }
        if let Some(k) = problem.key_of(g, p) {
            free[k] += sign;
        }
    }
}
