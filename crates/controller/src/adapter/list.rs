//! Reading what `kubectl get -o json|yaml` prints into [`Objects`]: a JSON List item by item
//! from its text, anything else as one value; each item by its kind, one that cannot be read
//! skipped and named, never stopping the rest. Also the `--policy` file.

use std::collections::BTreeMap;
use std::sync::Arc;

use geometer_api::decode::{self, DecodeError};
use geometer_api::{MigNode, MigPolicy};
use geometer_solver::snapshot::Policy;
use kube::ResourceExt;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{mig_objects, AdapterError, Objects, PolicyObject};

/// Parses JSON or YAML text into a value; JSON first when it looks like JSON.
pub fn parse_value(text: &str) -> Result<Value, AdapterError> {
    if text.trim_start().starts_with(['{', '[']) {
        if let Ok(v) = serde_json::from_str(text) {
            return Ok(v);
        }
    }
    geometer_solver::yaml::from_str::<Value>(text).map_err(|e| AdapterError::Syntax(e.to_string()))
}

pub fn parse_objects(text: &str) -> Result<Objects, AdapterError> {
    if let Some(objects) = json_list(text) {
        return Ok(objects);
    }
    objects_of(parse_value(text)?)
}

/// A JSON List read item by item from its text, each decoded straight into its type (no value
/// tree for the whole, nor for an item unless it fails to decode); `None` when `text` is not
/// a JSON List whose `items` is a list.
pub fn json_list(text: &str) -> Option<Objects> {
    #[derive(serde::Deserialize)]
    struct RawList<'t> {
        kind: String,
        #[serde(borrow)]
        items: Vec<&'t RawValue>,
    }
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let list: RawList = serde_json::from_str(text).ok()?;
    if !list.kind.ends_with("List") {
        return None;
    }
    Some(read_items(&list.kind, list.items.into_iter().map(Item::Raw)))
}

/// One item of a List: a value (YAML, or JSON read whole), or its JSON text.
enum Item<'t> {
    Value(Value),
    Raw(&'t RawValue),
}

/// What an item is, read before the item itself.
#[derive(serde::Deserialize, Default)]
struct Header {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: HeaderMetadata,
}

#[derive(serde::Deserialize, Default)]
struct HeaderMetadata {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

impl Item<'_> {
    /// Its header; an item whose header does not read as strings becomes a value, so that
    /// decoding it names the field.
    fn header(self) -> (Header, Self) {
        if let Item::Raw(raw) = &self {
            if let Ok(header) = serde_json::from_str::<Header>(raw.get()) {
                return (header, self);
            }
        }
        let value = self.into_value();
        let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).map(str::to_string);
        let metadata =
            HeaderMetadata { name: text("/metadata/name"), namespace: text("/metadata/namespace") };
        (Header { kind: text("/kind"), metadata }, Item::Value(value))
    }

    fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, DecodeError> {
        match self {
            Item::Value(value) => decode::from_value(value),
            Item::Raw(raw) => decode::from_json_str(raw.get()),
        }
    }

    fn into_value(self) -> Value {
        match self {
            Item::Value(value) => value,
            // Already parsed once as JSON (it is a slice of a List that parsed).
            Item::Raw(raw) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
        }
    }
}

/// The objects of a parsed List (or of one object); an item that cannot be read is skipped
/// and listed in [`Objects::skipped`].
pub fn objects_of(mut value: Value) -> Result<Objects, AdapterError> {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    let items: Vec<Value> = if kind == "List" || kind.ends_with("List") {
        match value.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            None | Some(Value::Null) => Vec::new(),
            Some(other) => {
                return Err(AdapterError::Field {
                    object: kind,
                    field: "items".into(),
                    value: geometer_api::limits::quote(&other.to_string()),
                    problem: "expected a list".into(),
                })
            }
        }
    } else if matches!(kind.as_str(), "Node" | "Pod" | "MigNode" | "MigPolicy") {
        vec![value]
    } else {
        let found = if kind.is_empty() { "document without `kind`".to_string() } else { kind };
        return Err(AdapterError::NotAList { found });
    };
    Ok(read_items(&kind, items.into_iter().map(Item::Value)))
}

/// Each item by its kind into `Objects`, skipping (and naming) those that cannot be read.
fn read_items<'t>(list_kind: &str, items: impl Iterator<Item = Item<'t>>) -> Objects {
    // Items of a NodeList/PodList may omit their kind.
    let implied = match list_kind {
        "NodeList" => "Node",
        "PodList" => "Pod",
        _ => "",
    };
    let mut objects = Objects::default();
    // (kind, namespace, name) -> the item that had it first: a second one is refused, not
    // allowed to replace the first without a word.
    let mut first: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for (index, item) in items.enumerate() {
        let (header, item) = item.header();
        let kind = header.kind.unwrap_or_else(|| implied.to_string());
        let name = header.metadata.name.unwrap_or_default();
        if matches!(kind.as_str(), "Node" | "Pod" | "MigNode" | "MigPolicy") {
            let namespace = header.metadata.namespace.unwrap_or_default();
            let key = (kind.clone(), namespace, name.clone());
            if let Some(&earlier) = first.get(&key) {
                objects.skipped.push(AdapterError::Object {
                    index,
                    kind,
                    name,
                    problem: format!("a second object of this name (the first is items[{earlier}], which is used); remove one"),
                });
                continue;
            }
            first.insert(key, index);
        }
        let bad = |e: DecodeError| AdapterError::Object {
            index,
            kind: kind.clone(),
            name: name.clone(),
            problem: e.to_string(),
        };
        let read = match kind.as_str() {
            "Node" => item.decode().map(|n| objects.nodes.push(Arc::new(n))).map_err(bad),
            "Pod" => item.decode().map(|p| objects.pods.push(Arc::new(p))).map_err(bad),
            "MigNode" => read_mignode(&item, &mut objects).map_err(|e| {
                objects.unreadable_inventories.insert(name.clone());
                e.map_err(bad).unwrap_or_else(|e| e)
            }),
            "MigPolicy" => mig_policy_value(item.into_value(), index).map(|p| objects.policies.push(p)),
            "PodGroup" => match super::gangs::pod_group(&item.into_value()) {
                Ok(Some(group)) => {
                    objects.pod_groups.push(group);
                    Ok(())
                }
                Ok(None) => {
                    *objects.ignored.entry(kind.clone()).or_default() += 1;
                    Ok(())
                }
                Err(e) => Err(e),
            },
            _ => {
                let kind = if kind.is_empty() { "(no kind)".into() } else { kind.clone() };
                *objects.ignored.entry(kind).or_default() += 1;
                Ok(())
            }
        };
        if let Err(e) = read {
            objects.skipped.push(e);
        }
    }
    objects
}

/// A MigNode's inventory into `objects`; the inner error when the object does not decode.
fn read_mignode(item: &Item<'_>, objects: &mut Objects) -> Result<(), Result<AdapterError, DecodeError>> {
    let node: MigNode = item.decode().map_err(Err)?;
    let gpus = mig_objects::inventory(&node).map_err(Ok)?;
    objects.inventories.insert(node.name_any(), gpus);
    objects.advertised.extend(mig_objects::advertised(&node));
    objects.sharing.extend(mig_objects::sharing_pods(&node).map(String::from));
    objects.usage.extend(node.usage().iter().cloned());
    Ok(())
}

/// A MigPolicy object, typed. A label map where a LabelSelector belongs would decode as
/// "select everything", so it is refused with the field named.
fn mig_policy_value(value: Value, index: usize) -> Result<MigPolicy, AdapterError> {
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(selector) = value.pointer("/spec/nodeSelector").and_then(Value::as_object) {
        if let Some(key) = selector.keys().find(|k| !matches!(k.as_str(), "matchLabels" | "matchExpressions"))
        {
            return Err(AdapterError::Field {
                object: format!("MigPolicy {name}"),
                field: format!("spec.nodeSelector.{key}"),
                value: geometer_api::limits::quote(&selector[key].to_string()),
                problem: "a node selector is a LabelSelector: put labels under matchLabels".into(),
            });
        }
    }
    if let Some(field) = decode::unknown_fields("MigPolicy", &value).into_iter().next() {
        return Err(AdapterError::Field {
            object: format!("MigPolicy {name}"),
            field,
            value: "(present)".into(),
            problem: "not a MigPolicy field (misspelt?); kubectl apply refuses it too. `kubectl explain migpolicy.spec` lists the fields".into(),
        });
    }
    decode::from_value(&value).map_err(|e| AdapterError::Object {
        index,
        kind: "MigPolicy".into(),
        name,
        problem: e.to_string(),
    })
}

/// A `--policy` file: a MigPolicy object, or the solver's policy fields directly
/// (`allowedProfiles`, `headroom`, `evictionAllowed`, `maxGpusChanged`, `maxNodesChanged`,
/// `timeLimitMs`).
pub fn parse_policy(text: &str) -> Result<PolicyObject, AdapterError> {
    let value = parse_value(text)?;
    if value.get("kind").and_then(Value::as_str) == Some("MigPolicy") {
        let policy = mig_policy_value(value, 0)?;
        return mig_objects::mig_policy(&policy, true);
    }
    let policy: Policy = serde_json::from_value(value.clone()).map_err(|e| AdapterError::Field {
        object: "policy file".into(),
        field: "(top level)".into(),
        value: value.to_string().chars().take(120).collect(),
        problem: format!("{e}; give a MigPolicy object or the fields allowedProfiles, headroom, evictionAllowed, maxGpusChanged, maxNodesChanged, timeLimitMs"),
    })?;
    Ok(PolicyObject { name: "policy file".into(), policy, ..PolicyObject::default() })
}
