//! A memo for `maximal_extensions`, owned by whoever plans: a planner asks the same question
//! (same model, same instances kept, same allowed profiles) for every GPU of a class, and a
//! controller that keeps one [`GeometryCache`] across rounds asks it again every round.
//!
//! Keyed by the model's placement rules themselves (compared for equality, not hashed into a
//! fingerprint), so a model overridden by a catalog file never gets answers computed for the
//! built-in one. Bounded by the number of geometries held; when full it starts over (answers
//! are cheap to recompute).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::catalog::{Engines, GpuModel, ProfileId};

use super::{Geometry, Placed};

/// About 10-20 MiB of geometries at most.
const MAX_GEOMETRIES: usize = 200_000;

/// Everything about a model that the search reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ModelRules {
    placement_units: u8,
    compute_slices: u8,
    engine_totals: Option<Engines>,
    /// Per profile: name, size, starts, compute slices, engines, max instances.
    profiles: Vec<(String, u8, Vec<u8>, u8, Engines, u8)>,
    /// Per exclusive group: members, max total, what it only coexists with.
    groups: Vec<(Vec<String>, Option<u8>, Vec<String>)>,
}

impl ModelRules {
    fn of(model: &GpuModel) -> Self {
        ModelRules {
            placement_units: model.placement_units,
            compute_slices: model.compute_slices,
            engine_totals: model.engine_totals,
            profiles: model
                .profiles
                .iter()
                .map(|p| {
                    (p.name.clone(), p.size, p.starts.clone(), p.compute_slices, p.engines, p.max_instances)
                })
                .collect(),
            groups: model
                .exclusive_groups
                .iter()
                .map(|g| (g.profiles.clone(), g.max_total, g.only_coexists_with.clone()))
                .collect(),
        }
    }
}

type Key = (ModelRules, Vec<Placed>, Vec<ProfileId>);

#[derive(Debug, Default)]
struct Memo {
    entries: HashMap<Key, Arc<Vec<Geometry>>>,
    geometries: usize,
}

/// Answers of the geometry search, shared by the GPUs of one plan and, when the caller keeps
/// it, by later plans. Cheap to create; safe to share between threads.
#[derive(Debug, Default)]
pub struct GeometryCache {
    memo: Mutex<Memo>,
}

impl GeometryCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The memoized answer for (model, fixed, allowed), computing it on a miss. `allowed` must
    /// be normalized (sorted, no repeats) so equal questions share an entry. `compute` says
    /// whether its answer is complete; only complete answers are kept.
    pub(crate) fn get_or_compute(
        &self,
        model: &GpuModel,
        fixed: &Geometry,
        allowed: &[ProfileId],
        compute: impl FnOnce() -> (Vec<Geometry>, bool),
    ) -> (Vec<Geometry>, bool) {
        let key: Key = (ModelRules::of(model), fixed.instances().to_vec(), allowed.to_vec());
        if let Some(hit) = self.lock().entries.get(&key) {
            return (hit.as_ref().clone(), true);
        }
        // Computed outside the lock: other threads may search meanwhile; both store equal values.
        let (value, complete) = compute();
        if !complete {
            return (value, false);
        }
        let value = Arc::new(value);
        let mut memo = self.lock();
        if memo.geometries + value.len() > MAX_GEOMETRIES {
            memo.entries.clear();
            memo.geometries = 0;
        }
        memo.geometries += value.len();
        if let Some(old) = memo.entries.insert(key, Arc::clone(&value)) {
            memo.geometries -= old.len();
        }
        (value.as_ref().clone(), true)
    }

    /// How many answers are held (for tests and benchmarks).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Memo> {
        // A panic while holding the lock leaves a consistent map (inserts are single calls).
        self.memo.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn equal_questions_are_answered_once_and_changed_rules_are_asked_again() {
        let cache = GeometryCache::new();
        let model = Catalog::builtin().find("A100-40GB").expect("built in").clone();
        let fixed = Geometry::default();
        let computed = Cell::new(0);
        let ask = |model: &GpuModel| {
            cache.get_or_compute(model, &fixed, &[], || {
                computed.set(computed.get() + 1);
                (Vec::new(), true)
            })
        };
        ask(&model);
        ask(&model);
        assert_eq!(computed.get(), 1, "the same question is answered from the cache");
        // A catalog file that changes a placement rule must not get the built-in answer.
        let mut overridden = model.clone();
        overridden.profiles[0].starts.pop();
        ask(&overridden);
        assert_eq!(computed.get(), 2);
        assert_eq!(cache.len(), 2);
        // An answer cut short by a deadline is returned but never kept.
        let cut = cache
            .get_or_compute(&model, &Geometry::new(vec![Placed::new(0, 0)]), &[], || (Vec::new(), false));
        assert!(!cut.1);
        assert_eq!(cache.len(), 2);
    }
}
