//! Between the version a client speaks and the form objects are stored in: CRDs store their
//! storage version (schemas are assumed compatible, conversion strategy `None`), and
//! events.k8s.io events are stored as core events.

use std::sync::Arc;

use serde_json::Value;

use super::events;
use super::resource::{Builtin, ResourceType};

pub(crate) fn to_storage(rt: &ResourceType, mut obj: Value) -> Value {
    if rt.is(Builtin::EventV1) {
        obj = events::to_core(&obj);
        obj["kind"] = Value::String("Event".into());
        return obj;
    }
    obj["apiVersion"] = Value::String(rt.api_version(rt.preferred_version()));
    obj["kind"] = Value::String(rt.kind.clone());
    obj
}

pub(crate) fn to_served(rt: &ResourceType, version: &str, obj: &Arc<Value>) -> Arc<Value> {
    if rt.is(Builtin::EventV1) {
        return Arc::new(events::to_events_v1(obj));
    }
    let api_version = rt.api_version(version);
    if obj["apiVersion"].as_str() == Some(api_version.as_str()) {
        return obj.clone();
    }
    let mut copy = (**obj).clone();
    copy["apiVersion"] = Value::String(api_version);
    Arc::new(copy)
}
