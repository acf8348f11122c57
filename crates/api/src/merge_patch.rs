//! JSON merge patches (RFC 7386) for the objects Geometer writes: the agent's MigNode status and
//! the controller's plan and node updates send only what changed.

use serde_json::{Map, Value};

/// The merge patch that turns `before` into `after`: unchanged fields are left out, changed
/// objects are diffed field by field, lists and scalars are replaced whole, and fields `after`
/// lacks are set to `null` so that the server removes them (a plain serialisation of `after`
/// would leave them in place).
pub fn diff(before: &Value, after: &Value) -> Value {
    match (before, after) {
        (Value::Object(before), Value::Object(after)) => {
            let mut patch = Map::new();
            for (key, value) in after {
                match before.get(key) {
                    Some(old) if old == value => {}
                    Some(old) => {
                        patch.insert(key.clone(), diff(old, value));
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in before.keys().filter(|k| !after.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => after.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::diff;

    #[test]
    fn removed_fields_become_null_and_unchanged_ones_are_left_out() {
        let old = json!({"phase": "Draining", "step": {"action": "Evict", "pod": "ml/a"}, "gpuCount": 2});
        let new = json!({"phase": "Ready", "gpuCount": 2});
        assert_eq!(diff(&old, &new), json!({"phase": "Ready", "step": null}));
        let new = json!({"phase": "Draining", "step": {"action": "Evict"}, "gpuCount": 2});
        assert_eq!(diff(&old, &new), json!({"step": {"pod": null}}));
    }

    #[test]
    fn nested_objects_carry_only_their_changed_fields() {
        assert_eq!(
            diff(&json!({"a": {"x": 1, "y": 2}}), &json!({"a": {"x": 1, "y": 3}})),
            json!({"a": {"y": 3}})
        );
    }

    #[test]
    fn lists_are_replaced_whole() {
        let old = json!({"conditions": [{"type": "Ready"}, {"type": "Failed"}]});
        let new = json!({"conditions": [{"type": "Ready"}]});
        assert_eq!(diff(&old, &new), json!({"conditions": [{"type": "Ready"}]}));
    }

    #[test]
    fn applying_the_patch_gives_the_new_object() {
        let old = json!({"phase": "Proposed", "message": "waiting", "nodes": [{"node": "a"}], "summary": {"gpus": 1}});
        let new = json!({"phase": "Applying", "nodes": [{"node": "b"}], "summary": {"gpus": 1, "pods": 2}});
        let mut patched = old.clone();
        json_patch::merge(&mut patched, &diff(&old, &new));
        assert_eq!(patched, new);
    }
}
