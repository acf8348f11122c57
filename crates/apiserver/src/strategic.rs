//! Strategic merge patch for built-in types: maps merge, keyed lists merge item by item,
//! set lists union, other lists are replaced. Directives kubectl sends are honoured:
//! `$patch: replace|delete|merge`, `$retainKeys`, `$deleteFromPrimitiveList/<f>` and
//! `$setElementOrder/<f>`.

use serde_json::{Map, Value};

use super::list_semantics::{ListKind, ListSemantics};

const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";
const SET_ORDER: &str = "$setElementOrder/";

pub(crate) fn apply(original: &Value, patch: &Value, lists: ListSemantics<'_>) -> Result<Value, String> {
    let mut out = original.clone();
    match (out.as_object_mut(), patch.as_object()) {
        (Some(o), Some(p)) => merge_map(o, p, &mut Vec::new(), lists)?,
        _ => return Err("a strategic merge patch must be a JSON object".into()),
    }
    Ok(out)
}

/// Removes directives from a value that is inserted as is.
fn clean(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, x)| (k.clone(), clean(x))).collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(clean).collect()),
        other => other.clone(),
    }
}

fn merge_map(
    orig: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
    lists: ListSemantics<'_>,
) -> Result<(), String> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *orig = clean(&Value::Object(patch.clone())).as_object().cloned().unwrap_or_default();
            return Ok(());
        }
        Some("delete") => {
            orig.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("invalid $patch directive \"{other}\" at {}", dotted(path))),
    }
    if let Some(retain) = patch.get("$retainKeys") {
        let keep: Vec<&str> = retain
            .as_array()
            .ok_or_else(|| format!("$retainKeys at {} must be a list of field names", dotted(path)))?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        orig.retain(|k, _| keep.contains(&k.as_str()));
    }
    let mut orders = Vec::new();
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_PRIMITIVE) {
            if let (Some(Value::Array(have)), Some(remove)) = (orig.get_mut(field), value.as_array()) {
                have.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if let Some(field) = key.strip_prefix(SET_ORDER) {
            orders.push((field.to_string(), value));
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        path.push(key.clone());
        match value {
            Value::Null => {
                orig.remove(key);
            }
            Value::Object(pm) => {
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    orig.remove(key);
                } else if let Some(Value::Object(om)) = orig.get_mut(key) {
                    merge_map(om, pm, path, lists)?;
                } else {
                    let mut fresh = Map::new();
                    merge_map(&mut fresh, pm, path, lists)?;
                    orig.insert(key.clone(), Value::Object(fresh));
                }
            }
            Value::Array(pa) => {
                let merged = match (orig.get(key), lists.kind(path)) {
                    (Some(Value::Array(oa)), ListKind::Map(keys)) => {
                        merge_keyed(oa, pa, &keys[0], path, lists)?
                    }
                    (Some(Value::Array(oa)), ListKind::Set) => {
                        let mut out = oa.clone();
                        for v in pa {
                            if !out.contains(v) {
                                out.push(v.clone());
                            }
                        }
                        out
                    }
                    (_, ListKind::Map(keys)) => merge_keyed(&[], pa, &keys[0], path, lists)?,
                    _ => pa.iter().map(clean).collect(),
                };
                orig.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                orig.insert(key.clone(), scalar.clone());
            }
        }
        path.pop();
    }
    for (field, order) in orders {
        if let (Some(Value::Array(items)), Some(order)) = (orig.get_mut(&field), order.as_array()) {
            reorder(items, order);
        }
    }
    Ok(())
}

fn merge_keyed(
    orig: &[Value],
    patch: &[Value],
    key: &str,
    path: &mut Vec<String>,
    lists: ListSemantics<'_>,
) -> Result<Vec<Value>, String> {
    if patch.iter().any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace")) {
        return Ok(patch.iter().filter(|p| p.get("$patch").is_none()).map(clean).collect());
    }
    let mut out = orig.to_vec();
    for item in patch {
        let Some(pm) = item.as_object() else {
            out.push(item.clone());
            continue;
        };
        let Some(id) = pm.get(key) else {
            return Err(format!("a list item at {} is missing its merge key \"{key}\"", dotted(path)));
        };
        let pos = out.iter().position(|o| o.get(key) == Some(id));
        match (pm.get("$patch").and_then(Value::as_str), pos) {
            (Some("delete"), Some(i)) => {
                out.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => {
                if let Some(om) = out[i].as_object_mut() {
                    merge_map(om, pm, path, lists)?;
                }
            }
            (_, None) => {
                let mut fresh = Map::new();
                merge_map(&mut fresh, pm, path, lists)?;
                out.push(Value::Object(fresh));
            }
        }
    }
    Ok(out)
}

/// Orders items as `$setElementOrder` lists them; items it does not name keep their place after.
fn reorder(items: &mut [Value], order: &[Value]) {
    let rank = |item: &Value| {
        order.iter().position(|o| match (o.as_object(), item.as_object()) {
            (Some(om), Some(im)) => om.iter().all(|(k, v)| im.get(k) == Some(v)),
            _ => o == item,
        })
    };
    items.sort_by_key(|i| rank(i).unwrap_or(usize::MAX));
}

fn dotted(path: &[String]) -> String {
    if path.is_empty() {
        "the top level".to_string()
    } else {
        path.join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::builtin_types;
    use serde_json::json;

    fn pod_patch(orig: Value, patch: Value) -> Value {
        let types = builtin_types();
        let pod = types.iter().find(|t| t.plural == "pods").unwrap();
        apply(&orig, &patch, ListSemantics::new(pod, "v1")).unwrap()
    }

    #[test]
    fn containers_merge_by_name_and_conditions_by_type() {
        let orig = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let out = pod_patch(
            orig,
            json!({"spec": {"containers": [{"name": "b", "image": "y:2"}]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:2"}])
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
        );
    }

    #[test]
    fn directives() {
        let orig = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "tolerations": [{"key": "k"}]}});
        let out = pod_patch(
            orig,
            json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["c"], "labels": {"x": null}},
            "spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
                     "containers": [{"name": "a", "$patch": "delete"}, {"name": "c"}],
                     "tolerations": [{"key": "z"}]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "c"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "b"}, {"name": "c"}]));
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "z"}]),
            "lists without a strategy are replaced"
        );
        let replaced = pod_patch(
            json!({"spec": {"nodeSelector": {"a": "1"}}}),
            json!({"spec": {"nodeSelector": {"$patch": "replace", "b": "2"}}}),
        );
        assert_eq!(replaced["spec"]["nodeSelector"], json!({"b": "2"}));
    }
}
