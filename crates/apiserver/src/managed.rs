//! `metadata.managedFields` and server-side apply.
//!
//! Approximations (documented in docs/apiserver.md): ownership is tracked per leaf field and keyed list
//! item; a manager is identified by its name alone (an `Apply` and an `Update` entry of the same
//! manager never conflict with each other); apply removes fields its manager stopped applying
//! only when no other manager owns them, and leaves emptied parent maps in place; apply conflicts
//! are raised only for leaf values that differ.

use serde_json::{json, Map, Value};

use super::fieldset::{self, FieldSet, Path, Scope, Step};
use super::list_semantics::{ListKind, ListSemantics};

#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: String,
    fields: FieldSet,
}

fn read_entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or("").to_string(),
            operation: e["operation"].as_str().unwrap_or("Update").to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or("").to_string(),
            time: e["time"].as_str().unwrap_or("").to_string(),
            subresource: e["subresource"].as_str().unwrap_or("").to_string(),
            fields: FieldSet::from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

fn write_entries(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": e.fields.to_fields_v1(),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if list.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
    } else {
        obj["metadata"]["managedFields"] = Value::Array(list);
    }
}

/// Who writes, in which part of the object, at which version and time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub subresource: &'a str,
    pub scope: Scope,
    pub now: &'a str,
}

fn entry_for<'e>(entries: &'e mut Vec<Entry>, w: &Writer<'_>, operation: &str) -> &'e mut Entry {
    let pos = entries
        .iter()
        .position(|e| e.manager == w.manager && e.operation == operation && e.subresource == w.subresource);
    let i = match pos {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: w.manager.to_string(),
                operation: operation.to_string(),
                api_version: String::new(),
                time: String::new(),
                subresource: w.subresource.to_string(),
                fields: FieldSet::default(),
            });
            entries.len() - 1
        }
    };
    let e = &mut entries[i];
    e.api_version = w.api_version.to_string();
    e.time = w.now.to_string();
    e
}

fn is_leaf(p: &Path) -> bool {
    matches!(p.last(), Some(Step::Field(_) | Step::Index(_)))
}

/// Records that `w` changed `old` into `new` with an ordinary write (create, update, patch):
/// the writer takes over every field whose value it changed.
pub(crate) fn record_update(old: Option<&Value>, new: &mut Value, w: &Writer<'_>, lists: ListSemantics<'_>) {
    let mut entries = old.map(read_entries).unwrap_or_default();
    let before = old.map(|o| FieldSet::of(o, w.scope, lists)).unwrap_or_default();
    let after = FieldSet::of(new, w.scope, lists);
    let changed: Vec<&Path> = after
        .0
        .iter()
        .filter(|p| {
            !before.contains(p)
                || (is_leaf(p) && fieldset::get(new, p) != old.and_then(|o| fieldset::get(o, p)))
        })
        .collect();
    let removed: Vec<&Path> = before.0.difference(&after.0).collect();
    for e in entries.iter_mut() {
        for p in &removed {
            e.fields.0.remove(*p);
        }
        if e.manager != w.manager {
            for p in &changed {
                e.fields.0.remove(*p);
            }
        }
    }
    if !changed.is_empty() {
        let mine = entry_for(&mut entries, w, "Update");
        mine.fields.0.extend(changed.into_iter().cloned());
    }
    write_entries(new, entries);
}

/// A field another manager owns with a different value than the apply sets.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Conflict {
    pub manager: String,
    pub field: String,
}

/// Server-side apply of `applied` (already limited to what `w.scope` may touch) onto `live`.
pub(crate) fn apply(
    live: &Value,
    applied: &Value,
    w: &Writer<'_>,
    force: bool,
    lists: ListSemantics<'_>,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = read_entries(live);
    let new_set = FieldSet::of(applied, w.scope, lists);
    let mut conflicts = Vec::new();
    for p in new_set.0.iter().filter(|p| is_leaf(p)) {
        let have = fieldset::get(live, p);
        if have.is_none() || have == fieldset::get(applied, p) {
            continue;
        }
        for e in entries.iter().filter(|e| e.manager != w.manager && e.fields.contains(p)) {
            conflicts.push(Conflict { manager: e.manager.clone(), field: fieldset::display(p) });
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let previous = entries
        .iter()
        .find(|e| e.manager == w.manager && e.operation == "Apply" && e.subresource == w.subresource)
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut result = live.clone();
    let dropped: Vec<&Path> = previous.0.difference(&new_set.0).collect();
    for p in dropped.into_iter().rev() {
        let owned_elsewhere = entries.iter().any(|e| e.manager != w.manager && e.fields.touches(p));
        if !owned_elsewhere {
            fieldset::remove(&mut result, p);
        }
    }
    merge_applied(&mut result, applied, &mut Vec::new(), lists);
    for e in entries.iter_mut().filter(|e| e.manager != w.manager) {
        for p in new_set.0.iter().filter(|p| is_leaf(p)) {
            if fieldset::get(live, p) != fieldset::get(applied, p) {
                e.fields.0.remove(p);
            }
        }
    }
    entry_for(&mut entries, w, "Apply").fields = new_set;
    write_entries(&mut result, entries);
    Ok(result)
}

fn merge_applied(into: &mut Value, applied: &Value, names: &mut Vec<String>, lists: ListSemantics<'_>) {
    let (Some(target), Some(src)) = (into.as_object_mut(), applied.as_object()) else {
        *into = applied.clone();
        return;
    };
    for (k, v) in src {
        names.push(k.clone());
        match v {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(_) => {
                let slot = target.entry(k.clone()).or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                merge_applied(slot, v, names, lists);
            }
            Value::Array(items) => {
                let merged = match (target.get(k), lists.kind(names)) {
                    (Some(Value::Array(have)), ListKind::Map(keys)) => {
                        let mut out = have.clone();
                        for item in items {
                            let id = fieldset::key_of(item, &keys);
                            match out.iter_mut().find(|o| fieldset::key_of(o, &keys) == id) {
                                Some(existing) => merge_applied(existing, item, names, lists),
                                None => out.push(item.clone()),
                            }
                        }
                        out
                    }
                    (Some(Value::Array(have)), ListKind::Set) => {
                        let mut out = have.clone();
                        out.extend(items.iter().filter(|i| !have.contains(i)).cloned());
                        out
                    }
                    _ => items.clone(),
                };
                target.insert(k.clone(), Value::Array(merged));
            }
            scalar => {
                target.insert(k.clone(), scalar.clone());
            }
        }
        names.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::builtin_types;

    fn with_lists<T>(f: impl FnOnce(ListSemantics<'_>) -> T) -> T {
        let types = builtin_types();
        let node = types.iter().find(|t| t.plural == "nodes").unwrap();
        f(ListSemantics::new(node, "v1"))
    }

    fn writer(manager: &str) -> Writer<'_> {
        Writer {
            manager,
            api_version: "v1",
            subresource: "",
            scope: Scope::AllButStatus,
            now: "2025-01-01T00:00:00Z",
        }
    }

    #[test]
    fn apply_conflicts_force_and_removal() {
        with_lists(|lists| {
            let live = json!({"metadata": {"name": "n"}, "spec": {}});
            let a1 = json!({"metadata": {"name": "n", "labels": {"a": "1", "b": "1"}}});
            let live = apply(&live, &a1, &writer("alice"), false, lists).unwrap();
            // bob sets a different value for a field alice owns: conflict unless forced
            let b = json!({"metadata": {"name": "n", "labels": {"a": "2"}}});
            let err = apply(&live, &b, &writer("bob"), false, lists).unwrap_err();
            assert_eq!(err, vec![Conflict { manager: "alice".into(), field: ".metadata.labels.a".into() }]);
            // the same value is shared ownership, no conflict
            let same = json!({"metadata": {"name": "n", "labels": {"a": "1"}}});
            let shared = apply(&live, &same, &writer("bob"), false, lists).unwrap();
            // alice drops both labels: `b` goes, `a` stays because bob co-owns it
            let a2 = json!({"metadata": {"name": "n"}});
            let after = apply(&shared, &a2, &writer("alice"), false, lists).unwrap();
            assert_eq!(after["metadata"]["labels"], json!({"a": "1"}));
            let forced = apply(&live, &b, &writer("bob"), true, lists).unwrap();
            assert_eq!(forced["metadata"]["labels"]["a"], json!("2"));
        });
    }

    #[test]
    fn updates_take_ownership() {
        with_lists(|lists| {
            let live = apply(
                &json!({"metadata": {"name": "n"}}),
                &json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}),
                &writer("alice"),
                false,
                lists,
            )
            .unwrap();
            let mut updated = live.clone();
            updated["spec"]["unschedulable"] = json!(false);
            record_update(Some(&live), &mut updated, &writer("kubectl"), lists);
            // alice no longer owns it, so re-applying her old value is not a conflict but a change
            let again = apply(
                &updated,
                &json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}),
                &writer("alice"),
                false,
                lists,
            );
            assert_eq!(
                again.unwrap_err(),
                vec![Conflict { manager: "kubectl".into(), field: ".spec.unschedulable".into() }],
                "kubectl now owns spec.unschedulable with a different value"
            );
        });
    }
}
