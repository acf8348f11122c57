//! What the API server does to a custom resource with its CRD's structural schema: drop nulls
//! that are not nullable, fill defaults, prune unknown fields, and validate types, enums,
//! bounds, patterns, `date-time` formats and required fields. CEL rules
//! (`x-kubernetes-validations`) are not checked; the uniqueness rules of `x-kubernetes-list-type`
//! are, after this, by `list_type`.

use serde_json::{Map, Value};

#[derive(Debug, Default)]
pub(crate) struct SchemaApplied {
    /// `(field, message)` for each violation.
    pub errors: Vec<(String, String)>,
    /// Fields that were pruned because the schema does not know them.
    pub pruned: Vec<String>,
}

/// Applies `schema` (an `openAPIV3Schema`) to a whole object in place.
pub(crate) fn apply(obj: &mut Value, schema: &Value) -> SchemaApplied {
    let mut out = SchemaApplied::default();
    let Some(map) = obj.as_object_mut() else {
        out.errors.push((String::new(), "the object must be a JSON object".into()));
        return out;
    };
    let props = &schema["properties"];
    for (key, value) in map.iter_mut() {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(s) = props.get(key.as_str()) {
            walk(value, s, key, &mut out);
        }
    }
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    if !preserve {
        let unknown: Vec<String> = map
            .keys()
            .filter(|k| {
                !matches!(k.as_str(), "apiVersion" | "kind" | "metadata") && props.get(k.as_str()).is_none()
            })
            .cloned()
            .collect();
        for k in unknown {
            map.remove(&k);
            out.pruned.push(k);
        }
    }
    fill_defaults(map, schema);
    for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        if !map.contains_key(r) {
            out.errors.push((r.to_string(), "Required value".into()));
        }
    }
    out
}

fn fill_defaults(map: &mut Map<String, Value>, schema: &Value) {
    for (name, s) in schema["properties"].as_object().into_iter().flatten() {
        let missing = map.get(name).is_none_or(Value::is_null);
        if missing && !s["default"].is_null() {
            let mut d = s["default"].clone();
            // Defaults are themselves defaulted (nested defaults inside a defaulted object).
            walk(&mut d, s, "", &mut SchemaApplied::default());
            map.insert(name.clone(), d);
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(v: &mut Value, schema: &Value, path: &str, out: &mut SchemaApplied) {
    if v.is_null() {
        if schema["nullable"] != true {
            out.errors.push((path.to_string(), "Invalid value: null: must not be null".into()));
        }
        return;
    }
    let want = schema["type"].as_str().unwrap_or("");
    let have = type_name(v);
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    let type_ok = match (want, have) {
        _ if int_or_string => matches!(have, "integer" | "string"),
        ("", _) => true,
        ("number", "integer") => true,
        (w, h) => w == h,
    };
    if !type_ok {
        let expected = if int_or_string { "integer or string" } else { want };
        out.errors.push((
            path.to_string(),
            format!("Invalid value: \"{have}\": {path} in body must be of type {expected}: \"{have}\""),
        ));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(v) {
            let list: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
            out.errors.push((
                path.to_string(),
                format!("Unsupported value: {v}: supported values: {}", list.join(", ")),
            ));
        }
    }
    check_bounds(v, schema, path, out);
    match v {
        Value::Object(map) => {
            // Nulls in non-nullable fields are dropped before defaulting, as Kubernetes does.
            let props = &schema["properties"];
            let nulls: Vec<String> = map
                .iter()
                .filter(|(k, x)| x.is_null() && props.get(k.as_str()).is_none_or(|s| s["nullable"] != true))
                .map(|(k, _)| k.clone())
                .collect();
            for k in nulls {
                map.remove(&k);
            }
            let additional = &schema["additionalProperties"];
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
            let mut unknown = Vec::new();
            for (k, x) in map.iter_mut() {
                if let Some(s) = props.get(k.as_str()) {
                    walk(x, s, &child(path, k), out);
                } else if additional.is_object() {
                    walk(x, additional, &child(path, k), out);
                } else if !preserve && additional != &Value::Bool(true) {
                    unknown.push(k.clone());
                }
            }
            for k in unknown {
                map.remove(&k);
                out.pruned.push(child(path, &k));
            }
            fill_defaults(map, schema);
            for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !map.contains_key(r) {
                    out.errors.push((child(path, r), "Required value".into()));
                }
            }
        }
        Value::Array(items) => {
            let item_schema = &schema["items"];
            for (i, x) in items.iter_mut().enumerate() {
                walk(x, item_schema, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn check_bounds(v: &Value, schema: &Value, path: &str, out: &mut SchemaApplied) {
    let mut fail = |msg: String| out.errors.push((path.to_string(), msg));
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema["minimum"].as_f64() {
            let exclusive = schema["exclusiveMinimum"] == true;
            if n < min || (exclusive && n == min) {
                fail(format!("Invalid value: {v}: {path} in body should be greater than or equal to {min}"));
            }
        }
        if let Some(max) = schema["maximum"].as_f64() {
            let exclusive = schema["exclusiveMaximum"] == true;
            if n > max || (exclusive && n == max) {
                fail(format!("Invalid value: {v}: {path} in body should be less than or equal to {max}"));
            }
        }
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|m| len < m) {
            fail(format!(
                "Invalid value: {v}: {path} in body should be at least {} chars long",
                schema["minLength"]
            ));
        }
        if schema["maxLength"].as_u64().is_some_and(|m| len > m) {
            fail(format!("Too long: {path} may not be more than {} bytes", schema["maxLength"]));
        }
        if let Some(pattern) = schema["pattern"].as_str() {
            // kube-apiserver reads patterns as RE2 (Go's regexp), which Rust's regex follows.
            if regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(s)) {
                fail(format!("Invalid value: {v}: {path} in body should match '{pattern}'"));
            }
        }
        // kube-apiserver checks string formats it knows (go-openapi/strfmt); RFC 3339 time here.
        if schema["format"] == "date-time" && s.parse::<jiff::Timestamp>().is_err() {
            fail(format!("Invalid value: {v}: {path} in body must be of type date-time: {v}"));
        }
    }
    if let Some(a) = v.as_array() {
        let len = a.len() as u64;
        if schema["minItems"].as_u64().is_some_and(|m| len < m) {
            fail(format!(
                "Invalid value: {len}: {path} in body should have at least {} items",
                schema["minItems"]
            ));
        }
        if schema["maxItems"].as_u64().is_some_and(|m| len > m) {
            fail(format!("Too many: {len}: must have at most {} items", schema["maxItems"]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["mode"], "properties": {
                "mode": {"type": "string", "enum": ["DryRun", "Auto"]},
                "headroom": {"type": "integer", "default": 1, "minimum": 0},
                "window": {"x-kubernetes-int-or-string": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "note": {"type": "string", "nullable": true}}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}})
    }

    #[test]
    fn defaults_prunes_and_keeps_known() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
            "spec": {"mode": "Auto", "bogus": 1, "window": "5m", "labels": {"a": "b"}, "extra": {"any": [1]}, "note": null},
            "junk": true});
        let out = apply(&mut obj, &schema());
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let mut pruned = out.pruned.clone();
        pruned.sort();
        assert_eq!(pruned, vec!["junk".to_string(), "spec.bogus".to_string()]);
        assert_eq!(
            obj["spec"],
            json!({"mode": "Auto", "headroom": 1, "window": "5m", "labels": {"a": "b"}, "extra": {"any": [1]}, "note": null})
        );
    }

    #[test]
    fn reports_each_violation_by_field() {
        let mut obj =
            json!({"spec": {"mode": "Sometimes", "headroom": -1, "window": 1.5, "labels": {"a": 1}}});
        let mut fields: Vec<String> = apply(&mut obj, &schema()).errors.into_iter().map(|(f, _)| f).collect();
        fields.sort();
        assert_eq!(fields, vec!["spec.headroom", "spec.labels.a", "spec.mode", "spec.window"]);
        let mut missing = json!({"spec": {}});
        assert_eq!(
            apply(&mut missing, &schema()).errors,
            vec![("spec.mode".to_string(), "Required value".to_string())]
        );
    }
}
