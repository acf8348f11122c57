//! The lexicographic solve: the objective's levels grouped into stages, each stage optimised
//! with what the previous ones achieved held as a constraint.
//!
//! The first stage starts from a point of its own: the best integer point that gives GPUs only
//! the entries (shapes) its LP relaxation gives some of them, pods free to go to any node
//! group. That is a small problem, and when its point reaches the relaxation's bound it is
//! optimal and no branch and bound runs; otherwise the MIP runs told its value, so that it only
//! searches for better points (HiGHS prunes and fixes variables by reduced cost against it from
//! the root on). On the 90%-busy benchmark the point took the first stage from 0.76 to 0.5 s
//! when the pods' placements were held to the support too (at first), 2 GPUs changed short of
//! the bound; with them free it reaches the bound, and the stage takes 0.05 s (the placements
//! are where the program is most degenerate). Later stages do not start from a point: the
//! previous stage's answer is far from their optimum (free ranges 7,433 against 7,870 there),
//! so its value as a cutoff gained nothing, and it made HiGHS pick another of the tied optima,
//! one that placed 67 fewer pods on the pooled 1,000-GPU / 5,000-pod benchmark; a point on
//! their own support reached their bound too seldom to pay for itself (BENCHMARKS.md, the design
//! notes of *Planner: quality, time and memory*).

use std::collections::BTreeMap;
use std::time::Instant;

use super::backend::{Lp, SolveError, Solved};
use super::model::Model;
use super::{objective_value, remaining};

/// Stages combine levels while the combined objective stays below this, so that integer
/// objective values stay exact in floating point and within the solver's tolerances.
const MAX_STAGE_RANGE: f64 = 1e9;

/// An LP value within this much above an integer is taken as that integer when it bounds the
/// integer points: more than the solver's optimality tolerance can misstate it by, and less
/// than the half unit that separates two integral objective values.
const LP_BOUND_SLACK: f64 = 0.25;

/// The plan's note for a stage the time limit cut short.
fn time_limit_note(model: &Model, stage: &[usize]) -> String {
    let names: Vec<&str> = stage.iter().map(|&l| model.levels[l].name).collect();
    format!("time limit reached while optimising {}; the plan is the best found", names.join(", "))
}

/// Solves the levels in strict order; levels whose ranges multiply to less than
/// [`MAX_STAGE_RANGE`] share one stage with weights that keep the order strict.
pub(super) fn solve(model: &Model, deadline: Instant, notes: &mut Vec<String>) -> Option<Vec<f64>> {
    if model.lp.vars.is_empty() {
        return Some(Vec::new()); // Nothing to decide: every GPU keeps its geometry.
    }
    let stages = group_levels(model);
    if stages.is_empty() {
        // Nothing to optimise: any feasible point (all current) will do.
        return model.lp.maximise(&[], false, None, None, remaining(deadline)).ok().map(|s| s.values);
    }
    let mut lp: Lp = model.lp.clone();
    let entries = entry_variables(model);
    let mut best: Option<Vec<f64>> = None;
    for stage in stages {
        let objective = stage_objective(model, &stage);
        if remaining(deadline).is_zero() {
            notes.push(
                "time limit reached before all objective levels were optimised; the plan is the best found"
                    .into(),
            );
            break;
        }
        let solved = match &best {
            // Later stages start from the previous answer (microlp only; see the backend).
            Some(previous) => lp.maximise(&objective, false, Some(previous), None, remaining(deadline)),
            None => first_stage(&lp, &objective, &entries, deadline),
        };
        match solved {
            Ok(solved) => {
                let value = objective_value(&objective, &solved.values);
                lp.row(objective, value - 0.5, f64::INFINITY);
                best = Some(solved.values);
                if solved.timed_out {
                    notes.push(time_limit_note(model, &stage));
                    break;
                }
            }
            Err(e) => {
                // A later stage that ran out of time before finding any point is cut short by
                // the time limit as one that found a worse point is, and says so alike.
                match e {
                    _ if best.is_none() => {}
                    SolveError::OutOfTime => notes.push(time_limit_note(model, &stage)),
                    e => notes.push(format!("solver stopped early ({e}); the plan is the best found")),
                }
                break;
            }
        }
    }
    best
}

/// The non-empty levels, grouped into stages in order.
fn group_levels(model: &Model) -> Vec<Vec<usize>> {
    let mut stages: Vec<Vec<usize>> = Vec::new();
    let mut product = f64::INFINITY;
    for (l, level) in model.levels.iter().enumerate() {
        if level.coefs.is_empty() {
            continue;
        }
        let width = level.range.max(0.0) + 1.0;
        if product * width > MAX_STAGE_RANGE || stages.is_empty() {
            stages.push(vec![l]);
            product = width;
        } else {
            stages.last_mut().expect("a stage was pushed before the first one is filled").push(l);
            product *= width;
        }
    }
    stages
}

/// One objective for a stage: each level weighted by the product of the widths of the levels
/// below it in the stage.
fn stage_objective(model: &Model, stage: &[usize]) -> Vec<(usize, f64)> {
    let mut weight = 1.0;
    let mut objective: BTreeMap<usize, f64> = BTreeMap::new();
    for &l in stage.iter().rev() {
        for &(v, c) in &model.levels[l].coefs {
            *objective.entry(v).or_default() += c * weight;
        }
        weight *= model.levels[l].range.max(0.0) + 1.0;
    }
    objective.into_iter().collect()
}

/// Per variable of the program: whether it counts the GPUs of a class given one entry.
fn entry_variables(model: &Model) -> Vec<bool> {
    let mut entries = vec![false; model.lp.vars.len()];
    for &v in model.x.iter().flatten() {
        entries[v] = true;
    }
    entries
}

/// The first stage's best point: the point on the relaxation's support when it reaches the
/// relaxation's bound, else the MIP's answer if it beats that point.
fn first_stage(
    lp: &Lp,
    objective: &[(usize, f64)],
    entries: &[bool],
    deadline: Instant,
) -> Result<Solved, SolveError> {
    let Some(Support { point, value, bound }) = on_support(lp, objective, entries, deadline) else {
        return lp.maximise(objective, false, None, None, remaining(deadline));
    };
    if value >= bound {
        return Ok(Solved { values: point, timed_out: false });
    }
    match lp.maximise(objective, false, Some(&point), Some(value), remaining(deadline)) {
        Ok(solved) if objective_value(objective, &solved.values) > value => Ok(solved),
        Ok(solved) => Ok(Solved { values: point, timed_out: solved.timed_out }),
        Err(SolveError::NothingBetter) => {
            Ok(Solved { values: point, timed_out: remaining(deadline).is_zero() })
        }
        Err(e) => Err(e),
    }
}

/// The best integer point on a relaxation's support, its value and the relaxation's bound.
struct Support {
    point: Vec<f64>,
    value: f64,
    /// The relaxation's value rounded down to an integer: no integer point is worth more.
    bound: f64,
}

/// The best integer point among those that give GPUs only entries the LP relaxation gives
/// some GPUs: a small problem that often holds a point at or near the optimum. It gets a
/// quarter of the time left, so that the full MIP keeps the rest where it is not small.
fn on_support(lp: &Lp, objective: &[(usize, f64)], entries: &[bool], deadline: Instant) -> Option<Support> {
    let relaxed =
        lp.maximise(objective, true, None, None, remaining(deadline)).ok().filter(|s| !s.timed_out)?;
    let unused = |v: usize| relaxed.values[v].abs() < 1e-6;
    let mut restricted = lp.clone();
    for (v, var) in restricted.vars.iter_mut().enumerate() {
        if entries[v] && var.integer && var.lo == 0.0 && unused(v) {
            var.hi = 0.0;
        }
    }
    let solved = restricted.maximise(objective, false, None, None, remaining(deadline) / 4).ok()?;
    if solved.timed_out {
        return None;
    }
    let value = objective_value(objective, &solved.values);
    let bound = (objective_value(objective, &relaxed.values) + LP_BOUND_SLACK).floor();
    Some(Support { point: solved.values, value, bound })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// max 5a + 4b with 6a + 4b <= 24, a + 2b <= 6, a and b integers in 0..=10: the LP
    /// relaxation reaches 21 at (3, 1.5); the integer optimum is 20 at (4, 0).
    fn knapsack() -> (Lp, Vec<(usize, f64)>) {
        let mut lp = Lp::default();
        let a = lp.var(0.0, 10.0, true);
        let b = lp.var(0.0, 10.0, true);
        lp.row(vec![(a, 6.0), (b, 4.0)], f64::NEG_INFINITY, 24.0);
        lp.row(vec![(a, 1.0), (b, 2.0)], f64::NEG_INFINITY, 6.0);
        (lp, vec![(a, 5.0), (b, 4.0)])
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn the_first_stage_reaches_the_optimum_from_the_relaxation_support() {
        let (lp, objective) = knapsack();
        let solved = first_stage(&lp, &objective, &[true, true], later()).unwrap();
        assert_eq!(objective_value(&objective, &solved.values).round(), 20.0);
        assert!(!solved.timed_out);
    }

    /// With b's objective lowered to 2, the relaxation (a = 4, b = 0) is integral: the point
    /// on its support is kept as the optimum.
    #[test]
    fn a_support_point_at_the_relaxation_bound_is_the_answer() {
        let (lp, mut objective) = knapsack();
        objective[1].1 = 2.0;
        let solved = first_stage(&lp, &objective, &[true, true], later()).unwrap();
        assert_eq!(solved.values.iter().map(|v| v.round()).collect::<Vec<_>>(), vec![4.0, 0.0]);
    }

    /// max 2a + p with 2a + 1.2p <= 3.2: the relaxation (a = 1.6, p = 0) is worth 3.2, so no
    /// integer point beats 3, and (1, 1) is worth 3. Held to the relaxation's support, p stays
    /// 0 and the point is worth 2; where p places pods rather than shaping GPUs it stays free
    /// and the point reaches the bound, so no MIP runs.
    #[test]
    fn only_the_entries_are_held_to_the_relaxations_support() {
        let mut lp = Lp::default();
        let a = lp.var(0.0, 10.0, true);
        let p = lp.var(0.0, 10.0, true);
        lp.row(vec![(a, 2.0), (p, 1.2)], f64::NEG_INFINITY, 3.2);
        let objective = [(a, 2.0), (p, 1.0)];
        let held = on_support(&lp, &objective, &[true, true], later()).unwrap();
        assert_eq!((held.value.round(), held.bound), (2.0, 3.0));
        let free = on_support(&lp, &objective, &[true, false], later()).unwrap();
        assert_eq!((free.value.round(), free.bound), (3.0, 3.0));
    }

    /// The cutoff's sign: told the optimum, HiGHS finds nothing better; told less, it finds
    /// the optimum.
    #[cfg(feature = "highs")]
    #[test]
    fn highs_searches_only_above_the_known_value() {
        let (lp, objective) = knapsack();
        let time = Duration::from_secs(60);
        assert!(matches!(
            lp.maximise(&objective, false, None, Some(20.0), time),
            Err(SolveError::NothingBetter)
        ));
        let solved = lp.maximise(&objective, false, None, Some(18.0), time).unwrap();
        assert_eq!(objective_value(&objective, &solved.values).round(), 20.0);
    }

    #[test]
    fn levels_share_a_stage_while_their_ranges_multiply_below_the_limit() {
        let (lp, _) = knapsack();
        let level = |name, range| super::super::model::Level { name, coefs: vec![(0, 1.0)], range };
        let model = Model {
            lp,
            x: Vec::new(),
            y: BTreeMap::new(),
            slice_rows: BTreeMap::new(),
            levels: vec![level("a", 1e4), level("b", 1e4), level("c", 1e4), level("d", 0.0)],
        };
        assert_eq!(group_levels(&model), vec![vec![0, 1], vec![2, 3]]);
    }
}
