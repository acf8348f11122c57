//! Objects in memory, one global resourceVersion counter, and a bounded history of changes
//! that watches replay from. Everything here runs under one lock held by the caller.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use super::registry::Registry;
use super::resource::StorageKey;

/// `(namespace, name)`; namespace is "" for cluster-scoped objects.
pub(crate) type ObjKey = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed write, as watches see it.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub storage: StorageKey,
    pub namespace: String,
    pub kind: ChangeType,
    /// The object after the change (for deletions: its last state, at the deletion's version).
    pub object: Arc<Value>,
    /// The object before the change, so selector watches can tell "stopped matching".
    pub previous: Option<Arc<Value>>,
}

/// Where an owner's dependents are, for garbage collection.
type DependentRef = (StorageKey, String, String);

pub(crate) struct Store {
    pub registry: Registry,
    collections: HashMap<StorageKey, BTreeMap<ObjKey, Arc<Value>>>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Changes at or below this version are gone from the history.
    compacted_rv: u64,
    dependents: HashMap<String, HashSet<DependentRef>>,
    uids: HashMap<String, DependentRef>,
    notifier: tokio::sync::watch::Sender<u64>,
    /// Bound pods terminate for their grace period until a kubelet deletes them for good (as
    /// on a real cluster), instead of going at once; on when simulated kubelets run.
    pub graceful_pods: bool,
}

/// A watch or continue token asked for a version the history no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expired {
    pub oldest_available: u64,
}

pub(crate) fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

pub(crate) fn uid_of(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or("")
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str().map(str::to_string))
        .collect()
}

impl Store {
    pub(crate) fn new(history_limit: usize, notifier: tokio::sync::watch::Sender<u64>) -> Self {
        Store {
            registry: Registry::default(),
            collections: HashMap::new(),
            rv: 1,
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted_rv: 1,
            dependents: HashMap::new(),
            uids: HashMap::new(),
            notifier,
            graceful_pods: false,
        }
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.rv
    }

    pub(crate) fn get(&self, storage: &StorageKey, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.collections.get(storage)?.get(&(ns.to_string(), name.to_string()))
    }

    /// Objects of one type in key order, optionally in one namespace.
    pub(crate) fn iter<'a>(
        &'a self,
        storage: &StorageKey,
        ns: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = &'a Arc<Value>> + 'a> {
        let Some(coll) = self.collections.get(storage) else {
            return Box::new(std::iter::empty());
        };
        match ns {
            Some(ns) => {
                let start = (ns.to_string(), String::new());
                Box::new(coll.range(start..).take_while(move |((n, _), _)| n == ns).map(|(_, v)| v))
            }
            None => Box::new(coll.values()),
        }
    }

    /// Objects after `after` (exclusive) in key order: list pagination.
    pub(crate) fn iter_after<'a>(
        &'a self,
        storage: &StorageKey,
        after: ObjKey,
    ) -> Box<dyn Iterator<Item = &'a Arc<Value>> + 'a> {
        let Some(coll) = self.collections.get(storage) else {
            return Box::new(std::iter::empty());
        };
        use std::ops::Bound;
        Box::new(coll.range((Bound::Excluded(after), Bound::Unbounded)).map(|(_, v)| v))
    }

    pub(crate) fn namespaces_in_use(&self, ns: &str) -> Vec<(StorageKey, String)> {
        let mut out = Vec::new();
        for (key, coll) in &self.collections {
            for (n, name) in coll.keys() {
                if n == ns {
                    out.push((key.clone(), name.clone()));
                }
            }
        }
        out
    }

    pub(crate) fn dependents_of(&self, uid: &str) -> Vec<DependentRef> {
        let mut v: Vec<DependentRef> = self.dependents.get(uid).into_iter().flatten().cloned().collect();
        v.sort();
        v
    }

    /// Where the object with this uid is stored.
    pub(crate) fn find_uid(&self, uid: &str) -> Option<DependentRef> {
        self.uids.get(uid).cloned()
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn index_owners(
        &mut self,
        storage: &StorageKey,
        ns: &str,
        name: &str,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        let entry = (storage.clone(), ns.to_string(), name.to_string());
        for uid in old.map(owner_uids).unwrap_or_default() {
            if let Some(set) = self.dependents.get_mut(&uid) {
                set.remove(&entry);
                if set.is_empty() {
                    self.dependents.remove(&uid);
                }
            }
        }
        for uid in new.map(owner_uids).unwrap_or_default() {
            self.dependents.entry(uid).or_default().insert(entry.clone());
        }
    }

    /// Stores `obj` (created or replaced) at a fresh resourceVersion.
    pub(crate) fn put(&mut self, storage: &StorageKey, mut obj: Value) -> Arc<Value> {
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or("").to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let obj = Arc::new(obj);
        let previous = self
            .collections
            .entry(storage.clone())
            .or_default()
            .insert((ns.clone(), name.clone()), obj.clone());
        self.index_owners(storage, &ns, &name, previous.as_deref(), Some(&obj));
        let uid = uid_of(&obj);
        if !uid.is_empty() {
            self.uids.insert(uid.to_string(), (storage.clone(), ns.clone(), name.clone()));
        }
        let kind = if previous.is_some() { ChangeType::Modified } else { ChangeType::Added };
        self.record(Change {
            rv,
            storage: storage.clone(),
            namespace: ns,
            kind,
            object: obj.clone(),
            previous,
        });
        obj
    }

    /// Removes an object; `last` is its final state (finalizers gone, deletionTimestamp set).
    pub(crate) fn take(
        &mut self,
        storage: &StorageKey,
        ns: &str,
        name: &str,
        last: Option<Value>,
    ) -> Option<Arc<Value>> {
        let previous = self.collections.get_mut(storage)?.remove(&(ns.to_string(), name.to_string()))?;
        self.index_owners(storage, ns, name, Some(&previous), None);
        self.uids.remove(uid_of(&previous));
        let rv = self.next_rv();
        let mut last = last.unwrap_or_else(|| (*previous).clone());
        last["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let last = Arc::new(last);
        self.record(Change {
            rv,
            storage: storage.clone(),
            namespace: ns.to_string(),
            kind: ChangeType::Deleted,
            object: last.clone(),
            previous: Some(previous),
        });
        Some(last)
    }

    /// Drops every object of a type (its CRD went away).
    pub(crate) fn drop_collection(&mut self, storage: &StorageKey) {
        let keys: Vec<ObjKey> =
            self.collections.get(storage).map(|c| c.keys().cloned().collect()).unwrap_or_default();
        for (ns, name) in keys {
            self.take(storage, &ns, &name, None);
        }
        self.collections.remove(storage);
    }

    fn record(&mut self, change: Change) {
        let rv = change.rv;
        self.history.push_back(Arc::new(change));
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted_rv = old.rv;
            }
        }
        self.notifier.send_replace(rv);
    }

    /// Changes after `rv`, oldest first, at most `max`.
    pub(crate) fn changes_after(&self, rv: u64, max: usize) -> Result<Vec<Arc<Change>>, Expired> {
        if rv < self.compacted_rv {
            return Err(Expired { oldest_available: self.compacted_rv });
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(self.history.range(start..).take(max).cloned().collect())
    }

    pub(crate) fn check_available(&self, rv: u64) -> Result<(), Expired> {
        if rv < self.compacted_rv {
            Err(Expired { oldest_available: self.compacted_rv })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store(limit: usize) -> Store {
        Store::new(limit, tokio::sync::watch::channel(0).0)
    }

    #[test]
    fn versions_increase_and_history_is_bounded() {
        let mut s = store(2);
        let key = StorageKey::new("", "pods");
        let a = s.put(&key, json!({"metadata": {"name": "a", "namespace": "d"}}));
        let b = s.put(&key, json!({"metadata": {"name": "a", "namespace": "d", "labels": {"x": "y"}}}));
        assert!(rv_of(&b) > rv_of(&a));
        let deleted = s.take(&key, "d", "a", None).unwrap();
        assert!(rv_of(&deleted) > rv_of(&b));
        assert!(s.get(&key, "d", "a").is_none());
        // Only the last two changes are kept: replay from `a`'s version still works, from before it not.
        let after_a = s.changes_after(rv_of(&a), 10).unwrap();
        assert_eq!(
            after_a.iter().map(|c| c.kind).collect::<Vec<_>>(),
            vec![ChangeType::Modified, ChangeType::Deleted]
        );
        assert_eq!(s.changes_after(rv_of(&a) - 1, 10).unwrap_err(), Expired { oldest_available: rv_of(&a) });
    }

    #[test]
    fn owner_index_follows_references() {
        let mut s = store(10);
        let key = StorageKey::new("", "pods");
        s.put(&key, json!({"metadata": {"name": "a", "namespace": "d", "ownerReferences": [{"uid": "u1"}]}}));
        assert_eq!(s.dependents_of("u1").len(), 1);
        s.put(&key, json!({"metadata": {"name": "a", "namespace": "d"}}));
        assert!(s.dependents_of("u1").is_empty());
    }
}
