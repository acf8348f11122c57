//! Pending pods in scheduling order (highest priority first, then by trace order, so an evicted
//! pod keeps its place), indexed by the profiles they ask for.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::ops::Bound;

use crate::workload::ProfileKey;

use super::state::PodIdx;

pub(crate) type Entry = (Reverse<i32>, PodIdx);

pub(crate) struct PendingQueue {
    all: BTreeSet<Entry>,
    by_profile: Vec<BTreeSet<Entry>>,
}

impl PendingQueue {
    pub(super) fn new(profiles: usize) -> Self {
        PendingQueue { all: BTreeSet::new(), by_profile: vec![BTreeSet::new(); profiles] }
    }

    pub(super) fn insert(&mut self, pod: PodIdx, priority: i32, request: &[(ProfileKey, u32)]) {
        let entry = (Reverse(priority), pod);
        self.all.insert(entry);
        for &(key, _) in request {
            self.by_profile[key].insert(entry);
        }
    }

    pub(super) fn remove(&mut self, pod: PodIdx, priority: i32, request: &[(ProfileKey, u32)]) {
        let entry = (Reverse(priority), pod);
        self.all.remove(&entry);
        for &(key, _) in request {
            self.by_profile[key].remove(&entry);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.all.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Pending pods in scheduling order.
    pub(super) fn pods(&self) -> impl Iterator<Item = PodIdx> + '_ {
        self.all.iter().map(|&(_, p)| p)
    }

    /// The first pod after `after` (in scheduling order) that asks for `key`.
    pub(super) fn next_wanting(&self, key: ProfileKey, after: Option<Entry>) -> Option<(Entry, PodIdx)> {
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.by_profile[key].range((lower, Bound::Unbounded)).next().map(|&e| (e, e.1))
    }
}
