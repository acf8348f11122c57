//! The ILP planner: candidates per GPU, aggregation into classes, a lexicographic integer
//! program solved in stages (HiGHS through good_lp, or microlp), then disaggregation back to
//! GPUs and pods. The greedy baseline runs alongside: it is the fallback when the solver fails
//! or runs out of time without a plan, and the plan returned is never worse than greedy's.

mod aggregate;
mod backend;
mod model;
mod placement;
mod stages;
mod tiebreak;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::candidates::{self, Candidates};
use crate::catalog::Catalog;
use crate::geometry::Geometry;
use crate::geometry::GeometryCache;
use crate::plan::assign::Hints;
use crate::plan::prepare::Problem;
use crate::plan::realize::{score, Decision};
use crate::plan::{Plan, PlanError, PlanOptions, SolverUsed};
use crate::snapshot::Snapshot;

use aggregate::Aggregate;
use model::Model;

/// Plans with the ILP. Same input, same plan.
pub fn plan(snapshot: &Snapshot, catalog: &Catalog, options: &PlanOptions) -> Result<Plan, PlanError> {
    plan_cached(snapshot, catalog, options, &GeometryCache::new())
}

/// [`plan`], with geometry searches answered from `cache` where an earlier plan (or GPU) asked
/// the same question: a controller keeps one cache for its lifetime.
pub fn plan_cached(
    snapshot: &Snapshot,
    catalog: &Catalog,
    options: &PlanOptions,
    cache: &GeometryCache,
) -> Result<Plan, PlanError> {
    crate::plan::gangs::all_or_nothing(snapshot, catalog, options.ignore_gangs, |s| {
        plan_round(s, catalog, options, cache)
    })
}

/// One planning of `snapshot` (gangs held by the model; [`plan_cached`] checks the result).
fn plan_round(
    snapshot: &Snapshot,
    catalog: &Catalog,
    options: &PlanOptions,
    cache: &GeometryCache,
) -> Result<Plan, PlanError> {
    let started = Instant::now();
    let problem = Problem::new(snapshot, catalog, options)?;
    let deadline = problem.deadline;
    if problem.running.is_empty() {
        return Ok(solve(&problem, started, deadline, cache));
    }
    // Evicting pays only where it lets more demand be met, and candidates that evict make the
    // model many times larger. So plan without them first: when that plan meets every
    // plannable pod, no optimal plan evicts (fewest evictions comes right after demand met),
    // and the plans that evict nobody are exactly the ones this smaller model has.
    let keep = problem.without_eviction();
    let kept = solve(&keep, started, deadline, cache);
    if kept.objective.demand_met >= keep.trivial_bound() {
        return Ok(kept);
    }
    let evicting = solve(&problem, started, deadline, cache);
    // The bound with eviction is the one that holds for this problem.
    let bound = kept.bound.max(evicting.bound);
    let mut plan = better_of(kept, evicting);
    plan.bound = bound;
    plan.gap = if bound > 0.0 { (bound - plan.objective.demand_met as f64) / bound } else { 0.0 };
    plan.solve_ms = started.elapsed().as_millis() as u64;
    Ok(plan)
}

/// The plan without eviction where it scores higher than the one with eviction allowed (which
/// the time limit can leave worse), carrying what stopped the latter, for the reviewer: it is
/// why the plan evicts nobody. Otherwise the plan with eviction.
fn better_of(kept: Plan, evicting: Plan) -> Plan {
    if kept.objective.better(&evicting.objective) != std::cmp::Ordering::Greater {
        return evicting;
    }
    let mut kept = kept;
    let why: Vec<String> = evicting
        .notes
        .iter()
        .filter(|n| !kept.notes.contains(n))
        .map(|n| format!("planning with eviction allowed: {n}"))
        .collect();
    kept.notes.extend(why);
    kept
}

/// The ILP on one problem, never worse than the greedy plan for it.
fn solve(problem: &Problem, started: Instant, deadline: Instant, cache: &GeometryCache) -> Plan {
    let greedy = crate::greedy::decide(problem);

    let candidates = candidates::build(problem, cache);
    let agg = aggregate::aggregate(problem, &candidates);
    // With CPU or memory pooled over many nodes, the plan's program does not count what
    // evictions give back (a restriction: its plans hold); the bound's program does.
    let restricted = agg.pooled_resources.is_some() && !problem.running.is_empty();
    let model = model::build(problem, &agg, !restricted);
    let bound_model = restricted.then(|| model::build(problem, &agg, true));
    let mut notes = cut_notes(&candidates);
    if let Some(nodes) = agg.pooled_multi_slice {
        notes.push(format!(
            "pods of several slices may land on {nodes} nodes, too many to model one by one: their slices were counted per node group, so the plan may fall short of its bound"
        ));
    }
    if let Some(nodes) = agg.pooled_resources {
        notes.push(format!(
            "CPU or memory may run out on {nodes} nodes, too many to model one by one: it was counted per node group{}, so the plan may fall short of its bound",
            if restricted { " and the plan does not count on what evicted pods give back (the bound does)" } else { "" }
        ));
    }
    let bound = lp_bound(bound_model.as_ref().unwrap_or(&model), deadline);
    let solved = stages::solve(&model, deadline, &mut notes);
    // The LP bound holds for the real problem only when no candidate was left out; otherwise
    // all plannable demand is the honest bound.
    let complete = candidates.cut_short.is_empty() && candidates.evictions_cut == 0;
    let bound = bound.filter(|_| complete).unwrap_or_else(|| problem.trivial_bound() as f64);
    // Decisions are scored first and only the one kept is written out as a plan.
    let mut greedy_notes = Vec::new();
    let greedy = score(problem, greedy, &mut greedy_notes);
    let Some(mut values) = solved else {
        let mut plan = greedy.into_plan(SolverUsed::GreedyFallback, bound, started, greedy_notes);
        notes.push(format!(
            "the {} solver found no plan in time; using the greedy plan",
            backend::backend_name()
        ));
        plan.notes.splice(0..0, notes);
        plan.solve_ms = started.elapsed().as_millis() as u64;
        return plan;
    };
    let can_be_whole: Vec<bool> = (0..problem.gpus.len()).map(|g| problem.can_be_whole(g)).collect();
    tiebreak::break_ties(problem, &model, &agg, &can_be_whole, &mut values);
    let decision = disaggregate(problem, &candidates, &agg, &model, &values, &can_be_whole);
    let mut ilp_notes = notes.clone();
    let mut ilp = score(problem, decision.clone(), &mut ilp_notes);
    // Pods placed in priority order may fall short of what the model met where it pooled slices,
    // CPU or memory over nodes; then each node is counted on its own.
    let met_by_model = objective_value(&model.levels[0].coefs, &values).round() as u64;
    if ilp.objective.demand_met < met_by_model {
        if let Some(exact) = placed_exactly(problem, &agg, decision, deadline) {
            let mut again_notes = notes.clone();
            let again = score(problem, exact, &mut again_notes);
            if again.objective.better(&ilp.objective) == std::cmp::Ordering::Greater {
                (ilp, ilp_notes) = (again, again_notes);
            }
        }
    }
    // The greedy plan is always at hand: never return anything worse (the ILP can lose a little
    // when disaggregating, or stop at the time limit with a weak incumbent).
    let mut plan = if greedy.objective.better(&ilp.objective) == std::cmp::Ordering::Greater {
        let (level, ilp_value, greedy_value) =
            ilp.objective.first_difference(&greedy.objective).unwrap_or(("demand met", 0, 0));
        let note = format!(
            "the ILP plan scored below the greedy plan ({level} {ilp_value} vs {greedy_value}); using the greedy plan"
        );
        let mut plan = greedy.into_plan(SolverUsed::GreedyFallback, bound, started, greedy_notes);
        plan.notes.splice(0..0, notes.into_iter().chain([note]));
        plan
    } else {
        ilp.into_plan(SolverUsed::Ilp, bound, started, ilp_notes)
    };
    plan.solve_ms = started.elapsed().as_millis() as u64;
    plan
}

/// The LP relaxation's demand met: an upper bound of every plan the program allows.
fn lp_bound(model: &Model, deadline: Instant) -> Option<f64> {
    let level = &model.levels[0].coefs;
    if level.is_empty() {
        return Some(0.0);
    }
    match model.lp.maximise(level, true, None, None, remaining(deadline)) {
        Ok(s) if !s.timed_out => Some(objective_value(level, &s.values)),
        _ => None,
    }
}

/// `decision` with each pod's node chosen by [`placement::node_quotas`].
fn placed_exactly(
    problem: &Problem,
    agg: &Aggregate,
    mut decision: Decision,
    deadline: Instant,
) -> Option<Decision> {
    let quotas = placement::node_quotas(problem, agg, &decision.targets, &decision.evicted, deadline)?;
    decision.hints.as_mut()?.node_quota = Some(quotas);
    Some(decision)
}

/// What the candidates left out, for the plan's notes.
fn cut_notes(candidates: &Candidates) -> Vec<String> {
    let mut notes: Vec<String> = candidates.cut_short.iter().map(|model| format!(
        "the geometry search for {model} stopped at the time limit: only the layouts found by then were considered (raise spec.solver.timeLimitMs or --time-limit-ms); the bound is all plannable demand"
    )).collect();
    if candidates.evictions_cut > 0 {
        notes.push(format!(
            "{} GPU(s) hold more than {} evictable pods: only evicting none, each alone or all of them was considered there; the bound is all plannable demand",
            candidates.evictions_cut,
            candidates::ALL_SUBSETS_UP_TO
        ));
    }
    notes
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn objective_value(coefs: &[(usize, f64)], values: &[f64]) -> f64 {
    coefs.iter().map(|&(v, c)| c * values[v]).sum()
}

/// Class-level counts -> a target per GPU, the pods to evict, and node-group hints for pods.
/// `can_be_whole`: per GPU, [`Problem::can_be_whole`].
fn disaggregate(
    problem: &Problem,
    candidates: &Candidates,
    agg: &Aggregate,
    model: &Model,
    values: &[f64],
    can_be_whole: &[bool],
) -> Decision {
    let mut targets: Vec<Geometry> = problem.gpus.iter().map(|g| g.current.clone()).collect();
    let mut evicted = BTreeSet::new();
    // Changes go to the nodes with the most undecided GPUs first, the same order for every
    // class, so that they gather on few nodes (node-change limit, pods needing several slices).
    let mut per_node = vec![0u32; problem.nodes.len()];
    for class in &agg.classes {
        for (g, _) in &class.gpus {
            per_node[problem.gpus[*g].node] += 1;
        }
    }
    for (c, class) in agg.classes.iter().enumerate() {
        let mut counts: Vec<u32> = model.x[c].iter().map(|&v| values[v].round().max(0.0) as u32).collect();
        let total: u32 = counts.iter().sum();
        let n = class.gpus.len() as u32;
        if total != n {
            // Rounding noise: the current geometry (entry 0) absorbs the difference.
            counts[0] = (counts[0] + n).saturating_sub(total);
        }
        let mut members: Vec<&(usize, std::sync::Arc<Vec<usize>>)> = class.gpus.iter().collect();
        // GPUs that could take a whole-GPU pod go last: a class holds GPUs that look the same
        // to the objective, and an A100 and an empty H100 do where no pod asks for a whole GPU,
        // but only the H100 could take one later (see `tiebreak`).
        members.sort_by_key(|(g, _)| {
            let node = problem.gpus[*g].node;
            (can_be_whole[*g], std::cmp::Reverse(per_node[node]), node, *g)
        });
        // Changed entries first, onto the front of the member list.
        let mut order: Vec<usize> = (0..class.entries.len()).collect();
        order.sort_by_key(|&i| (!class.entries[i].changed, i));
        let mut next = 0usize;
        for i in order {
            for _ in 0..counts[i] {
                let Some((g, cand_order)) = members.get(next) else { break };
                next += 1;
                let base = candidates.class_of_gpu[*g];
                let cand = &candidates.classes[base].1[cand_order[i]];
                targets[*g] = cand.geometry.clone();
                for (s, &r) in candidates.evictable[*g].iter().enumerate() {
                    if cand.evicts & (1 << s) != 0 {
                        evicted.insert(r);
                    }
                }
            }
        }
    }
    let quota = model
        .y
        .iter()
        .map(|(&key, &v)| (key, values[v].round().max(0.0) as u32))
        .filter(|(_, q)| *q > 0)
        .collect();
    let hints = Hints {
        pending_class: agg.pending_class.clone(),
        running_class: agg.running_class.clone(),
        node_group: agg.node_group.clone(),
        quota,
        node_quota: None,
    };
    Decision { targets, evicted, hints: Some(hints) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Objective;

    fn plan(demand_met: u64, notes: &[&str]) -> Plan {
        Plan {
            solver: SolverUsed::Ilp,
            placements_inferred: false,
            gpus: Vec::new(),
            evictions: Vec::new(),
            pods: Vec::new(),
            objective: Objective { demand_met, ..Objective::default() },
            bound: 0.0,
            gap: 0.0,
            solve_ms: 0,
            notes: notes.iter().map(|n| n.to_string()).collect(),
            gangs: Vec::new(),
        }
    }

    #[test]
    fn a_plan_without_eviction_kept_says_what_stopped_the_one_with_it() {
        let shared = "CPU or memory may run out on 67 nodes";
        let limit = "time limit reached while optimising demand met; the plan is the best found";
        let chosen = better_of(plan(7690, &[shared]), plan(7600, &[shared, limit]));
        assert_eq!(chosen.objective.demand_met, 7690);
        assert_eq!(chosen.notes, [shared.to_string(), format!("planning with eviction allowed: {limit}")]);
        // Where eviction does better, or as well, its plan is the one.
        assert_eq!(better_of(plan(7690, &[]), plan(7704, &[limit])).objective.demand_met, 7704);
        assert_eq!(better_of(plan(7690, &[]), plan(7690, &[])).notes, Vec::<String>::new());
    }
}
