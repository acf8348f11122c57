//! Geometries: sets of GPU instances placed on a GPU's placement units.
//!
//! A placed instance is `(profile, start)`; it covers units `[start, start + size)`. A geometry
//! is valid when every start is legal, no two instances overlap, per-profile caps, exclusive
//! groups, engine totals and compute slices hold. Search (placement, enumeration, maximal
//! extensions) lives in `search`, spec parsing in `spec`, the diff in `diff`.

pub mod cache;
mod diff;
mod error;
mod rules;
mod search;
mod spec;

use serde::Serialize;

use crate::catalog::{GpuModel, ProfileId};

pub use cache::GeometryCache;
pub use diff::{diff, GeometryDiff};
pub use error::GeometryError;
pub use search::{
    enumerate, maximal_extensions, maximal_extensions_cached, maximal_extensions_until, place, Extensions,
};
pub use spec::{parse_spec, GeometrySpec};

/// One GPU instance: a profile at a start unit. Ordered by `(start, profile)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Placed {
    // Field order gives the derived Ord its meaning: by start, then profile.
    pub start: u8,
    pub profile: ProfileId,
}

impl Placed {
    pub fn new(profile: ProfileId, start: u8) -> Placed {
        Placed { start, profile }
    }
}

/// A set of placed instances, kept sorted so equal geometries compare and hash equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Geometry {
    instances: Vec<Placed>,
}

impl Geometry {
    /// Duplicates are kept (and rejected by [`validate`]) so nothing a user wrote is dropped.
    pub fn new(mut instances: Vec<Placed>) -> Self {
        instances.sort();
        Geometry { instances }
    }

    pub fn empty() -> Self {
        Geometry::default()
    }

    pub fn instances(&self) -> &[Placed] {
        &self.instances
    }

    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    pub fn contains(&self, placed: &Placed) -> bool {
        self.instances.binary_search(placed).is_ok()
    }

    /// Instances per profile, indexed by [`ProfileId`].
    pub fn counts(&self, model: &GpuModel) -> Vec<u16> {
        let mut counts = vec![0u16; model.profiles.len()];
        for p in &self.instances {
            if let Some(c) = counts.get_mut(p.profile) {
                *c = c.saturating_add(1);
            }
        }
        counts
    }

    /// Bitmask of occupied placement units (bit `u` set when unit `u` is covered).
    pub fn used_units(&self, model: &GpuModel) -> u32 {
        self.instances
            .iter()
            .filter(|p| p.profile < model.profiles.len())
            .fold(0, |mask, p| mask | model.profiles[p.profile].mask_at(p.start))
    }

    /// Compute slices the instances take together.
    pub fn compute_slices(&self, model: &GpuModel) -> u32 {
        self.instances
            .iter()
            .filter(|p| p.profile < model.profiles.len())
            .map(|p| model.profiles[p.profile].compute_slices as u32)
            .sum()
    }

    /// `3g.20gb@4,2g.10gb@0`: larger instances first, then by start; `-` when empty.
    pub fn display(&self, model: &GpuModel) -> String {
        if self.instances.is_empty() {
            return "-".to_string();
        }
        let mut order = self.instances.clone();
        sort_largest_first(&mut order, model);
        order.iter().map(|p| placed_name(model, p)).collect::<Vec<_>>().join(",")
    }

    /// The whole GPU: MIG mode off.
    pub fn whole(model: &GpuModel) -> Geometry {
        Geometry { instances: vec![Placed::new(model.whole(), 0)] }
    }

    /// Whether this is the whole GPU (MIG mode off) rather than a MIG geometry.
    pub fn is_whole(&self, model: &GpuModel) -> bool {
        self.instances.iter().any(|p| model.is_whole(p.profile))
    }

    /// How much of the GPU is free, in large pieces (the plan's "free ranges" level, more is
    /// better): [`Geometry::instance_ranges`], and for a GPU in MIG mode with no instance at
    /// all, one free range of its whole grid ([`Geometry::empty_ranges`]).
    pub fn free_ranges(&self, model: &GpuModel, is_free: impl Fn(usize) -> bool) -> u32 {
        if self.instances.is_empty() {
            return Geometry::empty_ranges(model);
        }
        self.instance_ranges(model, is_free)
    }

    /// The squared size of each instance `is_free` says no pod holds: what the planner's
    /// integer program counts as free ranges (an empty GPU counts 0 there).
    pub fn instance_ranges(&self, model: &GpuModel, is_free: impl Fn(usize) -> bool) -> u32 {
        let size = |p: &Placed| u32::from(model.profile_info(p.profile).size);
        self.instances.iter().enumerate().filter(|&(i, _)| is_free(i)).map(|(_, p)| size(p) * size(p)).sum()
    }

    /// What a GPU of `model` with no instance is worth to the free ranges level: its whole grid
    /// as one range. (The planner's integer program counts it 0, see `ilp::tiebreak`.)
    pub fn empty_ranges(model: &GpuModel) -> u32 {
        let units = u32::from(model.placement_units);
        units * units
    }

    /// Whether a GPU of `model` now in `current` may be planned to this geometry: always where
    /// its mode stays, and across modes only where the model changes mode without a reset
    /// ([`GpuModel::mode_change_needs_reset`]) or the policy lets the agent reset GPUs
    /// (`resets_allowed`).
    pub fn reachable_from(&self, current: &Geometry, model: &GpuModel, resets_allowed: bool) -> bool {
        resets_allowed || !model.mode_change_needs_reset() || self.is_whole(model) == current.is_whole(model)
    }

    /// The same instances with one more.
    pub fn with(&self, placed: Placed) -> Geometry {
        let mut instances = self.instances.clone();
        let at = instances.binary_search(&placed).unwrap_or_else(|e| e);
        instances.insert(at, placed);
        Geometry { instances }
    }
}

impl FromIterator<Placed> for Geometry {
    fn from_iter<I: IntoIterator<Item = Placed>>(iter: I) -> Self {
        Geometry::new(iter.into_iter().collect())
    }
}

/// Checks every rule of the model; the first violation found is reported.
pub fn validate(model: &GpuModel, g: &Geometry) -> Result<(), GeometryError> {
    rules::check(model, g.instances())
}

/// `3g.20gb@4`, `whole` for the whole GPU, or `#7@4` for an id the model does not have.
pub fn placed_name(model: &GpuModel, p: &Placed) -> String {
    match model.profiles.get(p.profile) {
        Some(_) if model.is_whole(p.profile) => crate::catalog::WHOLE.to_string(),
        Some(profile) => format!("{}@{}", profile.name, p.start),
        None => format!("#{}@{}", p.profile, p.start),
    }
}

/// Largest first (more placement units, then more compute), then by start: the order in which
/// instances are best created, since NVML packs small instances around large ones.
pub fn sort_largest_first(instances: &mut [Placed], model: &GpuModel) {
    let weight =
        |p: &Placed| model.profiles.get(p.profile).map(|pr| (pr.size, pr.compute_slices)).unwrap_or((0, 0));
    instances.sort_by(|a, b| {
        weight(b).cmp(&weight(a)).then(a.start.cmp(&b.start)).then(a.profile.cmp(&b.profile))
    });
}
