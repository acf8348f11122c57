//! Memo for `maximal_extensions`: a planner asks the same question (same model, same instances
//! kept, same allowed profiles) for every GPU of a class and in every round.
//!
//! Keyed by a fingerprint of the model's placement rules rather than its key, so a model
//! overridden by a catalog file never gets answers computed for the built-in one. Bounded by
//! the number of geometries held; when full it starts over (answers are cheap to recompute).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use crate::catalog::{GpuModel, ProfileId};

use super::{Geometry, Placed};

/// About 10-20 MiB of geometries at most.
const MAX_GEOMETRIES: usize = 200_000;

type Key = (u64, Vec<Placed>, Vec<ProfileId>);

#[derive(Default)]
struct Memo {
    entries: HashMap<Key, Arc<Vec<Geometry>>>,
    geometries: usize,
}

fn memo() -> &'static Mutex<Memo> {
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(Memo::default()))
}

/// Everything about a model that the search reads. `DefaultHasher::new()` has fixed keys, so
/// the value is the same in every run.
pub(crate) fn fingerprint(model: &GpuModel) -> u64 {
    let mut h = DefaultHasher::new();
    model.placement_units.hash(&mut h);
    model.compute_slices.hash(&mut h);
    model.engine_totals.hash(&mut h);
    for p in &model.profiles {
        (p.size, &p.starts, p.compute_slices, p.engines, p.max_instances).hash(&mut h);
    }
    for g in &model.exclusive_groups {
        (&g.profiles, g.max_total, &g.only_coexists_with).hash(&mut h);
    }
    // Group members are stored by name; names resolve to ids through the profile list.
    for p in &model.profiles {
        p.name.hash(&mut h);
    }
    h.finish()
}

/// The memoized answer for (model, fixed, allowed), computing it on a miss. `allowed` must be
/// normalized (sorted, no repeats) so equal questions share an entry.
pub(crate) fn get_or_compute(
    model: &GpuModel,
    fixed: &Geometry,
    allowed: &[ProfileId],
    compute: impl FnOnce() -> Vec<Geometry>,
) -> Vec<Geometry> {
    let key: Key = (fingerprint(model), fixed.instances().to_vec(), allowed.to_vec());
    if let Some(hit) = lock().entries.get(&key) {
        return hit.as_ref().clone();
    }
    // Computed outside the lock: other threads may search meanwhile; both store equal values.
    let value = Arc::new(compute());
    let mut memo = lock();
    if memo.geometries + value.len() > MAX_GEOMETRIES {
        memo.entries.clear();
        memo.geometries = 0;
    }
    memo.geometries += value.len();
    if let Some(old) = memo.entries.insert(key, Arc::clone(&value)) {
        memo.geometries -= old.len();
    }
    value.as_ref().clone()
}

fn lock() -> std::sync::MutexGuard<'static, Memo> {
    // A panic while holding the lock leaves a consistent map (inserts are single calls).
    memo().lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
