//! Bounds added to every field of the generated CRD schemas that the Rust types leave open,
//! so that the API server refuses what the controller and the agent could not read or should
//! not have to hold:
//!
//! - an integer gets the range of its Rust type (`format: uint32` -> `0..=4294967295`) where
//!   no tighter one is given: a MigPolicy with `timeLimitMs: 4294967296` would otherwise be
//!   stored and be unreadable to every Geometer;
//! - a string gets a `maxLength` (free text [`MAX_MESSAGE_BYTES`], anything else
//!   [`MAX_NAME_BYTES`]) unless it is an enum, a timestamp or already bounded;
//! - a list gets a `maxItems` and a map a `maxProperties` of [`MAX_LIST_ITEMS`] unless bounded.
//!
//! The Kubernetes rules these follow are those of structural schemas (kubernetes,
//! `staging/src/k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/types_jsonschema.go`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Map, Value};

use crate::limits::{MAX_MESSAGE_BYTES, MAX_NAME_BYTES};

/// Most items of a list (or entries of a map) that has no bound of its own.
pub const MAX_LIST_ITEMS: usize = 1024;

/// Field names that hold free text for people.
const FREE_TEXT: &[&str] =
    &["message", "reason", "why", "note", "description", "detail", "error", "rebuild", "catalog", "nvml"];

/// `crd` with every open field bounded.
pub fn bounded(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(&crd).expect("a CRD serializes");
    for version in value.pointer_mut("/spec/versions").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
            bound(schema, "");
        }
    }
    serde_json::from_value(value).expect("bounds keep the CRD well-formed")
}

fn bound(schema: &mut Value, name: &str) {
    let Some(map) = schema.as_object_mut() else { return };
    match map.get("type").and_then(Value::as_str) {
        Some("integer") => bound_integer(map),
        Some("string") => bound_string(map, name),
        Some("array") => {
            map.entry("maxItems").or_insert(json!(MAX_LIST_ITEMS));
        }
        Some("object") if map.contains_key("additionalProperties") => {
            map.entry("maxProperties").or_insert(json!(MAX_LIST_ITEMS));
        }
        _ => {}
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for (key, child) in props.iter_mut() {
            bound(child, key);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get_mut(key) {
            bound(child, name);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = map.get_mut(key) {
            list.iter_mut().for_each(|child| bound(child, name));
        }
    }
}

/// Largest integer a float64 holds exactly (2^53 - 1). kube-apiserver reads a schema's
/// `maximum` as a float64 and then as an int64: `9223372036854775807` comes back as
/// `-9223372036854775808` and the CRD is refused. 64-bit fields are bounded by this instead.
const MAX_EXACT_INTEGER: i64 = (1 << 53) - 1;

fn bound_integer(map: &mut Map<String, Value>) {
    let (min, max): (i64, i64) = match map.get("format").and_then(Value::as_str) {
        Some("uint8") => (0, u8::MAX.into()),
        Some("uint16") => (0, u16::MAX.into()),
        Some("uint32") => (0, u32::MAX.into()),
        Some("uint64") | Some("uint") => (0, MAX_EXACT_INTEGER),
        Some("int8") => (i8::MIN.into(), i8::MAX.into()),
        Some("int16") => (i16::MIN.into(), i16::MAX.into()),
        Some("int32") => (i32::MIN.into(), i32::MAX.into()),
        _ => (-MAX_EXACT_INTEGER, MAX_EXACT_INTEGER),
    };
    let tighter_min = map.get("minimum").and_then(Value::as_f64).map_or(min, |m| (m as i64).max(min));
    let tighter_max = map.get("maximum").and_then(Value::as_f64).map_or(max, |m| (m as i64).min(max));
    map.insert("minimum".into(), json!(tighter_min));
    map.insert("maximum".into(), json!(tighter_max));
}

fn bound_string(map: &mut Map<String, Value>, name: &str) {
    if map.contains_key("maxLength") || map.contains_key("enum") {
        return;
    }
    let max = match map.get("format").and_then(Value::as_str) {
        Some("date-time") => 64,
        _ if FREE_TEXT.iter().any(|t| name.eq_ignore_ascii_case(t) || name.ends_with(&capitalised(t))) => {
            MAX_MESSAGE_BYTES
        }
        _ => MAX_NAME_BYTES,
    };
    map.insert("maxLength".into(), json!(max));
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_fields_get_the_bounds_of_their_types() {
        let mut schema = json!({"type": "object", "properties": {
            "count": {"type": "integer", "format": "uint32", "minimum": 0.0},
            "atLeastOne": {"type": "integer", "format": "uint32", "minimum": 1.0},
            "small": {"type": "integer", "format": "uint8", "maximum": 12},
            "name": {"type": "string"},
            "message": {"type": "string"},
            "lastReason": {"type": "string"},
            "mode": {"type": "string", "enum": ["A", "B"]},
            "at": {"type": "string", "format": "date-time"},
            "list": {"type": "array", "items": {"type": "string"}},
            "map": {"type": "object", "additionalProperties": {"type": "integer", "format": "uint32"}},
        }});
        bound(&mut schema, "");
        let p = &schema["properties"];
        assert_eq!(
            (p["count"]["minimum"].clone(), p["count"]["maximum"].clone()),
            (json!(0), json!(4294967295u32))
        );
        assert_eq!(p["atLeastOne"]["minimum"], json!(1));
        assert_eq!(p["small"]["maximum"], json!(12));
        assert_eq!(p["name"]["maxLength"], json!(MAX_NAME_BYTES));
        assert_eq!(p["message"]["maxLength"], json!(MAX_MESSAGE_BYTES));
        assert_eq!(p["lastReason"]["maxLength"], json!(MAX_MESSAGE_BYTES));
        assert!(p["mode"].get("maxLength").is_none());
        assert_eq!(p["at"]["maxLength"], json!(64));
        assert_eq!(p["list"]["maxItems"], json!(MAX_LIST_ITEMS));
        assert_eq!(p["list"]["items"]["maxLength"], json!(MAX_NAME_BYTES));
        assert_eq!(p["map"]["maxProperties"], json!(MAX_LIST_ITEMS));
        assert_eq!(p["map"]["additionalProperties"]["maximum"], json!(4294967295u32));
    }
}
