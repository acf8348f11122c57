//! Search over placements: put a multiset of profiles next to fixed instances, enumerate valid
//! and maximal geometries. Placement grids have at most 32 units and a handful of profiles, so
//! an exhaustive depth-first search over bitmasks is exact and fast.

use std::ops::ControlFlow;
use std::time::Instant;

use crate::catalog::{GpuModel, ProfileId};

use super::rules::{self, Rules, State};
use super::GeometryCache;
use super::{validate, Geometry, GeometryError, Placed};

/// A candidate instance: profile, start and the units it covers.
#[derive(Clone, Copy)]
struct Choice {
    profile: ProfileId,
    start: u8,
    mask: u32,
}

/// Every (profile, start) of the `allowed` profiles (existing ids, no repeats).
fn choices(rules: &Rules, allowed: &[ProfileId]) -> Vec<Choice> {
    let mut out = Vec::new();
    for &profile in allowed {
        for &start in &rules.profiles[profile].starts {
            out.push(Choice { profile, start, mask: rules.mask(profile, start) });
        }
    }
    out.sort_by_key(|c| (c.start, c.profile));
    out
}

fn state_of(rules: &Rules, g: &Geometry) -> State {
    let mut state = State::new(rules);
    for p in g.instances() {
        state.add(rules, p.profile, rules.mask(p.profile, p.start));
    }
    state
}

fn check_ids(model: &GpuModel, ids: &[ProfileId]) -> Result<(), GeometryError> {
    match ids.iter().find(|&&id| id >= model.profiles.len()) {
        Some(&id) => {
            Err(GeometryError::UnknownProfileId { model: model.key.clone(), id, count: model.profiles.len() })
        }
        None => Ok(()),
    }
}

/// Every maximal geometry that contains `fixed` unchanged and adds only `allowed` profiles.
/// "Maximal": no allowed profile fits anywhere any more. Sorted; empty when `fixed` is invalid.
/// When nothing can be added, the answer is `fixed` itself.
pub fn maximal_extensions(model: &GpuModel, fixed: &Geometry, allowed: &[ProfileId]) -> Vec<Geometry> {
    maximal_extensions_cached(model, fixed, allowed, &GeometryCache::new())
}

/// [`maximal_extensions`], answered from `cache` where it asked the same question before.
pub fn maximal_extensions_cached(
    model: &GpuModel,
    fixed: &Geometry,
    allowed: &[ProfileId],
    cache: &GeometryCache,
) -> Vec<Geometry> {
    maximal_extensions_until(model, fixed, allowed, cache, None).geometries
}

/// What a search bounded by a deadline found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extensions {
    /// Sorted; every one valid and maximal. Only some of them when `complete` is false.
    pub geometries: Vec<Geometry>,
    /// False when the deadline stopped the search first (such an answer is never cached).
    pub complete: bool,
}

/// [`maximal_extensions_cached`], stopped at `deadline`: a catalog model may have millions of
/// layouts (up to the catalog's bound), and a plan's time limit covers its search too.
pub fn maximal_extensions_until(
    model: &GpuModel,
    fixed: &Geometry,
    allowed: &[ProfileId],
    cache: &GeometryCache,
    deadline: Option<Instant>,
) -> Extensions {
    if validate(model, fixed).is_err() {
        return Extensions { geometries: Vec::new(), complete: true };
    }
    let allowed = normalized(model, allowed);
    let (geometries, complete) = cache.get_or_compute(model, fixed, &allowed, || {
        let rules = Rules::new(model);
        let choices = choices(&rules, &allowed);
        let state = state_of(&rules, fixed);
        let mut out = Vec::new();
        let mut clock = Clock::new(deadline);
        let complete = walk(&rules, &choices, state, &mut |addable, chosen| {
            if addable.is_empty() {
                out.push(with_chosen(fixed, &choices, chosen));
            }
            clock.tick()
        });
        out.sort();
        (out, complete)
    });
    Extensions { geometries, complete }
}

/// Checks a deadline every [`Clock::EVERY`] steps of a search (reading the time is dearer than
/// a step).
struct Clock {
    deadline: Option<Instant>,
    steps: u32,
}

impl Clock {
    const EVERY: u32 = 1024;

    fn new(deadline: Option<Instant>) -> Clock {
        Clock { deadline, steps: 0 }
    }

    fn tick(&mut self) -> ControlFlow<()> {
        self.steps = self.steps.wrapping_add(1);
        let due =
            self.steps.is_multiple_of(Self::EVERY) && self.deadline.is_some_and(|d| Instant::now() >= d);
        if due {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// Every valid geometry built from `allowed` (the empty one included), or only the maximal
/// ones. Sorted by instances, so the order is the same on every run.
pub fn enumerate(model: &GpuModel, allowed: &[ProfileId], maximal_only: bool) -> Vec<Geometry> {
    let rules = Rules::new(model);
    let choices = choices(&rules, &normalized(model, allowed));
    let mut out = Vec::new();
    let empty = Geometry::empty();
    walk(&rules, &choices, State::new(&rules), &mut |addable, chosen| {
        if !maximal_only || addable.is_empty() {
            out.push(with_chosen(&empty, &choices, chosen));
        }
        ControlFlow::Continue(())
    });
    out.sort();
    out
}

/// Allowed profile ids that exist, sorted and without repeats.
fn normalized(model: &GpuModel, allowed: &[ProfileId]) -> Vec<ProfileId> {
    let mut ids: Vec<ProfileId> = allowed.iter().copied().filter(|&p| p < model.profiles.len()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Visits every set of choices that keeps the rules, each set once (choices join in increasing
/// index order), with the choices that could still be added to it. Every rule is monotone (an
/// instance that cannot join a set cannot join a superset either), so each node only rechecks
/// what its parent could still add; a set is maximal when that list is empty. Returns false when
/// `visit` stopped the walk.
fn walk(rules: &Rules, choices: &[Choice], mut state: State, visit: &mut Visit<'_>) -> bool {
    // One stack holds the addable list of every level of the current path, so the search
    // allocates nothing per node.
    let mut stack: Vec<usize> =
        (0..choices.len()).filter(|&i| state.can_add(rules, choices[i].profile, choices[i].mask)).collect();
    let mut chosen = Vec::new();
    let len = stack.len();
    let mut search =
        Walk { rules, choices, stack: &mut stack, state: &mut state, chosen: &mut chosen, visit };
    search.descend(0, 0..len).is_continue()
}

/// Called at every node of the walk with the choices still addable and the ones chosen.
type Visit<'a> = dyn FnMut(&[usize], &[usize]) -> ControlFlow<()> + 'a;

struct Walk<'a, 'v> {
    rules: &'a Rules,
    choices: &'a [Choice],
    stack: &'a mut Vec<usize>,
    state: &'a mut State,
    chosen: &'a mut Vec<usize>,
    visit: &'a mut Visit<'v>,
}

impl Walk<'_, '_> {
    fn descend(&mut self, from: usize, level: std::ops::Range<usize>) -> ControlFlow<()> {
        (self.visit)(&self.stack[level.clone()], self.chosen)?;
        for k in level.clone() {
            let i = self.stack[k];
            if i < from {
                continue;
            }
            let c = self.choices[i];
            self.state.add(self.rules, c.profile, c.mask);
            self.chosen.push(i);
            let child_start = self.stack.len();
            for m in level.clone() {
                let j = self.stack[m];
                if j != i && self.state.can_add(self.rules, self.choices[j].profile, self.choices[j].mask) {
                    self.stack.push(j);
                }
            }
            let child_end = self.stack.len();
            let flow = self.descend(i + 1, child_start..child_end);
            self.stack.truncate(child_start);
            self.chosen.pop();
            self.state.remove(self.rules, c.profile, c.mask);
            flow?;
        }
        ControlFlow::Continue(())
    }
}

fn with_chosen(base: &Geometry, choices: &[Choice], chosen: &[usize]) -> Geometry {
    let mut instances = base.instances().to_vec();
    instances.extend(chosen.iter().map(|&i| Placed::new(choices[i].profile, choices[i].start)));
    Geometry::new(instances)
}

/// A legal geometry holding `fixed` where it is plus one instance of each profile in `add`.
/// Among all legal placements it picks the one that leaves the most room: the largest profile
/// of the model that still fits, then the most (profile, start) choices still open, then the
/// smallest geometry in sort order, so the answer is deterministic.
pub fn place(model: &GpuModel, fixed: &Geometry, add: &[ProfileId]) -> Result<Geometry, GeometryError> {
    validate(model, fixed)?;
    check_ids(model, add)?;
    let rules = Rules::new(model);
    let mut wanted: Vec<ProfileId> = add.to_vec();
    // Big instances first: they have the fewest starts, so the search fails fast.
    wanted.sort_by_key(|&p| (std::cmp::Reverse(model.profiles[p].size), p));
    let mut state = state_of(&rules, fixed);
    let every = choices(&rules, &model.all_profiles());
    let mut best: Option<(u8, usize, Geometry)> = None;
    let mut placed = Vec::new();
    assign(&rules, &wanted, 0, 0, &mut state, &mut placed, &mut |state, placed| {
        let open: Vec<&Choice> = every.iter().filter(|c| state.can_add(&rules, c.profile, c.mask)).collect();
        let largest = open.iter().map(|c| rules.profiles[c.profile].size).max().unwrap_or(0);
        let g = Geometry::new(fixed.instances().iter().chain(placed.iter()).copied().collect());
        let better = match &best {
            None => true,
            Some((l, n, bg)) => {
                (largest, open.len()) > (*l, *n) || ((largest, open.len()) == (*l, *n) && g < *bg)
            }
        };
        if better {
            best = Some((largest, open.len(), g));
        }
    });
    match best {
        Some((_, _, g)) => Ok(g),
        None => Err(no_placement(model, fixed, add)),
    }
}

/// Places `wanted[k..]`; equal profiles take increasing starts so that no arrangement is
/// visited twice.
fn assign(
    rules: &Rules,
    wanted: &[ProfileId],
    k: usize,
    min_start: u8,
    state: &mut State,
    placed: &mut Vec<Placed>,
    done: &mut dyn FnMut(&State, &[Placed]),
) {
    let Some(&profile) = wanted.get(k) else {
        done(state, placed);
        return;
    };
    let starts = rules.profiles[profile].starts.clone();
    for start in starts.into_iter().filter(|&s| s >= min_start) {
        let mask = rules.mask(profile, start);
        if !state.can_add(rules, profile, mask) {
            continue;
        }
        state.add(rules, profile, mask);
        placed.push(Placed::new(profile, start));
        let next_min = match wanted.get(k + 1) {
            Some(&next) if next == profile => start + 1,
            _ => 0,
        };
        assign(rules, wanted, k + 1, next_min, state, placed, done);
        placed.pop();
        state.remove(rules, profile, mask);
    }
}

/// Names, each once with its count when it repeats (`1g.10gb x400, 3g.40gb`), in the order
/// they first appear: a spec of hundreds of instances is said in one line.
fn counted<S: AsRef<str>>(names: impl Iterator<Item = S>) -> String {
    let mut counts: Vec<(S, usize)> = Vec::new();
    for name in names {
        match counts.iter_mut().find(|(n, _)| n.as_ref() == name.as_ref()) {
            Some((_, count)) => *count += 1,
            None => counts.push((name, 1)),
        }
    }
    let said: Vec<String> = counts
        .iter()
        .map(|(n, c)| if *c == 1 { n.as_ref().to_string() } else { format!("{} x{c}", n.as_ref()) })
        .collect();
    said.join(", ")
}

/// Says why `add` cannot join `fixed`: the first counting rule it breaks if any (caps, groups,
/// engines, compute), otherwise that no arrangement of the legal starts fits.
fn no_placement(model: &GpuModel, fixed: &Geometry, add: &[ProfileId]) -> GeometryError {
    let all: Vec<Placed> =
        fixed.instances().iter().copied().chain(add.iter().map(|&p| Placed::new(p, 0))).collect();
    let counting = rules::check_counting(model, &all).err();
    let wanted = counted(add.iter().map(|&p| model.profiles[p].name.as_str()));
    let fixed_text = if fixed.is_empty() {
        String::new()
    } else {
        format!(
            " next to {}",
            counted(fixed.instances().iter().map(|p| crate::geometry::placed_name(model, p)))
        )
    };
    let reason = match counting {
        Some(e) => e.to_string(),
        None => {
            let free = model.full_mask() & !fixed.used_units(model);
            let free_units: Vec<u8> = (0..model.placement_units).filter(|u| free & (1 << u) != 0).collect();
            let legal = add
                .iter()
                .map(|&p| {
                    format!(
                        "{} starts {:?} size {}",
                        model.profiles[p].name, model.profiles[p].starts, model.profiles[p].size
                    )
                })
                .collect::<Vec<_>>();
            let mut legal = legal;
            legal.dedup();
            format!(
                "free placement units {:?} cannot hold them at their legal starts ({})",
                free_units,
                legal.join("; ")
            )
        }
    };
    GeometryError::NoPlacement {
        model: model.key.clone(),
        wanted: format!("[{wanted}]"),
        fixed: fixed_text,
        reason,
    }
}
