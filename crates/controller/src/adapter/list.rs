//! Reading what `kubectl get -o json|yaml` prints into [`Objects`]: a JSON List, or a YAML
//! List in kubectl's shape, item by item from its text, anything else as one value; each item
//! by its kind, one that cannot be read skipped and named, never stopping the rest. Also the
//! `--policy` file.

use crate::adapter::PodView;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use geometer_api::decode::{self, DecodeError};
use geometer_api::{MigNode, MigPolicy};
use geometer_solver::snapshot::Policy;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};

use crate::dra::published::PublishedSlice;
use kube::ResourceExt;
use serde_json::value::RawValue;
use serde_json::Value;

use super::parallel::in_order_owned;
use super::projection::Projection;
use super::{kubectl_yaml, mig_objects, AdapterError, Objects, PolicyObject};

/// Parses JSON or YAML text into a value; JSON first when it looks like JSON. YAML of several
/// documents (`---` between them, as `kubectl apply -f` takes) reads as one List of them all,
/// a List document giving its items: as kubectl reads a file of manifests.
pub fn parse_value(text: &str) -> Result<Value, AdapterError> {
    if let Some(v) = as_json(text) {
        return Ok(v);
    }
    let mut documents: Vec<Value> =
        geometer_solver::yaml::from_multiple(text).map_err(|e| AdapterError::Syntax(e.to_string()))?;
    documents.retain(|d| !d.is_null());
    match documents.len() {
        0 => Ok(Value::Null),
        1 => Ok(documents.remove(0)),
        _ => one_list(documents),
    }
}

/// Parses JSON or YAML text holding one object (a policy file): a second YAML document is
/// refused in words, since there is nothing to merge one policy with.
fn parse_one_value(text: &str) -> Result<Value, AdapterError> {
    match as_json(text) {
        Some(v) => Ok(v),
        None => geometer_solver::yaml::from_str(text).map_err(|e| AdapterError::Syntax(e.to_string())),
    }
}

fn as_json(text: &str) -> Option<Value> {
    if !text.trim_start().starts_with(['{', '[']) {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// Documents as one List: a List document's items in its place (each given the kind its
/// list implies, as a NodeList's items may omit theirs), any other document as one item.
fn one_list(documents: Vec<Value>) -> Result<Value, AdapterError> {
    let mut items = Vec::new();
    for (n, mut document) in documents.into_iter().enumerate() {
        let kind = document.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        if !kind.ends_with("List") {
            items.push(document);
            continue;
        }
        match document.get_mut("items").map(Value::take) {
            Some(Value::Array(list)) => {
                items.extend(list.into_iter().map(|item| with_kind(item, implied_kind(&kind))))
            }
            None | Some(Value::Null) => {}
            Some(other) => {
                return Err(AdapterError::Field {
                    object: format!("document {} ({kind})", n + 1),
                    field: "items".into(),
                    value: geometer_api::limits::quote(&other.to_string()),
                    problem: "expected a list".into(),
                })
            }
        }
    }
    Ok(serde_json::json!({"kind": "List", "items": items}))
}

/// `item` with `kind` set to `implied` where it has none.
fn with_kind(mut item: Value, implied: &str) -> Value {
    if let Value::Object(map) = &mut item {
        if !implied.is_empty() && !map.contains_key("kind") {
            map.insert("kind".into(), Value::String(implied.into()));
        }
    }
    item
}

pub fn parse_objects(text: &str) -> Result<Objects, AdapterError> {
    if let Some(objects) = list_objects(text) {
        return Ok(objects);
    }
    objects_of(parse_value(text)?)
}

/// A List as `kubectl get -o json|yaml` prints it, read item by item from its text, each item
/// straight into its type, on every core; `None` for anything else (one object, a planner
/// snapshot, YAML of another shape), which [`parse_value`] then reads whole. What
/// `geometer plan --snapshot` and [`parse_objects`] read a large cluster's dump with.
pub fn list_objects(text: &str) -> Option<Objects> {
    json_list(text).or_else(|| yaml_list(text))
}

/// A YAML List in kubectl's shape read item by item (`adapter::kubectl_yaml`), each item
/// decoded as a JSON List's are; `None` when the text is not such a List, or holds YAML the
/// general parser must read whole (an alias to another item's anchor, a syntax error), which
/// is then read as one value, as if this path were not there.
fn yaml_list(text: &str) -> Option<Objects> {
    let list = kubectl_yaml::split_list(text)?;
    let implied = implied_kind(&list.kind);
    let threads = threads_for(list.items.len());
    let reads = in_order_owned(
        list.items,
        threads,
        |text| text.len(),
        |text| yaml_item(text).map(|item| decode_one(item, implied)),
    );
    Some(gather(reads.into_iter().collect::<Option<Vec<_>>>()?))
}

/// A YAML item as JSON text, or, where the fast reader leaves it, as the general parser reads
/// it; `None` when that fails (the whole text is then read, to say why).
fn yaml_item(text: &str) -> Option<Item<'_>> {
    if let Some(json) = kubectl_yaml::item_json(text) {
        return Some(Item::Json(Cow::Owned(json)));
    }
    // A one-entry sequence: the item as it sits in the List.
    let mut entry = geometer_solver::yaml::from_str::<Vec<Value>>(text).ok()?;
    (entry.len() == 1).then(|| Item::Value(entry.remove(0)))
}

/// A JSON List read item by item from its text, each decoded straight into its type (no value
/// tree for the whole, nor for an item unless it fails to decode); `None` when `text` is not
/// a JSON List whose `items` is a list.
fn json_list(text: &str) -> Option<Objects> {
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
    Some(read_items(&list.kind, list.items.into_iter().map(|raw| Item::Json(Cow::Borrowed(raw.get())))))
}

/// One item of a List: a value (YAML or JSON read whole, or a YAML item the fast reader
/// leaves), or its JSON text (a slice of a JSON List, or a YAML item written as JSON).
pub(super) enum Item<'t> {
    Value(Value),
    Json(Cow<'t, str>),
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
        if let Item::Json(json) = &self {
            if let Ok(header) = serde_json::from_str::<Header>(json) {
                return (header, self);
            }
        }
        let value = self.into_value();
        let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).map(str::to_string);
        let metadata =
            HeaderMetadata { name: text("/metadata/name"), namespace: text("/metadata/namespace") };
        (Header { kind: text("/kind"), metadata }, Item::Value(value))
    }

    fn decode<T: decode::Stored>(&self) -> Result<T, DecodeError> {
        match self {
            Item::Value(value) => decode::from_stored(value),
            Item::Json(json) => decode::from_json_str(json),
        }
    }

    /// About how long it takes to decode: its text's length (values are decoded on one thread).
    fn weight(&self) -> usize {
        match self {
            Item::Value(_) => 1,
            Item::Json(json) => json.len(),
        }
    }

    fn into_value(self) -> Value {
        match self {
            Item::Value(value) => value,
            // Already parsed once as JSON (a slice of a List that parsed, or written here).
            Item::Json(json) => serde_json::from_str(&json).unwrap_or(Value::Null),
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
    let items: Vec<Item<'t>> = items.collect();
    // A JSON List's items are slices of its text; values (a List read whole) were built by
    // the main thread and, decoded elsewhere, would be freed where it cannot reuse them.
    let threads = if matches!(items.first(), Some(Item::Json(_))) { threads_for(items.len()) } else { 1 };
    let implied = implied_kind(list_kind);
    gather(in_order_owned(items, threads, Item::weight, |item| decode_one(item, implied)))
}

/// The kind of the items of a NodeList or PodList, which may omit theirs.
pub(super) fn implied_kind(list_kind: &str) -> &'static str {
    match list_kind {
        "NodeList" => "Node",
        "PodList" => "Pod",
        _ => "",
    }
}

/// Decoded items into `Objects`, in List order.
pub(super) fn gather(reads: Vec<Read<'_>>) -> Objects {
    let mut objects = Objects::default();
    // (kind, namespace, name) -> the item that had it first: a second one is refused, not
    // allowed to replace the first without a word.
    let mut first: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for (index, read) in reads.into_iter().enumerate() {
        let Read { kind, namespace, name, typed } = read;
        if matches!(kind.as_str(), "Node" | "Pod" | "MigNode" | "MigPolicy") {
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
        let read = match typed {
            Typed::Node(node) => node.map(|n| objects.nodes.push(n)).map_err(bad),
            Typed::Pod(pod) => pod.map(|p| objects.pods.push(p)).map_err(bad),
            Typed::MigNode(node) => read_mignode(node, &mut objects).map_err(|e| {
                objects.unreadable_inventories.insert(name.clone());
                e.map_err(bad).unwrap_or_else(|e| e)
            }),
            Typed::Dra(item) => read_dra(item, &mut objects).map_err(bad),
            Typed::Other(item) => read_other(&kind, item, index, &mut objects),
            Typed::NotAnObject(found) => Err(AdapterError::NotAnObject { index, found }),
        };
        if let Err(e) = read {
            objects.skipped.push(e);
        }
    }
    Arc::make_mut(&mut objects.dra).index();
    objects
}

/// An item's kind and name, and the item decoded by its kind (the many kinds: Nodes, Pods and
/// MigNodes) or not yet (the few others).
pub(super) struct Read<'t> {
    pub(super) kind: String,
    namespace: String,
    name: String,
    typed: Typed<'t>,
}

/// An item decoded into its type, or (a kind read later) as it came.
enum Typed<'t> {
    Node(Result<Arc<Node>, DecodeError>),
    Pod(Result<Arc<PodView>, DecodeError>),
    MigNode(Result<Box<MigNode>, DecodeError>),
    /// A DRA object: a cluster's are many (a ResourceClaim per GPU pod, a slice per node), so
    /// they are decoded on every core too.
    Dra(DraItem),
    Other(Item<'t>),
    /// An item that is not an object at all (a number, a list): what it is.
    NotAnObject(String),
}

/// A DRA item, decoded.
enum DraItem {
    Slice(Result<Arc<PublishedSlice>, DecodeError>),
    Claim(Result<Arc<ResourceClaim>, DecodeError>),
    Template(Result<Arc<ResourceClaimTemplate>, DecodeError>),
    Class(Result<Arc<DeviceClass>, DecodeError>),
}

/// A decoded DRA item into `objects.dra`; a slice of another driver is counted as ignored.
fn read_dra(item: DraItem, objects: &mut Objects) -> Result<(), DecodeError> {
    let dra = Arc::make_mut(&mut objects.dra);
    match item {
        DraItem::Slice(slice) => {
            if !dra.add_slice(slice?) {
                *objects.ignored.entry("ResourceSlice".to_string()).or_default() += 1;
            }
        }
        DraItem::Claim(claim) => dra.add_claim(claim?),
        DraItem::Template(template) => dra.add_template(template?),
        DraItem::Class(class) => dra.add_class(class?),
    }
    Ok(())
}

/// Items at most this many to a thread: below it a second thread costs more than it saves.
const ITEMS_PER_THREAD: usize = 2_000;

/// As many threads as there are cores for a large List, one for a small one.
fn threads_for(items: usize) -> usize {
    super::parallel::threads_for(items, ITEMS_PER_THREAD)
}

pub(super) fn decode_one<'t>(item: Item<'t>, implied: &str) -> Read<'t> {
    if let Some(found) = not_an_object(&item) {
        let typed = Typed::NotAnObject(found);
        return Read { kind: String::new(), namespace: String::new(), name: String::new(), typed };
    }
    let (header, item) = item.header();
    let kind = header.kind.unwrap_or_else(|| implied.to_string());
    let typed = match kind.as_str() {
        "Node" => Typed::Node(item.decode().map(projected)),
        "Pod" => Typed::Pod(item.decode().map(projected)),
        "MigNode" => Typed::MigNode(item.decode().map(Box::new)),
        "ResourceSlice" => Typed::Dra(DraItem::Slice(item.decode().map(Arc::new))),
        "ResourceClaim" => Typed::Dra(DraItem::Claim(item.decode().map(projected))),
        "ResourceClaimTemplate" => Typed::Dra(DraItem::Template(item.decode().map(Arc::new))),
        "DeviceClass" => Typed::Dra(DraItem::Class(item.decode().map(Arc::new))),
        _ => Typed::Other(item),
    };
    Read {
        kind,
        namespace: header.metadata.namespace.unwrap_or_default(),
        name: header.metadata.name.unwrap_or_default(),
        typed,
    }
}

/// What an item that is not a JSON object is, as the user wrote it (shortened); `None` for an
/// object.
fn not_an_object(item: &Item<'_>) -> Option<String> {
    let parsed;
    let value = match item {
        Item::Value(value) => value,
        Item::Json(json) if json.trim_start().starts_with('{') => return None,
        Item::Json(json) => {
            parsed = serde_json::from_str::<Value>(json).unwrap_or(Value::Null);
            &parsed
        }
    };
    let what = match value {
        Value::Object(_) => return None,
        Value::Null => return Some("empty (null)".into()),
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
    };
    Some(format!("{what}, {}", geometer_api::limits::quote(&value.to_string())))
}

/// Only what planning reads of an object is kept, as in the controller's caches: a large
/// cluster's dump is mostly fields it never reads (images, volumes, environment).
fn projected<K: Projection>(mut object: K) -> Arc<K> {
    object.project();
    Arc::new(object)
}

/// A MigPolicy or PodGroup item into `objects`; any other kind is counted as ignored.
fn read_other(kind: &str, item: Item<'_>, index: usize, objects: &mut Objects) -> Result<(), AdapterError> {
    match kind {
        "MigPolicy" => mig_policy_value(item.into_value(), index).map(|p| objects.policies.push(p)),
        "PodGroup" => match super::gangs::pod_group(&item.into_value())? {
            Some(group) => {
                objects.pod_groups.push(group);
                Ok(())
            }
            None => {
                *objects.ignored.entry(kind.to_string()).or_default() += 1;
                Ok(())
            }
        },
        _ => {
            let kind = if kind.is_empty() { "(no kind)" } else { kind };
            *objects.ignored.entry(kind.to_string()).or_default() += 1;
            Ok(())
        }
    }
}

fn read_mignode(
    node: Result<Box<MigNode>, DecodeError>,
    objects: &mut Objects,
) -> Result<(), Result<AdapterError, DecodeError>> {
    let node = node.map_err(Err)?;
    let gpus = mig_objects::inventory(&node).map_err(Ok)?;
    objects.instance_uuids.extend(mig_objects::instance_uuids(&node));
    if let Some(stack) = node.status.as_ref().and_then(|s| s.device_stack) {
        objects.device_stacks.insert(node.name_any(), stack);
    }
    objects.inventories.insert(node.name_any(), Arc::new(gpus));
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
    let value = parse_one_value(text)?;
    if value.get("kind").and_then(Value::as_str) == Some("MigPolicy") {
        let policy = mig_policy_value(value, 0)?;
        return mig_objects::mig_policy(&policy, true);
    }
    let policy: Policy = decode::from_value(&value).map_err(|e| AdapterError::Field {
        object: "policy file".into(),
        field: e.field,
        value: e.value.unwrap_or_else(|| "(missing)".into()),
        problem: format!(
            "{}; give a MigPolicy object or the fields allowedProfiles, headroom, evictionAllowed, \
             maxGpusChanged, maxNodesChanged, timeLimitMs",
            e.problem
        ),
    })?;
    Ok(PolicyObject { name: "policy file".into(), policy, ..PolicyObject::default() })
}

#[cfg(test)]
mod tests {
    use super::super::tests::LIST;
    use super::*;

    /// A JSON List's text read on `threads` threads.
    fn read_on(text: &str, threads: usize) -> Objects {
        #[derive(serde::Deserialize)]
        struct RawList<'t> {
            #[serde(borrow)]
            items: Vec<&'t RawValue>,
        }
        let list: RawList = serde_json::from_str(text).unwrap();
        let items = list.items.into_iter().map(|raw| Item::Json(Cow::Borrowed(raw.get()))).collect();
        gather(in_order_owned(items, threads, Item::weight, |item| decode_one(item, "")))
    }

    #[test]
    fn a_list_read_on_several_threads_is_read_as_on_one() {
        // 5,001 Pods: every 7th asks for a broken quantity, the last repeats the first.
        let pod = |i: usize| {
            let quantity = if i % 7 == 3 { serde_json::json!([1]) } else { serde_json::json!("1") };
            serde_json::json!({"kind": "Pod", "metadata": {"name": format!("p{i}"), "namespace": "ml"},
                "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": quantity}}}]}})
        };
        let mut items: Vec<_> = (0..5_000).map(pod).collect();
        items.push(pod(0));
        let text = serde_json::json!({"kind": "List", "items": items}).to_string();
        let one = read_on(&text, 1);
        let errors = |o: &Objects| o.skipped.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        let names = |o: &Objects| o.pods.iter().map(|p| p.name_any()).collect::<Vec<_>>();
        for threads in [2, 3, 8] {
            let many = read_on(&text, threads);
            assert_eq!(names(&many), names(&one), "{threads} threads");
            assert_eq!(errors(&many), errors(&one), "{threads} threads");
        }
        assert_eq!(one.pods.len(), 5_000 - 714);
        assert!(errors(&one)[0].contains("items[3] (Pod p3)"), "{:?}", errors(&one)[0]);
        assert!(errors(&one)
            .last()
            .is_some_and(|e| e.contains("items[5000]") && e.contains("second object")));
    }

    #[test]
    fn items_that_are_not_objects_are_skipped_and_named_in_json_and_yaml() {
        let items =
            "[5, [1, 2], \"Pod\", null, true, {\"kind\": \"Node\", \"metadata\": {\"name\": \"gpu-1\"}}]";
        let json = format!("{{\"kind\": \"List\", \"items\": {items}}}");
        let fast = json_list(&json).expect("a JSON List takes the item-by-item path");
        let whole = objects_of(serde_json::from_str(&json).unwrap()).unwrap();
        let yaml = objects_of(parse_value(&format!("kind: List\nitems: {items}\n")).unwrap()).unwrap();
        let errors = |o: &Objects| o.skipped.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        let tail = "not a Kubernetes object; remove it, or put the object it stands for there";
        assert_eq!(
            errors(&fast),
            [
                format!("items[0] is a number, 5, {tail}"),
                format!("items[1] is a list, [1,2], {tail}"),
                format!("items[2] is a string, \"Pod\", {tail}"),
                format!("items[3] is empty (null), {tail}"),
                format!("items[4] is a boolean, true, {tail}"),
            ]
        );
        assert_eq!(errors(&whole), errors(&fast));
        assert_eq!(errors(&yaml), errors(&fast));
        assert_eq!(
            (fast.nodes.len(), whole.nodes.len(), yaml.nodes.len()),
            (1, 1, 1),
            "the object is still read"
        );
        // kubectl's block style, read item by item.
        let block = "kind: List\nitems:\n- 5\n- [1, 2]\n- \"Pod\"\n- null\n- true\n- kind: Node\n  metadata:\n    name: gpu-1\n";
        let by_item = yaml_list(block).expect("a YAML List takes the item-by-item path");
        assert_eq!(errors(&by_item), errors(&fast));
        assert_eq!(by_item.nodes.len(), 1);
    }

    #[test]
    fn a_json_list_is_read_item_by_item_as_its_yaml_form_is() {
        let bad = "- kind: Pod\n  metadata: {name: broken, namespace: ml}\n  spec: {containers: [{name: c, resources: {limits: {nvidia.com/mig-1g.5gb: [1]}}}]}\n- kind: Pod\n  metadata: {name: 7, namespace: ml}\n  spec: {containers: oops}\n";
        let yaml = format!("{LIST}{bad}");
        let value = parse_value(&yaml).unwrap();
        let json = serde_json::to_string(&value).unwrap();
        let fast = json_list(&json).expect("a JSON List takes the item-by-item path");
        let whole = objects_of(value.clone()).unwrap();
        assert_eq!((fast.nodes.len(), fast.pods.len()), (1, 3));
        assert_eq!((fast.nodes.len(), fast.pods.len()), (whole.nodes.len(), whole.pods.len()));
        let errors = |o: &Objects| o.skipped.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        assert_eq!(errors(&fast), errors(&whole));
        assert!(
            errors(&fast)[0].contains("items[5] (Pod broken)") && errors(&fast)[0].contains("[1]"),
            "{:?}",
            errors(&fast)
        );
        assert!(errors(&fast)[1].contains("metadata.name` = 7"), "{:?}", errors(&fast));
        assert_eq!(fast.ignored, whole.ignored);
        // A YAML List in kubectl's shape is read item by item too: in flow style (each item
        // by the general parser) and in block style (each read fast), with the same errors.
        let block = serde_saphyr::to_string(&value).unwrap();
        for text in [&yaml, &block] {
            let by_item = yaml_list(text).expect("a YAML List takes the item-by-item path");
            assert_eq!((by_item.nodes.len(), by_item.pods.len()), (1, 3));
            assert_eq!(errors(&by_item), errors(&whole));
            assert_eq!(by_item.ignored, whole.ignored);
        }
        // Not a List, or not JSON: the whole-value path reads it.
        assert!(json_list(&yaml).is_none());
        assert!(json_list(r#"{"kind": "Node", "metadata": {"name": "n"}}"#).is_none());
    }
}
