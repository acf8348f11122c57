//! One object from JSON into its Rust type, with an error that names the field, quotes the
//! value (cut to a few dozen characters) and says in words what was expected: the one way
//! the controller, the agent and the CLI read an object they did not write.

use serde::de::DeserializeOwned;
use serde_json::Value;

use geometer_solver::words::{quote, serde_in_words};

/// Why an object did not decode: where, what was there, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`{}: {problem}", value.as_ref().map(|v| format!(" = {v}")).unwrap_or_default())]
pub struct DecodeError {
    /// The field's path, e.g. `spec.solver.timeLimitMs` or `status.gpus[0].instances[2].start`.
    pub field: String,
    /// The value found there, quoted and cut; `None` when the field is missing.
    pub value: Option<String>,
    pub problem: String,
}

/// `value` as a `T`, or the field that stopped it.
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        let found = pointer(value, e.path()).map(|v| match v {
            Value::String(s) => quote(&format!("{s:?}")),
            other => quote(&other.to_string()),
        });
        let field = if field == "." { "(top level)".to_string() } else { field };
        DecodeError { field, value: found, problem: serde_in_words(&e.inner().to_string()) }
    })
}

/// How a kind reads an object as stored, which an older Geometer may have written without a
/// field the current one requires: what can be derived from the rest is filled in (a MigNode's
/// instance size from its profile and GPU model), and only what cannot is named.
pub trait Stored: DeserializeOwned {
    /// Fills in the fields `value` lacks that can be derived; whether it filled any.
    fn fill_derived(_value: &mut Value) -> bool {
        false
    }
}

impl Stored for k8s_openapi::api::core::v1::Node {}
impl Stored for k8s_openapi::api::resource::v1::ResourceSlice {}
impl Stored for k8s_openapi::api::resource::v1::ResourceClaim {}
impl Stored for k8s_openapi::api::resource::v1::ResourceClaimTemplate {}
impl Stored for k8s_openapi::api::resource::v1::DeviceClass {}

/// [`from_value`] for an object as stored: one that does not decode is read again with the
/// fields [`Stored::fill_derived`] fills, and if it still does not, the field that stops it
/// then is named.
pub fn from_stored<T: Stored>(value: &Value) -> Result<T, DecodeError> {
    from_value(value).or_else(|error| {
        let mut filled = value.clone();
        if T::fill_derived(&mut filled) {
            from_value(&filled)
        } else {
            Err(error)
        }
    })
}

/// [`from_stored`] straight from JSON text: no value tree is built unless decoding fails (then
/// one is, to fill what can be derived and to quote what the field held).
pub fn from_json_str<T: Stored>(text: &str) -> Result<T, DecodeError> {
    // Most objects decode: do that without tracking the path, and only read an object again
    // to name the field when it does not.
    if let Ok(value) = serde_json::from_str(text) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    match serde_path_to_error::deserialize(&mut de) {
        Ok(value) => Ok(value),
        Err(_) => {
            let value: Value = serde_json::from_str(text).map_err(|e| DecodeError {
                field: "(top level)".into(),
                value: None,
                problem: serde_in_words(&e.to_string()),
            })?;
            from_stored(&value)
        }
    }
}

fn pointer<'v>(value: &'v Value, path: &serde_path_to_error::Path) -> Option<&'v Value> {
    use serde_path_to_error::Segment;
    let mut at = value;
    for segment in path.iter() {
        at = match segment {
            Segment::Seq { index } => at.get(*index)?,
            Segment::Map { key } => at.get(key)?,
            Segment::Enum { .. } | Segment::Unknown => return None,
        };
    }
    Some(at)
}

/// The fields of `value` (a whole object of a Geometer kind) that its CRD schema does not
/// know, as paths (`spec.disruption.evictionAlowed`): what kube-apiserver refuses under
/// `fieldValidation=Strict`, kubectl's default. Decoding alone would drop them without a word.
pub fn unknown_fields(kind: &str, value: &Value) -> Vec<String> {
    let Some((_, schema)) = schemas().iter().find(|(k, _)| k == kind) else { return Vec::new() };
    let mut out = Vec::new();
    for top in ["spec", "status"] {
        if let (Some(v), Some(s)) = (value.get(top), schema.pointer(&format!("/properties/{top}"))) {
            walk_unknown(v, s, top, &mut out);
        }
    }
    out
}

/// Each Geometer kind's `openAPIV3Schema`, generated once.
fn schemas() -> &'static [(String, Value)] {
    static SCHEMAS: std::sync::OnceLock<Vec<(String, Value)>> = std::sync::OnceLock::new();
    SCHEMAS.get_or_init(|| {
        crate::crds()
            .into_iter()
            .filter_map(|crd| {
                let schema = crd.spec.versions.first()?.schema.as_ref()?.open_api_v3_schema.as_ref()?;
                Some((crd.spec.names.kind.clone(), serde_json::to_value(schema).ok()?))
            })
            .collect()
    })
}

fn walk_unknown(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, child) in map {
                    match props.get(key) {
                        Some(s) => walk_unknown(child, s, &format!("{path}.{key}"), out),
                        None => out.push(format!("{path}.{key}")),
                    }
                }
            } else if let Some(items) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                for (key, child) in map {
                    walk_unknown(child, items, &format!("{path}.{key}"), out);
                }
            }
        }
        Value::Array(list) => {
            if let Some(items) = schema.get("items") {
                for (i, child) in list.iter().enumerate() {
                    walk_unknown(child, items, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        start: u8,
        names: Vec<String>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        items: Vec<Inner>,
    }

    #[test]
    fn an_out_of_range_number_is_named_by_its_path_and_value_in_words() {
        let value = json!({"items": [{"start": 1, "names": []}, {"start": 256, "names": []}]});
        let e = from_value::<Outer>(&value).unwrap_err();
        assert_eq!(e.field, "items[1].start");
        assert_eq!(e.value.as_deref(), Some("256"));
        assert_eq!(
            e.to_string(),
            "field `items[1].start` = 256: expected a whole number from 0 to 255, found integer 256"
        );
    }

    #[test]
    fn a_string_where_a_list_belongs_says_so() {
        let value = json!({"items": [{"start": 1, "names": "a"}]});
        let e = from_value::<Outer>(&value).unwrap_err();
        assert_eq!(e.to_string(), "field `items[0].names` = \"a\": expected a list, found string \"a\"");
    }

    #[test]
    fn a_huge_value_is_quoted_cut() {
        let value = json!({"items": [{"start": 1, "names": "x".repeat(1 << 20)}]});
        let e = from_value::<Outer>(&value).unwrap_err();
        assert!(e.to_string().len() < 400, "{}", e.to_string().len());
    }

    #[test]
    fn a_misspelt_policy_field_is_found_where_decoding_would_drop_it() {
        let policy = json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "p"},
            "spec": {"mode": "DryRun", "headroom": {"1g.10gb": 1}, "disruption": {"evictionAlowed": true},
                "nodeSelector": {"matchExpressions": [{"key": "k", "operator": "In", "valuez": ["a"]}]}}});
        assert_eq!(
            unknown_fields("MigPolicy", &policy),
            ["spec.disruption.evictionAlowed", "spec.nodeSelector.matchExpressions[0].valuez"]
        );
        assert!(from_value::<crate::MigPolicy>(&policy).is_ok(), "serde alone takes it");
    }

    #[test]
    fn a_missing_field_is_named() {
        let e = from_value::<Outer>(&json!({"items": [{"names": []}]})).unwrap_err();
        assert_eq!(e.field, "items[0]");
        assert_eq!(e.problem, "missing field `start`");
    }
}
