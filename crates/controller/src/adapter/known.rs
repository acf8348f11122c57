//! What was already read of cached objects, by the object it was read from. The controller
//! reads every cached pod's requests and every MigNode's inventory on every pass and in every
//! round; at 150,000 pods and 5,000 MigNodes, reading them again was most of a pass. A cached
//! object never changes (the watch replaces a changed one with a new object), so what was read
//! of it stays true while the object is cached. Each entry holds its object, so its address is
//! not reused while the entry lives.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

/// Objects that could not be read, each with why.
pub type Refused<K, E> = Vec<(Arc<K>, E)>;

pub struct Known<K, V> {
    by_object: Arc<HashMap<usize, (Arc<K>, V)>>,
}

// Not derived: a derive would ask `K: Clone`/`K: Default`, which the objects need not be.
impl<K, V> Clone for Known<K, V> {
    fn clone(&self) -> Self {
        Known { by_object: self.by_object.clone() }
    }
}

impl<K, V> Default for Known<K, V> {
    fn default() -> Self {
        Known { by_object: Arc::new(HashMap::new()) }
    }
}

impl<K, V> std::fmt::Debug for Known<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Known({} objects)", self.by_object.len())
    }
}

impl<K, V: Clone> Known<K, V> {
    /// What `read` makes of each of `objects`, reusing what `earlier` read of the same objects;
    /// those it refuses come back with why.
    pub fn read<E>(
        earlier: &Known<K, V>,
        objects: &[Arc<K>],
        mut read: impl FnMut(&K) -> Result<V, E>,
    ) -> (Known<K, V>, Refused<K, E>) {
        let mut by_object = HashMap::with_capacity(objects.len());
        let mut refused = Vec::new();
        for object in objects {
            let address = Arc::as_ptr(object) as usize;
            let value = match earlier.by_object.get(&address) {
                Some((same, value)) if Arc::ptr_eq(same, object) => value.clone(),
                _ => match read(object) {
                    Ok(value) => value,
                    Err(e) => {
                        refused.push((object.clone(), e));
                        continue;
                    }
                },
            };
            by_object.insert(address, (object.clone(), value));
        }
        (Known { by_object: Arc::new(by_object) }, refused)
    }
}

/// Equal values held once: most pods of a workload ask for the same requests.
pub struct Interned<T> {
    distinct: HashSet<Arc<T>>,
}

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Interned { distinct: HashSet::new() }
    }
}

impl<T: Eq + Hash> Interned<T> {
    pub fn share(&mut self, value: T) -> Arc<T> {
        if let Some(shared) = self.distinct.get(&value) {
            return shared.clone();
        }
        let value = Arc::new(value);
        self.distinct.insert(value.clone());
        value
    }

    /// Forgets the values nothing else holds any more.
    pub fn forget_unused(&mut self) {
        self.distinct.retain(|v| Arc::strong_count(v) > 1);
    }
}

impl<K, V> Known<K, V> {
    /// What was read of `object` if it was read from this very object.
    pub fn get(&self, object: &Arc<K>) -> Option<&V> {
        match self.by_object.get(&(Arc::as_ptr(object) as usize)) {
            Some((same, value)) if Arc::ptr_eq(same, object) => Some(value),
            _ => None,
        }
    }
}
