//! An object as the controller or the agent read it: typed, or, when it does not decode, its
//! metadata and the field that stopped it. kube-runtime decodes a whole list page at once, so
//! with plain types one object the controller cannot read (stored under an older, looser
//! CRD, or written by a newer Geometer) would make every list fail and nothing be planned;
//! with these the others are read and the bad one is reported (see `runtime::quarantine`).

use std::borrow::Cow;
use std::sync::Arc;

use crate::decode::{self, DecodeError, Stored};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::Deserializer;
use serde::Deserialize;
use serde_json::Value;

#[derive(Clone, Debug)]
pub enum Decoded<K> {
    Read(Arc<K>),
    Unreadable(Arc<Unreadable>),
}

/// An object that did not decode: who it is and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    pub meta: ObjectMeta,
    pub error: DecodeError,
}

impl<K> Decoded<K> {
    pub fn read(&self) -> Option<&Arc<K>> {
        match self {
            Decoded::Read(k) => Some(k),
            Decoded::Unreadable(_) => None,
        }
    }

    pub fn unreadable(&self) -> Option<&Arc<Unreadable>> {
        match self {
            Decoded::Read(_) => None,
            Decoded::Unreadable(u) => Some(u),
        }
    }
}

impl<'de, K: Stored> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Through a value tree, not `RawValue`: kube-core's `WatchEvent` buffers its object
        // (serde's internally tagged enum), from which a `RawValue` cannot be read, and every
        // watch event failed that way.
        let mut value = Value::deserialize(d)?;
        // Managed fields are the bulk of most objects and never read here.
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        Ok(match decode::from_stored::<K>(&value) {
            Ok(k) => Decoded::Read(Arc::new(k)),
            Err(error) => {
                let meta = value.get("metadata").and_then(|m| decode::from_value(m).ok()).unwrap_or_default();
                Decoded::Unreadable(Arc::new(Unreadable { meta, error }))
            }
        })
    }
}

impl<K: Resource<DynamicType = ()> + Clone> Resource for Decoded<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Read(k) => k.meta(),
            Decoded::Unreadable(u) => &u.meta,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Read(k) => Arc::make_mut(k).meta_mut(),
            Decoded::Unreadable(u) => &mut Arc::make_mut(u).meta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MigPolicy;
    use serde_json::json;

    #[test]
    fn one_unreadable_item_leaves_the_rest_of_a_list_readable() {
        let list = json!([
            {"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "good"}, "spec": {}},
            {"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "bad", "managedFields": [{}]},
             "spec": {"solver": {"timeLimitMs": 4294967296u64}}},
        ]);
        let items: Vec<Decoded<MigPolicy>> = serde_json::from_value(list).unwrap();
        assert_eq!(items[0].read().unwrap().meta().name.as_deref(), Some("good"));
        let bad = items[1].unreadable().unwrap();
        assert_eq!(bad.meta.name.as_deref(), Some("bad"));
        assert!(bad.meta.managed_fields.is_none());
        assert_eq!(bad.error.field, "spec.solver.timeLimitMs");
        assert_eq!(bad.error.value.as_deref(), Some("4294967296"));
    }
}
