//! Tie-breaks the integer program leaves open, made on its solution: which GPUs take new
//! slices where several would hold them equally well by every level of the objective.
//!
//! 1. A GPU that can still turn whole (a Hopper in MIG mode with nothing running, or one already
//!    whole) or one that cannot without a reset (an Ampere): HiGHS picks either, but only the
//!    first kind can later take a whole-GPU pod, and a fleet whose Hoppers were carved for
//!    slices an Ampere could have held turns those pods away. So a GPU of a class that could
//!    turn whole gives its new slices to a GPU of a class that cannot and keeps its geometry:
//!    the same free slices per profile and the same number of GPUs changed; where the two
//!    classes are in different node groups, the pods that were to take those slices move with
//!    them, as far as they may land there. Within a class, `disaggregate` makes the same choice
//!    by its GPU order.
//! 2. An empty GPU or one in use with room beside its pods: the free ranges level scores an
//!    empty GPU 0, below the same GPU carved, so the program carves empty GPUs first and
//!    scatters slices. Slices go on the GPU in use instead, in the same node group, where the
//!    program's rows allow it; the empty GPU counts as one free range of its whole grid, as the
//!    level means it to.
//!
//! Counting either as a level of the program made its last stage several times slower
//! (BENCHMARKS.md, "Simulator"). A move is kept only where every row of the program still holds
//! and no level is worth less (checked on the program itself).

use std::collections::{BTreeMap, HashMap};

use crate::geometry::Geometry;
use crate::plan::prepare::{Problem, User};

use super::aggregate::{Aggregate, Entry, GpuClass};
use super::model::Model;

/// Per node group, GPU classes.
type ByGroup = BTreeMap<usize, Vec<usize>>;

/// Both tie-breaks, in order; `values` is the solution, changed in place. `can_be_whole`: per
/// GPU, [`Problem::can_be_whole`].
pub(super) fn break_ties(
    problem: &Problem,
    model: &Model,
    agg: &Aggregate,
    can_be_whole: &[bool],
    values: &mut [f64],
) {
    let (able, unable) = by_kind(agg, |g| can_be_whole[g]);
    let (in_use, _) = by_kind(agg, |g| problem.gpus[g].users.iter().any(|u| !matches!(u, User::Free)));
    let (empty, _) = by_kind(agg, |g| problem.gpus[g].current.instances().is_empty());
    let first = !able.is_empty() && !unable.is_empty();
    let second = empty.keys().any(|group| in_use.contains_key(group));
    if !first && !second {
        return; // Nothing to move: the program's rows need not be indexed.
    }
    let mut check = Check::new(model, values);
    if first {
        slices_off_whole_able_gpus(model, agg, (&able, &unable), values, &mut check);
    }
    if second {
        slices_onto_gpus_in_use(problem, model, agg, (&empty, &in_use), values, &mut check);
    }
}

/// Moves new slices from GPUs of classes that could turn whole (`able`) onto GPUs of classes
/// that cannot (`unable`; 1. above).
fn slices_off_whole_able_gpus(
    model: &Model,
    agg: &Aggregate,
    (able, unable): (&ByGroup, &ByGroup),
    values: &mut [f64],
    check: &mut Check,
) {
    // Per class that cannot turn whole: its entries that carve, by the free slices they give.
    let carving: BTreeMap<usize, HashMap<&[u16], usize>> = unable
        .values()
        .flatten()
        .map(|&a| {
            let entries = agg.classes[a].entries.iter().enumerate().filter(|(_, e)| carves(e));
            (a, entries.map(|(j, e)| (e.free.as_slice(), j)).collect())
        })
        .collect();
    for (group, from) in able {
        // Same group first: there no pod has to move.
        let same = unable.get(group).into_iter().flatten();
        let others = unable.iter().filter(|(g, _)| *g != group).flat_map(|(_, to)| to);
        let to: Vec<usize> = same.chain(others).copied().collect();
        for &h in from {
            let Some(h_kept) = kept(&agg.classes[h]) else { continue };
            for (i, e) in agg.classes[h].entries.iter().enumerate().filter(|(_, e)| carves(e)) {
                for &a in &to {
                    if values[model.x[h][i]].round() < 1.0 {
                        break;
                    }
                    let Some(&j) = carving[&a].get(e.free.as_slice()) else { continue };
                    let Some(a_kept) = kept(&agg.classes[a]) else { continue };
                    let swap = Swap { h, i, h_kept, a, j, a_kept };
                    swap.apply(model, agg, values, check, 0.0);
                }
            }
        }
    }
}

/// Moves new slices from GPUs of classes with no instance (`empty`) onto GPUs of classes in
/// use (`in_use`) in the same node group (2. above).
fn slices_onto_gpus_in_use(
    problem: &Problem,
    model: &Model,
    agg: &Aggregate,
    (empty, in_use): (&ByGroup, &ByGroup),
    values: &mut [f64],
    check: &mut Check,
) {
    for (group, from) in empty {
        let Some(to) = in_use.get(group) else { continue };
        for &h in from {
            let Some(h_kept) = kept(&agg.classes[h]) else { continue };
            let empty_ranges = f64::from(Geometry::empty_ranges(problem.model_of(agg.classes[h].gpus[0].0)));
            for i in (0..agg.classes[h].entries.len()).filter(|&i| carves(&agg.classes[h].entries[i])) {
                let left = |values: &[f64]| values[model.x[h][i]].round() >= 1.0;
                for &a in to {
                    if !left(values) {
                        break;
                    }
                    let Some(a_kept) = kept(&agg.classes[a]) else { continue };
                    for j in (0..agg.classes[a].entries.len()).filter(|&j| carves(&agg.classes[a].entries[j]))
                    {
                        if !left(values) {
                            break;
                        }
                        let swap = Swap { h, i, h_kept, a, j, a_kept };
                        swap.apply(model, agg, values, check, empty_ranges);
                    }
                }
            }
        }
    }
}

/// Per node group, the GPU classes all of whose GPUs are `kind`, and those none of whose are
/// (a class of both is left to the GPU order of `disaggregate`).
fn by_kind(agg: &Aggregate, kind: impl Fn(usize) -> bool) -> (ByGroup, ByGroup) {
    let mut all = ByGroup::new();
    let mut none = ByGroup::new();
    for (c, class) in agg.classes.iter().enumerate() {
        let side = match class.gpus.iter().filter(|(g, _)| kind(*g)).count() {
            0 => &mut none,
            n if n == class.gpus.len() => &mut all,
            _ => continue,
        };
        side.entry(class.group).or_default().push(c);
    }
    (all, none)
}

/// The entry that keeps a GPU as it is (every class has it: its current geometry).
fn kept(class: &GpuClass) -> Option<usize> {
    class.entries.iter().position(|e| !e.changed && e.evicted.is_empty())
}

/// New slices, evicting no one.
fn carves(e: &Entry) -> bool {
    e.changed && !e.whole && e.evicted.is_empty()
}

/// GPUs of class `h` taking entry `i` keep their geometry (`h_kept`) instead, and as many of
/// class `a` take entry `j`, the same free slices, instead of keeping theirs (`a_kept`).
struct Swap {
    h: usize,
    i: usize,
    h_kept: usize,
    a: usize,
    j: usize,
    a_kept: usize,
}

impl Swap {
    /// As many GPUs as the counts allow, or one where a limit stops the rest; says whether any
    /// moved. `kept_ranges`: what a GPU of class `h` kept is worth to the free ranges level
    /// beyond what the program counts.
    fn apply(
        &self,
        model: &Model,
        agg: &Aggregate,
        values: &mut [f64],
        check: &mut Check,
        kept_ranges: f64,
    ) -> bool {
        let Swap { h, i, h_kept, a, j, a_kept } = *self;
        let count = |v: usize| values[v].round().max(0.0);
        let n = count(model.x[h][i]).min(count(model.x[a][a_kept]));
        if n < 1.0 {
            return false;
        }
        let (from, to) = (agg.classes[h].group, agg.classes[a].group);
        let tries: &[f64] = if n > 1.0 { &[n, 1.0] } else { &[1.0] };
        for &n in tries {
            let mut deltas = vec![
                (model.x[h][i], -n),
                (model.x[h][h_kept], n),
                (model.x[a][a_kept], -n),
                (model.x[a][j], n),
            ];
            if from != to {
                let free = &agg.classes[h].entries[i].free;
                let freed: Vec<(usize, f64)> =
                    free.iter().enumerate().map(|(k, &f)| (k, f64::from(f) * n)).collect();
                deltas.extend(pods_following(model, agg, values, check, (from, to), &freed));
            }
            if check.apply(values, &deltas, kept_ranges * n) {
                return true;
            }
        }
        false
    }
}

/// Moves of pods from group `from` to group `to` (`(variable, change)`) so that `from` holds
/// the slices it keeps after giving up `freed` (`(profile key, slices)`): pods of the classes
/// that take those slices, where they may also land in `to`, in class order.
fn pods_following(
    model: &Model,
    agg: &Aggregate,
    values: &[f64],
    check: &Check,
    (from, to): (usize, usize),
    freed: &[(usize, f64)],
) -> Vec<(usize, f64)> {
    let mut moves = Vec::new();
    // Per profile key: slices the group's pods would take beyond what it has left.
    let mut over: BTreeMap<usize, f64> = BTreeMap::new();
    for &(k, f) in freed.iter().filter(|(_, f)| *f > 0.0) {
        let Some(&r) = model.slice_rows.get(&(from, k)) else { continue };
        let excess = check.activity[r] + f - model.lp.rows[r].hi;
        if excess > TOLERANCE {
            over.insert(k, excess);
        }
    }
    for &d in &agg.groups[from].demand {
        if over.is_empty() {
            break;
        }
        let (Some(&here), Some(&there)) = (model.y.get(&(d, from)), model.y.get(&(d, to))) else { continue };
        let slices = &agg.demand[d].needs.slices;
        let placed = values[here].round();
        // Pods of this class needed to cover the largest shortfall among the keys it takes.
        let wanted = slices
            .iter()
            .filter_map(|&(k, need)| over.get(&k).map(|&x| (x / f64::from(need)).ceil()))
            .fold(0.0, f64::max);
        let n = wanted.min(placed);
        if n < 1.0 {
            continue;
        }
        moves.extend([(here, -n), (there, n)]);
        for &(k, need) in slices {
            if let Some(x) = over.get_mut(&k) {
                *x -= n * f64::from(need);
            }
        }
        over.retain(|_, x| *x > TOLERANCE);
    }
    moves
}

/// The program's rows and levels, to keep a move only where every row holds and no level is
/// worth less.
struct Check<'m> {
    model: &'m Model,
    /// Per variable: its rows and coefficients.
    rows_of: Vec<Vec<(usize, f64)>>,
    /// Per variable: its levels and coefficients.
    levels_of: Vec<Vec<(usize, f64)>>,
    activity: Vec<f64>,
    /// The free ranges level, if the program has one.
    ranges: Option<usize>,
}

/// Slack for floating-point sums of integral terms.
const TOLERANCE: f64 = 1e-6;

impl<'m> Check<'m> {
    fn new(model: &'m Model, values: &[f64]) -> Check<'m> {
        let mut rows_of = vec![Vec::new(); model.lp.vars.len()];
        let mut activity = Vec::with_capacity(model.lp.rows.len());
        for (r, row) in model.lp.rows.iter().enumerate() {
            activity.push(row.coefs.iter().map(|&(v, c)| c * values[v]).sum());
            for &(v, c) in &row.coefs {
                rows_of[v].push((r, c));
            }
        }
        let mut levels_of = vec![Vec::new(); model.lp.vars.len()];
        for (l, level) in model.levels.iter().enumerate() {
            for &(v, c) in &level.coefs {
                levels_of[v].push((l, c));
            }
        }
        let ranges = model.levels.iter().position(|l| l.name == "free ranges");
        Check { model, rows_of, levels_of, activity, ranges }
    }

    /// Adds `deltas` to `values` when every row touched stays within its bounds, every
    /// variable within its own and no level loses value (the free ranges level counting
    /// `ranges_beyond` more); says whether it did.
    fn apply(&mut self, values: &mut [f64], deltas: &[(usize, f64)], ranges_beyond: f64) -> bool {
        let mut rows: BTreeMap<usize, f64> = BTreeMap::new();
        let mut levels: BTreeMap<usize, f64> = BTreeMap::new();
        if let Some(l) = self.ranges.filter(|_| ranges_beyond != 0.0) {
            levels.insert(l, ranges_beyond);
        }
        for &(v, d) in deltas {
            let var = &self.model.lp.vars[v];
            if values[v] + d < var.lo - TOLERANCE || values[v] + d > var.hi + TOLERANCE {
                return false;
            }
            for &(r, c) in &self.rows_of[v] {
                *rows.entry(r).or_default() += c * d;
            }
            for &(l, c) in &self.levels_of[v] {
                *levels.entry(l).or_default() += c * d;
            }
        }
        let row_holds = |(&r, &d): (&usize, &f64)| {
            let row = &self.model.lp.rows[r];
            let a = self.activity[r] + d;
            a >= row.lo - TOLERANCE && a <= row.hi + TOLERANCE
        };
        if !rows.iter().all(row_holds) || levels.values().any(|&d| d < -TOLERANCE) {
            return false;
        }
        for (r, d) in rows {
            self.activity[r] += d;
        }
        for &(v, d) in deltas {
            values[v] += d;
        }
        true
    }
}
