//! How a list field merges: by key (containers by name, conditions by type), as a set
//! (finalizers), or as one atomic value. Strategic merge patch and server-side apply both ask.
//! Built-in types use the keys Kubernetes declares in its Go types; CRDs use their schema's
//! `x-kubernetes-list-type` / `x-kubernetes-list-map-keys`.

use serde_json::Value;

use super::resource::{Builtin, ResourceType};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Items are objects identified by these keys; the first is the strategic-merge key.
    Map(Vec<String>),
    /// Items are scalars merged as a set.
    Set,
    /// Replaced as a whole.
    Atomic,
}

fn map(keys: &[&str]) -> ListKind {
    ListKind::Map(keys.iter().map(|k| k.to_string()).collect())
}

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

fn builtin_list(builtin: Builtin, path: &[&str]) -> ListKind {
    match path {
        ["metadata", "finalizers"] => return ListKind::Set,
        ["metadata", "ownerReferences"] => return map(&["uid"]),
        ["status", "conditions"] => return map(&["type"]),
        _ => {}
    }
    match (builtin, path) {
        (Builtin::Pod, ["spec", c]) if CONTAINER_LISTS.contains(c) => map(&["name"]),
        (Builtin::Pod, ["spec", c, field]) if CONTAINER_LISTS.contains(c) => match *field {
            "ports" => map(&["containerPort", "protocol"]),
            "env" => map(&["name"]),
            "volumeMounts" => map(&["mountPath"]),
            "volumeDevices" => map(&["devicePath"]),
            _ => ListKind::Atomic,
        },
        (Builtin::Pod, ["spec", "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates"]) => {
            map(&["name"])
        }
        (Builtin::Pod, ["spec", "hostAliases"]) => map(&["ip"]),
        (Builtin::Pod, ["spec", "topologySpreadConstraints"]) => map(&["topologyKey", "whenUnsatisfiable"]),
        (Builtin::Pod, ["status", "podIPs" | "hostIPs"]) => map(&["ip"]),
        (Builtin::Node, ["spec", "podCIDRs"]) => ListKind::Set,
        (Builtin::Node, ["status", "addresses"]) => map(&["type"]),
        _ => ListKind::Atomic,
    }
}

/// Walks a structural schema along field names (list items are implicit).
fn schema_list(schema: &Value, path: &[&str]) -> ListKind {
    let mut node = schema;
    for field in path {
        if node["type"] == "array" {
            node = &node["items"];
        }
        let next = &node["properties"][*field];
        node = if next.is_null() { &node["additionalProperties"] } else { next };
        if node.is_null() {
            return ListKind::Atomic;
        }
    }
    match node["x-kubernetes-list-type"].as_str() {
        Some("map") => ListKind::Map(
            node["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect(),
        ),
        Some("set") => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// Answers "how does the list at this field path merge" for one type and version.
#[derive(Clone, Copy)]
pub(crate) struct ListSemantics<'a> {
    rt: &'a ResourceType,
    version: &'a str,
}

impl<'a> ListSemantics<'a> {
    pub(crate) fn new(rt: &'a ResourceType, version: &'a str) -> Self {
        ListSemantics { rt, version }
    }

    pub(crate) fn kind(&self, path: &[String]) -> ListKind {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        if let Some(b) = self.rt.builtin {
            return builtin_list(b, &path);
        }
        match path.as_slice() {
            ["metadata", "finalizers"] => return ListKind::Set,
            ["metadata", "ownerReferences"] => return map(&["uid"]),
            _ => {}
        }
        match self.rt.version(self.version).and_then(|v| v.schema.as_ref()) {
            Some(schema) => schema_list(schema, &path),
            None => ListKind::Atomic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schema_list_types() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "gpus": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["index"],
                "items": {"type": "object", "properties": {"tags": {"type": "array", "x-kubernetes-list-type": "set"}}}},
            "plain": {"type": "array"}}}}});
        assert_eq!(schema_list(&schema, &["spec", "gpus"]), ListKind::Map(vec!["index".into()]));
        assert_eq!(schema_list(&schema, &["spec", "gpus", "tags"]), ListKind::Set);
        assert_eq!(schema_list(&schema, &["spec", "plain"]), ListKind::Atomic);
        assert_eq!(schema_list(&schema, &["spec", "nothing"]), ListKind::Atomic);
    }

    #[test]
    fn builtin_keys() {
        assert_eq!(builtin_list(Builtin::Pod, &["spec", "initContainers", "env"]), map(&["name"]));
        assert_eq!(builtin_list(Builtin::Node, &["spec", "taints"]), ListKind::Atomic);
        assert_eq!(builtin_list(Builtin::Node, &["status", "conditions"]), map(&["type"]));
    }
}
