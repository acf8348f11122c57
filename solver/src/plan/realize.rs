//! A planner's decision (target per GPU, pods to evict) -> a [`Plan`]: enforce the hard rules
//! once more, assign pods, give back changes nobody uses, explain every pod left out and score
//! the result. Everything a planner decides passes through here, so a plan never breaks the
//! policy or drops an instance in use, whatever the planner did.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::geometry::{self, Geometry, Placed};

use super::assign::{assign, Assignment, Hints, Slot};
use super::prepare::{PodStatus, Problem, User};
use super::{
    Eviction, GpuPlan, Objective, PlacedName, Plan, PodOutcome, SliceSource, SolverUsed, UnmetReason,
};

#[derive(Clone)]
pub(crate) struct Decision {
    pub targets: Vec<Geometry>,
    pub evicted: BTreeSet<usize>,
    pub hints: Option<Hints>,
}

pub(crate) fn realize(
    problem: &Problem,
    decision: Decision,
    solver: SolverUsed,
    bound: f64,
    started: Instant,
    mut notes: Vec<String>,
) -> Plan {
    score(problem, decision, &mut notes).into_plan(solver, bound, started, notes)
}

/// A decision settled and scored, not yet written out: planners compare several (the ILP's
/// against the greedy baseline's) and write out only the one they keep, which on the largest
/// clusters saves a GPU plan per GPU for each discarded one.
pub(crate) struct Scored<'p, 'a> {
    problem: &'p Problem<'a>,
    decision: Decision,
    assignment: Assignment,
    limit_hit: Option<String>,
    pub(crate) objective: Objective,
}

/// Enforces the rules and limits, assigns pods and scores the result.
pub(crate) fn score<'p, 'a>(
    problem: &'p Problem<'a>,
    mut decision: Decision,
    notes: &mut Vec<String>,
) -> Scored<'p, 'a> {
    enforce_rules(problem, &mut decision, notes);
    enforce_limits(problem, &mut decision);
    let assignment = settle(problem, &mut decision);
    let gpus_changed = changed_gpus(problem, &decision.targets).count() as u32;
    let nodes_changed = changed_nodes(problem, &decision.targets).len() as u32;
    let limit_hit = match (problem.max_gpus_changed, problem.max_nodes_changed) {
        (Some(m), _) if gpus_changed >= m => Some(format!("maxGpusChanged={m}")),
        (_, Some(m)) if nodes_changed >= m => Some(format!("maxNodesChanged={m}")),
        _ => None,
    };
    let mut objective =
        Objective { evictions: assignment.evicted.len() as u32, gpus_changed, ..Objective::default() };
    // Members of a gang that falls short of its minimum serve nothing: they would hold their
    // slices idle, waiting.
    let complete = super::gangs::complete(problem, &assignment.pending);
    for (i, p) in problem.pending.iter().enumerate() {
        if p.gang.is_some_and(|g| !complete[g]) {
            continue;
        }
        if matches!((&p.status, &assignment.pending[i]), (PodStatus::Plannable, Some(_))) {
            if problem.is_expected(i) {
                // Not a pod of the cluster: it only scores the room prepared for it.
                objective.expected += 1;
            } else {
                // Every pod the plan serves counts, on slices already there or on new ones.
                objective.demand_met += p.weight;
                objective.pods_met += 1;
            }
        }
    }
    let mut spare = vec![0u32; problem.profiles.len()];
    for (g, target) in decision.targets.iter().enumerate() {
        let model = problem.model_of(g);
        objective.free_ranges += u64::from(target.free_ranges(model, |i| !assignment.used[g][i]));
        for (i, p) in target.instances().iter().enumerate() {
            if !assignment.used[g][i] {
                if let Some(k) = problem.key_of(g, p) {
                    spare[k] += 1;
                }
            }
        }
    }
    objective.headroom = spare.iter().zip(&problem.headroom).map(|(s, h)| (*s).min(*h)).sum();
    Scored { problem, decision, assignment, limit_hit, objective }
}

impl Scored<'_, '_> {
    /// The plan: every GPU's before and after, the evictions, and each pending pod's outcome.
    pub(crate) fn into_plan(
        self,
        solver: SolverUsed,
        bound: f64,
        started: Instant,
        mut notes: Vec<String>,
    ) -> Plan {
        let Scored { problem, mut decision, assignment, limit_hit, objective } = self;
        // After scoring, so that the objective stays the program's and this plan's comparison
        // with others (the greedy baseline's, the one without eviction) is made on what the
        // planners chose.
        let shaped = super::window::shape_empty_gpus(problem, &mut decision.targets);
        if !shaped.is_empty() {
            notes.push(shaped_note(problem, &shaped));
        }
        let names = |g: usize, geometry: &[Placed]| -> Vec<PlacedName> {
            let model = problem.model_of(g);
            geometry
                .iter()
                .map(|p| PlacedName { profile: model.profile_info(p.profile).name.clone(), start: p.start })
                .collect()
        };
        let mut gpus = Vec::with_capacity(problem.gpus.len());
        for (g, gpu) in problem.gpus.iter().enumerate() {
            let target = &decision.targets[g];
            let d = geometry::diff(&gpu.current, target, problem.model_of(g));
            gpus.push(GpuPlan {
                node: problem.nodes[gpu.node].name.to_string(),
                index: gpu.index,
                model: problem.model_of(g).key.clone(),
                from: names(g, gpu.current.instances()),
                to: names(g, target.instances()),
                destroy: names(g, &d.destroy),
                create: names(g, &d.create),
                changed: !d.is_empty(),
            });
        }
        let evictions: Vec<Eviction> = assignment
            .evicted
            .iter()
            .map(|(&r, slot)| {
                let pod = &problem.running[r];
                Eviction {
                    pod: pod.key.clone(),
                    node: problem.nodes[pod.node].name.to_string(),
                    gpu: problem.gpus[pod.gpu].index,
                    rescheduled_to: problem.nodes[slot.as_ref().expect("settled").node].name.to_string(),
                }
            })
            .collect();
        let mut pods = Vec::with_capacity(problem.pending.len());
        for (i, p) in problem.pending.iter().enumerate() {
            if problem.is_expected(i) {
                continue;
            }
            let (node, placement, reason) = match (&p.status, &assignment.pending[i]) {
                (PodStatus::Unmet(reason), _) => (None, SliceSource::Unmet, Some(reason.clone())),
                (PodStatus::Plannable, Some(slot)) => {
                    (Some(slot.node), source(problem, &decision.targets, slot), None)
                }
                (PodStatus::Plannable, None) => {
                    (None, SliceSource::Unmet, Some(unmet_reason(problem, i, limit_hit.as_deref())))
                }
            };
            pods.push(PodOutcome {
                pod: p.key.clone(),
                priority: p.pod.priority,
                requests: p.pod.requests.clone(),
                node: node.map(|n| problem.nodes[n].name.to_string()),
                placement,
                reason,
            });
        }
        let bound = bound.max(objective.demand_met as f64);
        let gap = if bound > 0.0 { (bound - objective.demand_met as f64) / bound } else { 0.0 };
        notes.extend(problem.notes.iter().cloned());
        Plan {
            solver,
            placements_inferred: problem.placements_inferred,
            gpus,
            evictions,
            pods,
            objective,
            bound,
            gap,
            solve_ms: started.elapsed().as_millis() as u64,
            notes,
            gangs: Vec::new(),
        }
    }
}

/// Says which empty GPUs the plan shaped because their nodes change (see `window`).
fn shaped_note(problem: &Problem, shaped: &[usize]) -> String {
    let nodes: BTreeSet<&str> = shaped.iter().map(|&g| problem.nodes[problem.gpus[g].node].name).collect();
    format!(
        "{} empty GPU(s) on {} node(s) this plan changes get the geometry of the node's changed GPUs of their model \
         (not counted in the objective): stabilisationSeconds={} keeps those nodes as planned, and an empty GPU \
         serves no pod until then",
        shaped.len(),
        nodes.len(),
        problem.stabilisation_seconds
    )
}

/// Whether a pod's slices are all instances that exist now (the scheduler can place it before
/// any change) or some are created by the plan.
fn source(problem: &Problem, targets: &[Geometry], slot: &Slot) -> SliceSource {
    let existing =
        slot.instances.iter().all(|&(g, i)| problem.gpus[g].current.contains(&targets[g].instances()[i]));
    if existing {
        SliceSource::ExistingSlices
    } else {
        SliceSource::NewSlices
    }
}

/// A target that is invalid or drops an instance in use (by a pod not evicted) is replaced by
/// the current geometry. Planners never do this; the check makes it impossible by construction.
fn enforce_rules(problem: &Problem, decision: &mut Decision, notes: &mut Vec<String>) {
    decision.evicted.retain(|&r| r < problem.running.len());
    for (g, gpu) in problem.gpus.iter().enumerate() {
        let target = &decision.targets[g];
        let model = problem.model_of(g);
        let keeps_users = gpu.current.instances().iter().zip(&gpu.users).all(|(p, u)| match u {
            User::Free => true,
            User::Pinned => target.contains(p),
            User::Evictable(r) => decision.evicted.contains(r) || target.contains(p),
        });
        if *target != gpu.current && (!keeps_users || geometry::validate(model, target).is_err()) {
            notes.push(format!(
                "internal: planner proposed {} for {} GPU {}; kept the current geometry",
                target.display(model),
                problem.nodes[gpu.node].name,
                gpu.index
            ));
            revert(problem, decision, g);
        }
    }
}

fn revert(problem: &Problem, decision: &mut Decision, g: usize) {
    decision.targets[g] = problem.gpus[g].current.clone();
    decision.evicted.retain(|&r| problem.running[r].gpu != g);
}

fn changed_nodes(problem: &Problem, targets: &[Geometry]) -> BTreeSet<usize> {
    changed_gpus(problem, targets).map(|g| problem.gpus[g].node).collect()
}

/// The GPUs whose target differs from their current geometry, in order.
pub(super) fn changed_gpus<'t>(
    problem: &'t Problem,
    targets: &'t [Geometry],
) -> impl Iterator<Item = usize> + 't {
    problem
        .gpus
        .iter()
        .zip(targets)
        .enumerate()
        .filter(|(_, (gpu, target))| **target != gpu.current)
        .map(|(g, _)| g)
}

/// Reverts changes from the last node backwards until the policy's limits hold (changes and
/// the whole GPUs to keep).
fn enforce_limits(problem: &Problem, decision: &mut Decision) {
    if let Some(max) = problem.max_nodes_changed {
        let nodes = changed_nodes(problem, &decision.targets);
        for &n in nodes.iter().skip(max as usize) {
            for &g in &problem.nodes[n].gpus {
                revert(problem, decision, g);
            }
        }
    }
    if let Some(max) = problem.max_gpus_changed {
        let changed: Vec<usize> = changed_gpus(problem, &decision.targets).collect();
        for &g in changed.iter().skip(max as usize) {
            revert(problem, decision, g);
        }
    }
    let mut short = problem.whole_floor.saturating_sub(problem.whole_gpus(Some(&decision.targets)));
    let left_whole: Vec<usize> = changed_gpus(problem, &decision.targets)
        .filter(|&g| problem.gpus[g].current.is_whole(problem.model_of(g)))
        .filter(|&g| !decision.targets[g].is_whole(problem.model_of(g)))
        .collect();
    for &g in left_whole.iter().rev() {
        if short == 0 {
            break;
        }
        revert(problem, decision, g);
        short -= 1;
    }
}

/// Assigns pods; reverts GPUs whose evicted pods find no new home, evictions that freed
/// nothing anyone takes, and changed GPUs whose new instances nobody takes; repeats until
/// nothing changes. Every round undoes at least one GPU or eviction, so it ends.
fn settle(problem: &Problem, decision: &mut Decision) -> Assignment {
    loop {
        let a = assign(problem, &decision.targets, &decision.evicted, decision.hints.as_ref());
        let mut reverted = false;
        // An evicted pod whose instances all stay and go to nobody was evicted for nothing. (One
        // whose instance stays for another pod is not: that is how a pod that may move makes
        // way on a node only the other may use.) Nor is one whose CPU or memory another pod
        // needs: those are undone one at a time, each only where the pods still fit without.
        let idle: Vec<usize> = decision
            .evicted
            .iter()
            .copied()
            .filter(|&r| freed_for_nobody(problem, decision, &a, r))
            .collect();
        let (plain, freeing): (Vec<usize>, Vec<usize>) =
            idle.into_iter().partition(|&r| !problem.eviction_frees_resources(r));
        for r in plain {
            decision.evicted.remove(&r);
            reverted = true;
        }
        if reverted {
            continue;
        }
        if let Some(r) = freeing.into_iter().find(|&r| fits_without(problem, decision, &a, r)) {
            decision.evicted.remove(&r);
            continue;
        }
        for (&r, slot) in &a.evicted {
            if slot.is_none() {
                revert(problem, decision, problem.running[r].gpu);
                reverted = true;
            }
        }
        if reverted {
            continue;
        }
        for g in 0..problem.gpus.len() {
            let current = &problem.gpus[g].current;
            let target = &decision.targets[g];
            if target == current {
                continue;
            }
            // Also undoes evictions that made room nobody takes (expected pods count as takers).
            let uses_new =
                target.instances().iter().enumerate().any(|(i, p)| a.used[g][i] && !current.contains(p));
            if !uses_new {
                // Its new instances go unused: it keeps its geometry. An eviction on it whose
                // instance another pod takes stays (that instance is in the current geometry).
                let keep: BTreeSet<usize> = decision
                    .evicted
                    .iter()
                    .copied()
                    .filter(|&r| {
                        problem.running[r].gpu == g
                            && (!freed_for_nobody(problem, decision, &a, r)
                                || problem.eviction_frees_resources(r))
                    })
                    .collect();
                revert(problem, decision, g);
                decision.evicted.extend(keep);
                reverted = true;
            }
        }
        if !reverted {
            return a;
        }
    }
}

/// Whether the pods placed in `a` are placed as well with running pod `r` left in place.
fn fits_without(problem: &Problem, decision: &Decision, a: &Assignment, r: usize) -> bool {
    let mut evicted = decision.evicted.clone();
    evicted.remove(&r);
    let b = assign(problem, &decision.targets, &evicted, decision.hints.as_ref());
    let served = |x: &Assignment| -> (u64, usize) {
        let placed = x.pending.iter().enumerate().filter(|(_, s)| s.is_some());
        (placed.clone().map(|(i, _)| problem.pending[i].weight).sum(), placed.count())
    };
    b.evicted.values().all(Option::is_some) && served(&b) >= served(a)
}

/// Whether every instance evicted pod `r` held stays in its GPU's target unused.
fn freed_for_nobody(problem: &Problem, decision: &Decision, a: &Assignment, r: usize) -> bool {
    let g = problem.running[r].gpu;
    let (gpu, target) = (&problem.gpus[g], &decision.targets[g]);
    gpu.current.instances().iter().zip(&gpu.users).all(|(p, u)| {
        *u != User::Evictable(r) || target.instances().binary_search(p).is_ok_and(|i| !a.used[g][i])
    })
}

fn unmet_reason(problem: &Problem, i: usize, limit: Option<&str>) -> UnmetReason {
    if let Some(limit) = limit {
        return UnmetReason::PolicyLimit { limit: limit.to_string() };
    }
    let p = &problem.pending[i];
    let wanted: Vec<String> =
        p.needs.slices.iter().map(|&(k, c)| format!("{c}x {}", problem.profiles[k])).collect();
    UnmetReason::Capacity {
        detail: format!(
            "{} eligible node(s), but no room for {}{} there after higher-priority demand and the instances in use",
            p.eligible.len(),
            wanted.join(" + "),
            p.needs.spread.words()
        ),
    }
}
