//! The uniqueness rules of a CRD schema's `x-kubernetes-list-type`: the items of a `set` list
//! are unique, and so are the key values (`x-kubernetes-list-map-keys`) of a `map` list's items.
//! kube-apiserver checks them after the schema, on create always and on update only when the old
//! object kept them (kubernetes/kubernetes,
//! `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype/validation.go`,
//! called from `pkg/registry/customresource/strategy.go` and `status_strategy.go` there). Only the
//! second appearance of a repeated value is reported, and values print as Go's `field.Error`
//! prints them (`staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`).

use std::collections::HashMap;

use serde_json::{Map, Value};

/// `(field, message)` for each violation, in the shape `schema::SchemaApplied` reports.
type Violations = Vec<(String, String)>;

/// The violations a write is refused for: all of them on create (`old` is `None`); on update
/// only when the object it replaces had none, as kube-apiserver ratchets this check.
pub(crate) fn on_write(obj: &Value, old: Option<&Value>, schema: &Value) -> Violations {
    if old.is_some_and(|o| !violations(o, schema).is_empty()) {
        return Vec::new();
    }
    violations(obj, schema)
}

/// The list-type violations of a whole object; `schema` is its `openAPIV3Schema`.
pub(crate) fn violations(obj: &Value, schema: &Value) -> Violations {
    let mut out = Vec::new();
    if let Value::Object(map) = obj {
        check_object(map, schema, "", &mut out);
    }
    out
}

fn check(v: &Value, schema: &Value, path: &str, out: &mut Violations) {
    match v {
        Value::Object(map) => check_object(map, schema, path, out),
        Value::Array(items) => check_array(items, schema, path, out),
        _ => {}
    }
}

fn check_object(map: &Map<String, Value>, schema: &Value, path: &str, out: &mut Violations) {
    let additional = &schema["additionalProperties"];
    for (k, v) in map {
        if let Some(s) = schema["properties"].get(k.as_str()) {
            let field = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            check(v, s, &field, out);
        } else if additional.is_object() {
            // A map's entries are addressed as `path[key]`, as field.Path.Key writes them.
            check(v, additional, &format!("{path}[{k}]"), out);
        }
    }
}

fn check_array(items: &[Value], schema: &Value, path: &str, out: &mut Violations) {
    match schema["x-kubernetes-list-type"].as_str() {
        Some("set") => {
            let ids: Vec<String> = items.iter().map(|x| identity(Some(x))).collect();
            for i in repeated(&ids) {
                out.push((format!("{path}[{i}]"), format!("Duplicate value: {}", go_value(&items[i]))));
            }
        }
        Some("map") => check_map_keys(items, schema, path, out),
        _ => {}
    }
    if schema["items"].is_object() {
        for (i, x) in items.iter().enumerate() {
            check(x, &schema["items"], &format!("{path}[{i}]"), out);
        }
    }
}

fn check_map_keys(items: &[Value], schema: &Value, path: &str, out: &mut Violations) {
    if let Some((i, x)) = items.iter().enumerate().find(|(_, x)| !x.is_object() && !x.is_null()) {
        let message =
            format!("Invalid value: {}: must be an object for an array of list-type map", go_value(x));
        out.push((format!("{path}[{i}]"), message));
        return;
    }
    let fields: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let keys: Vec<Value> = items.iter().map(|x| present_keys(x, &fields)).collect();
    let ids: Vec<String> = match fields.as_slice() {
        // One key field: its values are compared as they are, a missing one as "unspecified".
        [field] => items.iter().map(|x| identity(x.get(*field))).collect(),
        // Several: the objects of the key fields present are compared.
        _ => keys.iter().map(|k| identity(Some(k))).collect(),
    };
    for i in repeated(&ids) {
        out.push((format!("{path}[{i}]"), format!("Duplicate value: {}", go_value(&keys[i]))));
    }
}

/// The key fields an item has, as an object (empty for a null item).
fn present_keys(item: &Value, fields: &[&str]) -> Value {
    let present = fields.iter().filter_map(|f| item.get(*f).map(|v| (f.to_string(), v.clone())));
    Value::Object(present.collect())
}

/// The index of the second appearance of each value that appears more than once.
fn repeated(ids: &[String]) -> Vec<usize> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let times = seen.entry(id.as_str()).or_insert(0);
        *times += 1;
        if *times == 2 {
            out.push(i);
        }
    }
    out
}

/// What makes two values the same: scalars compare as decoded (an integer is not a float);
/// objects and arrays by their JSON encoding (sorted keys, `1.0` written as `1`).
fn identity(v: Option<&Value>) -> String {
    match v {
        None => "unspecified".into(),
        Some(v @ (Value::Object(_) | Value::Array(_))) => format!("compound {}", canonical(v)),
        Some(v) => format!("scalar {v}"),
    }
}

fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<String> =
                map.iter().map(|(k, x)| format!("{}:{}", Value::from(k.as_str()), canonical(x))).collect();
            entries.sort();
            format!("{{{}}}", entries.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        Value::Number(n) if n.is_f64() => format!("{}", n.as_f64().unwrap_or_default()),
        other => other.to_string(),
    }
}

/// A bad value as `field.Error` prints it: `%q` for strings, `%v` for numbers and booleans,
/// `null`, and JSON for objects and arrays, as apimachinery 1.37 does (kubernetes,
/// `staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`, `ErrorBody`; it
/// printed Go syntax, `map[string]interface {}{...}`, up to 1.33).
fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Object(_) | Value::Array(_) => go_json(v),
        other => go_scalar(other),
    }
}

/// `json.Marshal` of a decoded JSON value: keys sorted, no spaces, floats without a fraction
/// as integers, `<`, `>` and `&` escaped.
fn go_json(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            let shown: Vec<String> =
                entries.iter().map(|(k, x)| format!("{}:{}", json_string(k), go_json(x))).collect();
            format!("{{{}}}", shown.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::String(s) => json_string(s),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            Some(f) if n.is_f64() && f != 0.0 && f.abs() < 1e-6 => format!("{f:e}").replace("e-", "e-0"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn json_string(s: &str) -> String {
    Value::String(s.to_string())
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

fn go_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(n) if n.is_f64() => go_float(n.as_f64().unwrap_or_default()),
        other => other.to_string(),
    }
}

/// `%v` of a float64: the shortest digits, in exponent form below 1e-4 and from 1e6 on
/// (`1e+06`, `1.5e-05`).
fn go_float(f: f64) -> String {
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// Go's `strconv.Quote`: printable characters kept, the others escaped.
fn go_quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c < ' ' || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() || (c.is_whitespace() && c != ' ') => out.push_str(&go_unicode_escape(c)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn go_unicode_escape(c: char) -> String {
    if (c as u32) < 0x10000 {
        format!("\\u{:04x}", c as u32)
    } else {
        format!("\\U{:08x}", c as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "profiles": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "gpus": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["index"],
                "items": {"type": "object", "properties": {
                    "tags": {"type": "array", "x-kubernetes-list-type": "set"}}}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol"], "items": {"type": "object"}},
            "plain": {"type": "array", "items": {"type": "string"}}}}}})
    }

    fn check_spec(spec: Value) -> Violations {
        violations(&json!({"spec": spec}), &schema())
    }

    #[test]
    fn a_set_reports_the_second_appearance_of_each_repeated_item() {
        let found = check_spec(json!({"profiles": ["1g.10gb", "2g.20gb", "1g.10gb", "1g.10gb", "2g.20gb"]}));
        assert_eq!(
            found,
            vec![
                ("spec.profiles[2]".to_string(), "Duplicate value: \"1g.10gb\"".to_string()),
                ("spec.profiles[4]".to_string(), "Duplicate value: \"2g.20gb\"".to_string()),
            ]
        );
        assert!(check_spec(json!({"profiles": ["1g.10gb", "2g.20gb"], "plain": ["a", "a"]})).is_empty());
    }

    #[test]
    fn a_map_list_reports_a_repeated_key_nested_sets_too() {
        let found =
            check_spec(json!({"gpus": [{"index": 0, "tags": [1, 1.0, 1]}, {"index": 1}, {"index": 0}]}));
        assert_eq!(
            found,
            vec![
                ("spec.gpus[2]".to_string(), "Duplicate value: {\"index\":0}".to_string()),
                ("spec.gpus[0].tags[2]".to_string(), "Duplicate value: 1".to_string()),
            ]
        );
    }

    #[test]
    fn several_key_fields_compare_together_and_missing_keys_match() {
        let ports = json!([{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"},
            {"protocol": "UDP", "port": 80.0, "name": "x"}, {}, null]);
        assert_eq!(
            check_spec(json!({"ports": ports})),
            vec![
                (
                    "spec.ports[2]".to_string(),
                    "Duplicate value: {\"port\":80,\"protocol\":\"UDP\"}".to_string()
                ),
                ("spec.ports[4]".to_string(), "Duplicate value: {}".to_string()),
            ]
        );
        let not_objects = check_spec(json!({"gpus": [{"index": 0}, "zero"]}));
        assert_eq!(
            not_objects,
            vec![(
                "spec.gpus[1]".to_string(),
                "Invalid value: \"zero\": must be an object for an array of list-type map".to_string()
            )]
        );
    }

    #[test]
    fn an_update_of_an_object_that_broke_the_rules_already_is_not_held_to_them() {
        let twice = json!({"spec": {"profiles": ["1g.10gb", "1g.10gb"]}});
        let clean = json!({"spec": {"profiles": ["1g.10gb"]}});
        assert_eq!(on_write(&twice, None, &schema()).len(), 1);
        assert_eq!(on_write(&twice, Some(&clean), &schema()).len(), 1);
        assert!(on_write(&twice, Some(&twice), &schema()).is_empty());
    }

    #[test]
    fn values_print_as_go_prints_them() {
        assert_eq!(go_value(&json!("a\"b\n\u{1b}é")), "\"a\\\"b\\n\\x1bé\"");
        assert_eq!(go_value(&json!(1_000_000.0)), "1e+06");
        assert_eq!(go_value(&json!(0.00001)), "1e-05");
        assert_eq!(go_value(&json!(123456.5)), "123456.5");
        assert_eq!(
            go_value(&json!([null, true, {"b": 1, "a": [2.5, 80.0]}, "<&>"])),
            "[null,true,{\"a\":[2.5,80],\"b\":1},\"\\u003c\\u0026\\u003e\"]"
        );
    }
}
