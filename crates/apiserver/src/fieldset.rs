//! Sets of field paths in the `FieldsV1` format of `metadata.managedFields`: which fields an
//! object sets, reading and writing the `f:`/`k:`/`v:` tree, and getting or removing a path.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::list_semantics::{ListKind, ListSemantics};

/// One step of a field path: a map field, a keyed list item, a set member, a list index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Step {
    Field(String),
    /// The JSON of the item's key fields, e.g. `{"name":"c"}`.
    Key(String),
    /// The JSON of a set member.
    Member(String),
    Index(usize),
}

pub(crate) type Path = Vec<Step>;

/// Paths an object sets: leaves, plus keyed list items themselves (so they can be removed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet(pub BTreeSet<Path>);

/// Metadata a client never owns.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// Which part of an object a write may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Everything,
    /// The main resource of a type with a status subresource.
    AllButStatus,
    StatusOnly,
}

impl FieldSet {
    pub(crate) fn of(obj: &Value, scope: Scope, lists: ListSemantics<'_>) -> FieldSet {
        let mut set = BTreeSet::new();
        if let Some(m) = obj.as_object() {
            for (k, v) in m {
                let keep = match (k.as_str(), scope) {
                    ("apiVersion" | "kind", _) => false,
                    ("status", Scope::AllButStatus) => false,
                    ("status", _) => true,
                    ("metadata", Scope::StatusOnly) => false,
                    (_, Scope::StatusOnly) => false,
                    _ => true,
                };
                if !keep {
                    continue;
                }
                if k == "metadata" {
                    for (mk, mv) in v.as_object().into_iter().flatten() {
                        if !SERVER_METADATA.contains(&mk.as_str()) {
                            collect(
                                mv,
                                &mut vec![Step::Field(k.clone()), Step::Field(mk.clone())],
                                &mut vec![k.clone(), mk.clone()],
                                lists,
                                &mut set,
                            );
                        }
                    }
                } else {
                    collect(v, &mut vec![Step::Field(k.clone())], &mut vec![k.clone()], lists, &mut set);
                }
            }
        }
        FieldSet(set)
    }

    pub(crate) fn contains(&self, p: &Path) -> bool {
        self.0.contains(p)
    }

    /// Whether this set owns `p` or anything below it.
    pub(crate) fn touches(&self, p: &Path) -> bool {
        self.0.range(p.clone()..).next().is_some_and(|q| q.starts_with(p))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.0 {
            let mut node = &mut root;
            for step in path {
                node = node
                    .entry(encode(step))
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                    .expect("fieldsV1 nodes are objects");
            }
            if matches!(path.last(), Some(Step::Key(_))) {
                node.insert(".".into(), Value::Object(Map::new()));
            }
        }
        Value::Object(root)
    }

    pub(crate) fn from_fields_v1(v: &Value) -> FieldSet {
        let mut set = BTreeSet::new();
        read(v, &mut Vec::new(), &mut set);
        FieldSet(set)
    }
}

fn collect(
    v: &Value,
    path: &mut Path,
    names: &mut Vec<String>,
    lists: ListSemantics<'_>,
    out: &mut BTreeSet<Path>,
) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                path.push(Step::Field(k.clone()));
                names.push(k.clone());
                collect(x, path, names, lists, out);
                names.pop();
                path.pop();
            }
        }
        Value::Array(items) => match lists.kind(names) {
            ListKind::Map(keys) => {
                for item in items {
                    path.push(Step::Key(key_of(item, &keys)));
                    out.insert(path.clone());
                    collect(item, path, names, lists, out);
                    path.pop();
                }
            }
            ListKind::Set => {
                for item in items {
                    path.push(Step::Member(item.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListKind::Atomic => {
                out.insert(path.clone());
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The `k:` identity of a keyed list item (key fields it has, in key order).
pub(crate) fn key_of(item: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(k) {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m).to_string()
}

fn encode(step: &Step) -> String {
    match step {
        Step::Field(f) => format!("f:{f}"),
        Step::Key(k) => format!("k:{k}"),
        Step::Member(v) => format!("v:{v}"),
        Step::Index(i) => format!("i:{i}"),
    }
}

fn read(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(m) = v.as_object() else { return };
    if m.is_empty() && !path.is_empty() {
        out.insert(path.clone());
        return;
    }
    for (k, child) in m {
        if k == "." {
            out.insert(path.clone());
            continue;
        }
        let step = if let Some(f) = k.strip_prefix("f:") {
            Step::Field(f.to_string())
        } else if let Some(key) = k.strip_prefix("k:") {
            Step::Key(key.to_string())
        } else if let Some(val) = k.strip_prefix("v:") {
            Step::Member(val.to_string())
        } else if let Some(i) = k.strip_prefix("i:").and_then(|i| i.parse().ok()) {
            Step::Index(i)
        } else {
            continue;
        };
        path.push(step);
        read(child, path, out);
        path.pop();
    }
}

fn item_matches(item: &Value, key_json: &str) -> bool {
    match serde_json::from_str::<Map<String, Value>>(key_json) {
        Ok(key) => key.iter().all(|(k, v)| item.get(k) == Some(v)),
        Err(_) => false,
    }
}

fn member_matches(item: &Value, json: &str) -> bool {
    serde_json::from_str::<Value>(json).is_ok_and(|m| &m == item)
}

pub(crate) fn get<'a>(v: &'a Value, path: &[Step]) -> Option<&'a Value> {
    let mut cur = v;
    for step in path {
        cur = match step {
            Step::Field(f) => cur.get(f.as_str())?,
            Step::Key(k) => cur.as_array()?.iter().find(|i| item_matches(i, k))?,
            Step::Member(m) => cur.as_array()?.iter().find(|i| member_matches(i, m))?,
            Step::Index(i) => cur.as_array()?.get(*i)?,
        };
    }
    Some(cur)
}

pub(crate) fn remove(v: &mut Value, path: &[Step]) {
    let Some((last, parent_path)) = path.split_last() else { return };
    let mut cur = v;
    for step in parent_path {
        let next = match step {
            Step::Field(f) => cur.get_mut(f.as_str()),
            Step::Key(k) => cur.as_array_mut().and_then(|a| a.iter_mut().find(|i| item_matches(i, k))),
            Step::Member(m) => cur.as_array_mut().and_then(|a| a.iter_mut().find(|i| member_matches(i, m))),
            Step::Index(i) => cur.as_array_mut().and_then(|a| a.get_mut(*i)),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Step::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Step::Key(k) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| !item_matches(i, k));
            }
        }
        Step::Member(m) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| !member_matches(i, m));
            }
        }
        Step::Index(i) => {
            if let Some(a) = cur.as_array_mut() {
                if *i < a.len() {
                    a.remove(*i);
                }
            }
        }
    }
}

/// `.spec.containers[name="c"].image`: how conflicts name a path.
pub(crate) fn display(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Step::Key(k) => {
                let parts: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            Step::Member(m) => s.push_str(&format!("[{m}]")),
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::builtin_types;
    use serde_json::json;

    #[test]
    fn round_trips_through_fields_v1() {
        let types = builtin_types();
        let pod = types.iter().find(|t| t.plural == "pods").unwrap();
        let lists = ListSemantics::new(pod, "v1");
        let obj = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["f"]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}});
        let set = FieldSet::of(&obj, Scope::AllButStatus, lists);
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}, "f:finalizers": {"v:\"f\"": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
        let image = vec![
            Step::Field("spec".into()),
            Step::Field("containers".into()),
            Step::Key("{\"name\":\"c\"}".into()),
            Step::Field("image".into()),
        ];
        assert_eq!(get(&obj, &image), Some(&json!("i")));
        assert_eq!(display(&image), ".spec.containers[name=\"c\"].image");
        let mut copy = obj.clone();
        remove(&mut copy, &image[..3]);
        assert_eq!(copy["spec"]["containers"], json!([]));
    }
}
