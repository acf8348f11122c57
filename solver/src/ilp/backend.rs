//! A small linear model of our own, handed to good_lp's HiGHS (default) or microlp backend.
//! Owning the model lets the lexicographic stages and the LP relaxation rebuild the solver's
//! problem from one description.

use std::time::Duration;

use good_lp::{
    variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus, SolverModel,
};

#[derive(Debug, Clone, Copy)]
pub(crate) struct Var {
    pub lo: f64,
    pub hi: f64,
    pub integer: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub coefs: Vec<(usize, f64)>,
    pub lo: f64,
    pub hi: f64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Lp {
    pub vars: Vec<Var>,
    pub rows: Vec<Row>,
}

pub(crate) struct Solved {
    pub values: Vec<f64>,
    /// Stopped by the time limit; `values` is the best incumbent.
    pub timed_out: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SolveError {
    #[error("the solver found no solution: {0}")]
    Solver(String),
    /// Under a cutoff: no point worth more was found (none exists unless time ran out).
    #[error("no point better than the one known")]
    NothingBetter,
    /// The time limit came before the solver had any point (no cutoff was set).
    #[error("the time limit came before any solution was found")]
    OutOfTime,
    #[error("no solver backend compiled in (enable the `highs` or `microlp` feature)")]
    #[cfg_attr(any(feature = "highs", feature = "microlp"), allow(dead_code))]
    NoBackend,
}

impl Lp {
    pub(super) fn var(&mut self, lo: f64, hi: f64, integer: bool) -> usize {
        self.vars.push(Var { lo, hi, integer });
        self.vars.len() - 1
    }

    pub(super) fn row(&mut self, coefs: Vec<(usize, f64)>, lo: f64, hi: f64) {
        self.rows.push(Row { coefs, lo, hi });
    }

    /// Maximises `objective`; `relax` drops integrality (the LP bound). `start` is a feasible
    /// point microlp starts from (HiGHS takes none: see its `run_backend`). With a `cutoff`
    /// (the value of a point already known; HiGHS only), a MIP looks only for points worth more
    /// and fails with [`SolveError::NothingBetter`] when it finds none.
    pub(super) fn maximise(
        &self,
        objective: &[(usize, f64)],
        relax: bool,
        start: Option<&[f64]>,
        cutoff: Option<f64>,
        time_limit: Duration,
    ) -> Result<Solved, SolveError> {
        let mut problem = ProblemVariables::new();
        let vars: Vec<good_lp::Variable> = self
            .vars
            .iter()
            .map(|v| {
                let def = variable().bounds(v.lo..=v.hi);
                problem.add(if v.integer && !relax { def.integer() } else { def })
            })
            .collect();
        let mut obj = Expression::with_capacity(objective.len());
        for &(v, c) in objective {
            obj.add_mul(c, vars[v]);
        }
        let constraints: Vec<good_lp::Constraint> = self
            .rows
            .iter()
            .flat_map(|r| {
                let mut e = Expression::with_capacity(r.coefs.len());
                for &(v, c) in &r.coefs {
                    e.add_mul(c, vars[v]);
                }
                let mut out = Vec::with_capacity(2);
                if r.lo == r.hi {
                    out.push(e.eq(r.lo));
                } else {
                    if r.lo.is_finite() {
                        out.push(e.clone().geq(r.lo));
                    }
                    if r.hi.is_finite() {
                        out.push(e.leq(r.hi));
                    }
                }
                out
            })
            .collect();
        let seconds = time_limit.as_secs_f64().max(0.001);
        let unsolved = problem.maximise(obj);
        let start = Start {
            point: start
                .filter(|_| !cfg!(feature = "highs"))
                .map(|p| vars.iter().copied().zip(p.iter().copied()).collect()),
            cutoff: cutoff.filter(|_| !relax && cfg!(feature = "highs")),
        };
        run_backend(unsolved, constraints, start, seconds, relax).map(|(values_of, timed_out)| Solved {
            values: vars.iter().map(|&v| values_of(v)).collect(),
            timed_out,
        })
    }
}

type Values = Box<dyn Fn(good_lp::Variable) -> f64>;

/// Where a solve starts, in the backend's terms.
struct Start {
    /// microlp's start.
    #[cfg_attr(feature = "highs", allow(dead_code))]
    point: Option<Vec<(good_lp::Variable, f64)>>,
    /// Only points worth more than this are wanted (HiGHS MIP only).
    #[cfg_attr(not(feature = "highs"), allow(dead_code))]
    cutoff: Option<f64>,
}

fn finish<S: Solution + 'static>(
    result: Result<S, ResolutionError>,
    cutoff: Option<f64>,
) -> Result<(Values, bool), SolveError> {
    let solution = result.map_err(|e| match e {
        // Under a cutoff, "infeasible" and "no solution" mean nothing beats the known point.
        ResolutionError::Infeasible | ResolutionError::Other("NoSolutionFound") if cutoff.is_some() => {
            SolveError::NothingBetter
        }
        // Otherwise HiGHS ends without a point only at a limit, and the only limit set is the
        // time: good_lp turns a limit reached with no primal solution into `NoSolutionFound`
        // (rust-or/good_lp, src/solvers/highs.rs, `solve`).
        ResolutionError::Other("NoSolutionFound") => SolveError::OutOfTime,
        e => SolveError::Solver(e.to_string()),
    })?;
    let timed_out = matches!(solution.status(), SolutionStatus::TimeLimit);
    Ok((Box::new(move |v| solution.value(v)), timed_out))
}

#[cfg(feature = "highs")]
fn run_backend(
    unsolved: good_lp::variable::UnsolvedProblem,
    constraints: Vec<good_lp::Constraint>,
    start: Start,
    seconds: f64,
    relax: bool,
) -> Result<(Values, bool), SolveError> {
    let mut model = good_lp::solvers::highs::highs(unsolved)
        .set_time_limit(seconds)
        // Objectives are integers: stop only when no better integer value can exist.
        .set_option("mip_rel_gap", 0.0)
        .set_option("mip_abs_gap", 0.5)
        // One thread: the machine is small and results must not depend on scheduling.
        .set_option("threads", 1)
        // The feasibility-jump heuristic (on by default since HiGHS 1.10) took 70% of the
        // time of small models (the simulator's 64-GPU replays) and found nothing the
        // branch-and-bound did not: our models always have a feasible point (keep every GPU).
        .set_option("mip_heuristic_run_feasibility_jump", false)
        .set_option("output_flag", false);
    if relax {
        model = model.set_option("solver", "simplex");
    }
    // No MIP start for HiGHS: when presolve reduces the problem and the start is already
    // optimal in the reduced space, HiGHS 1.16 hands back the start as given instead of the
    // postsolved optimum (seen on the 8,000-GPU eviction benchmark: a stage reported -208 in
    // the reduced space and returned a point worth -4,524 in the original one). A known
    // point's value is given as a cutoff instead: HiGHS prunes every node that cannot beat it
    // and fixes variables by reduced cost against it from the root on. `objective_bound` is
    // the MIP solver's upper limit in its own minimising sense, so a maximum is negated
    // (ERGO-Code/HiGHS, highs/mip/HighsMipSolverData.cpp: `upper_limit =
    // mipsolver.options_mip_->objective_bound`); the objective is integral, so a better point
    // is worth at least half a unit more.
    let Start { cutoff, .. } = start;
    if let Some(value) = cutoff {
        model = model.set_option("objective_bound", -(value + 0.5));
    }
    for c in constraints {
        model.add_constraint(c);
    }
    finish(model.solve(), cutoff)
}

#[cfg(all(feature = "microlp", not(feature = "highs")))]
fn run_backend(
    unsolved: good_lp::variable::UnsolvedProblem,
    constraints: Vec<good_lp::Constraint>,
    start: Start,
    seconds: f64,
    _relax: bool,
) -> Result<(Values, bool), SolveError> {
    use good_lp::{WithInitialSolution, WithTimeLimit};
    let mut model = good_lp::solvers::microlp::microlp(unsolved).with_time_limit(seconds);
    if let Some(init) = start.point {
        model = model.with_initial_solution(init);
    }
    for c in constraints {
        model.add_constraint(c);
    }
    finish(model.solve(), None)
}

#[cfg(not(any(feature = "highs", feature = "microlp")))]
fn run_backend(
    _: good_lp::variable::UnsolvedProblem,
    _: Vec<good_lp::Constraint>,
    _: Start,
    _: f64,
    _: bool,
) -> Result<(Values, bool), SolveError> {
    Err(SolveError::NoBackend)
}

/// Name of the compiled backend, for notes and benchmarks.
pub(crate) fn backend_name() -> &'static str {
    if cfg!(feature = "highs") {
        "highs"
    } else if cfg!(feature = "microlp") {
        "microlp"
    } else {
        "none"
    }
}

#[cfg(all(test, feature = "highs"))]
mod tests {
    use good_lp::solvers::highs::HighsSolution;

    use super::*;

    /// HiGHS ends without a point only at a limit or under a cutoff: without a cutoff that is
    /// the time limit, which the plan's notes then name (not "the solver found no solution").
    #[test]
    fn no_point_is_the_time_limit_without_a_cutoff_and_nothing_better_under_one() {
        let no_point = || Err(ResolutionError::Other("NoSolutionFound"));
        assert!(matches!(finish::<HighsSolution>(no_point(), None), Err(SolveError::OutOfTime)));
        assert!(matches!(finish::<HighsSolution>(no_point(), Some(3.0)), Err(SolveError::NothingBetter)));
        let other = Err(ResolutionError::Other("SolveError"));
        assert!(matches!(finish::<HighsSolution>(other, None), Err(SolveError::Solver(_))));
    }
}
