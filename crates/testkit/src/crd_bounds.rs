//! Boundary values for every numeric and string field of Geometer's three CRDs, and one full
//! example object per kind that holds every field, so that a test can set each field to each
//! boundary in turn and show the API server refuses it or Geometer reads it.

use serde_json::{json, Value};

/// A leaf field of a CRD schema: where it is in an object and its schema.
#[derive(Debug, Clone)]
pub struct Field {
    /// Steps from the object's root: property names, `[0]` for a list's first item, and the
    /// example's own key for a map entry.
    pub path: Vec<String>,
    pub schema: Value,
}

impl Field {
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }

    pub fn in_status(&self) -> bool {
        self.path.first().is_some_and(|p| p == "status")
    }
}

/// The `openAPIV3Schema` of the Geometer CRD of `kind`, with its bounds.
pub fn schema_of(kind: &str) -> Value {
    let crd = geometer_api::crds().into_iter().find(|c| c.spec.names.kind == kind).expect("a Geometer kind");
    serde_json::to_value(&crd.spec.versions[0].schema.as_ref().expect("a schema").open_api_v3_schema)
        .expect("schema")
}

/// Every integer, number and string leaf of `schema` (an `openAPIV3Schema`), map entries at
/// the key the `example` object uses.
pub fn leaf_fields(schema: &Value, example: &Value) -> Vec<Field> {
    let mut out = Vec::new();
    walk(schema, example, &mut Vec::new(), &mut out);
    out
}

fn walk(schema: &Value, example: &Value, path: &mut Vec<String>, out: &mut Vec<Field>) {
    match schema["type"].as_str() {
        Some("integer" | "number" | "string") => {
            out.push(Field { path: path.clone(), schema: schema.clone() });
            return;
        }
        Some("array") => {
            path.push("[0]".into());
            walk(&schema["items"], &example[0], path, out);
            path.pop();
            return;
        }
        _ => {}
    }
    if let Some(props) = schema["properties"].as_object() {
        for (key, child) in props {
            path.push(key.clone());
            walk(child, &example[key], path, out);
            path.pop();
        }
    }
    if schema["additionalProperties"].is_object() {
        // The example's first key, or a placeholder the test reports as missing.
        let key =
            example.as_object().and_then(|m| m.keys().next().cloned()).unwrap_or_else(|| "(key)".into());
        path.push(key.clone());
        walk(&schema["additionalProperties"], &example[&key], path, out);
        path.pop();
    }
}

/// The value at `path` in `object`, mutable; `None` when the example lacks it.
pub fn at<'v>(object: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    let mut node = object;
    for step in path {
        node = if step == "[0]" { node.get_mut(0)? } else { node.get_mut(step)? };
    }
    Some(node)
}

/// The boundary values of a field, labelled: 0, the schema's minimum and maximum, one past
/// each, a negative number; for a string the empty one, one at its length limit, one past it
/// and a very long one.
pub fn boundary_values(field: &Field) -> Vec<(String, Value)> {
    let s = &field.schema;
    let mut values = Vec::new();
    match s["type"].as_str() {
        Some("integer") => {
            values.push(("0".into(), json!(0)));
            values.push(("-1".into(), json!(-1)));
            if let Some(min) = s["minimum"].as_i64() {
                values.push(("min".into(), json!(min)));
                if let Some(below) = min.checked_sub(1) {
                    values.push(("min-1".into(), json!(below)));
                }
            }
            match s["maximum"].as_i64() {
                Some(max) => {
                    values.push(("max".into(), json!(max)));
                    match max.checked_add(1) {
                        Some(above) => values.push(("max+1".into(), json!(above))),
                        None => values.push(("max+1".into(), json!(u64::MAX))),
                    }
                }
                None => values.push(("huge".into(), json!(u64::MAX))),
            }
        }
        Some("number") => {
            for v in [json!(0.0), json!(-1.0), json!(1e308), json!(-1e308)] {
                values.push((v.to_string(), v));
            }
        }
        _ => {
            values.push(("empty".into(), json!("")));
            if let Some(max) = s["maxLength"].as_u64() {
                values.push(("maxLength".into(), json!("a".repeat(max as usize))));
                values.push(("maxLength+1".into(), json!("a".repeat(max as usize + 1))));
            }
            values.push(("very long".into(), json!("a".repeat(1 << 20))));
        }
    }
    values
}

/// One object of each kind with every field of its schema set to a valid value.
pub fn examples() -> Vec<(&'static str, Value)> {
    let condition = json!({"type": "Ready", "status": "True", "reason": "Valid", "message": "fine",
        "lastTransitionTime": "2026-12-01T10:00:00Z", "observedGeneration": 1});
    let placed = json!({"profile": "3g.40gb", "start": 4});
    vec![
        (
            "MigPolicy",
            json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "bounds"},
            "spec": {"allowedModes": ["MIG", "Whole"], "allowedProfiles": ["1g.10gb"], "minWholeGpus": 2, "batching": {"idleSeconds": 5, "maxSeconds": 30},
                "disruption": {"doNotDisruptAnnotations": ["geometer.dev/do-not-disrupt"], "drainTimeoutSeconds": 600,
                    "evictionAllowed": true, "maxNodesReconfiguring": 1},
                "forecastWindowSeconds": 60, "headroom": {"1g.10gb": 1}, "mode": "DryRun",
                "rightsizing": {"mode": "Enforce", "headroomPercent": 20, "minSamples": 30},
                "dynamicMig": {"compact": true},
                "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}], "matchLabels": {"pool": "a"}},
                "solver": {"maxGpusChanged": 4, "maxNodesChanged": 2, "timeLimitMs": 5000}, "stabilisationSeconds": 600},
            "status": {"conditions": [condition], "lastPlan": "bounds-1", "managedGpus": 8, "managedNodes": 1, "observedGeneration": 1}}),
        ),
        (
            "MigPlan",
            json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlan", "metadata": {"name": "bounds-1"},
            "spec": {"approved": false, "bound": 1.0, "objective": 1.0, "policy": "bounds", "solveMs": 12,
                "demand": {"met": [{"node": "n1", "pod": "ml/a", "profile": "3g.40gb"}],
                    "unmet": [{"pod": "ml/b", "profile": "7g.80gb", "reason": "no room"}],
                    "gangs": [{"gang": "ml/train", "minMembers": 8, "members": 7, "reason": "7 of 8 placeable on eligible nodes; needs 8"}]},
                "evictions": [{"name": "c", "namespace": "ml", "node": "n1", "reason": "makes room"}],
                "nodes": [{"node": "n1", "gpus": [{"index": 0, "model": "H100-80GB", "from": [{"profile": "7g.80gb", "start": 0}],
                    "to": [placed], "operations": {"create": [placed], "destroy": [{"profile": "7g.80gb", "start": 0}]}}]}],
                "summary": {"evictions": 1, "gpusChanged": 1, "nodesChanged": 1, "podsHelped": 1, "podsUnmet": 1}},
            "status": {"conditions": [condition], "message": "proposed", "phase": "Proposed",
                "nodes": [{"node": "n1", "phase": "Pending", "message": "waiting", "startedAt": "2026-12-01T10:00:00Z",
                    "finishedAt": "2026-12-01T10:05:00Z"}]}}),
        ),
        (
            "MigNode",
            json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode", "metadata": {"name": "n1"},
            "spec": {"plan": "bounds-1", "gpus": [{"index": 0, "geometry": [placed]}],
                "compaction": {"policy": "bounds", "forPod": "ml/train", "device": "gpu-0-mig-3g40gb-9-4",
                    "evict": [{"pod": "ml/chat", "uid": "uid-1"}], "startedAt": "2026-12-01T10:00:00Z"}},
            "status": {"gpuCount": 1, "observedGeneration": 1, "phase": "Ready", "cordonedByGeometer": false, "deviceStack": "DraStaticMig",
                "conditions": [condition],
                "catalogDisagreements": [{"gpu": 0, "profile": "1g.10gb", "field": "placements", "catalog": "[0]", "nvml": "[1]"}],
                "step": {"action": "Cordon", "attempt": 1, "generation": 1, "gpu": 0, "pod": "ml/a",
                    "instance": {"profile": "3g.40gb", "start": 4}, "startedAt": "2026-12-01T10:00:00Z"},
                "gpus": [{"index": 0, "uuid": "GPU-0", "model": "H100-80GB", "pciDeviceId": "0x233010DE", "pod": "ml/w",
                    "sharedWith": ["ml/w2"], "advertisedAs": {"nvidia.com/mig-3g.40gb": "3g.40gb"}, "freePlacements": [{"start": 4, "size": 4}],
                    "migMode": {"current": true, "pending": true},
                    "instances": [{"profile": "3g.40gb", "start": 4, "size": 4, "gpuInstanceId": 1, "computeInstanceId": 0,
                        "uuid": "MIG-1", "pod": "ml/a", "sharedWith": ["ml/a2"], "processes": 1, "rebuild": "two compute instances"}]}],
                "usage": [{"pod": "ml/w", "gpu": 0, "model": "H100-80GB", "since": "2026-12-01T10:00:00Z", "samples": 3,
                    "peakMemoryMib": 7000, "p95MemoryMib": 6400, "peakUtilizationPercent": 40, "meanUtilizationPercent": 12}],
                "pausedOperands": {"since": "2026-12-01T10:00:00Z",
                    "labels": [{"label": "nvidia.com/gpu.deploy.device-plugin", "prior": "true", "paused": true}]}}}),
        ),
    ]
}

/// The CRD of `kind` as an older, looser Geometer installed it: without the `maximum` at
/// `pointer` (a path in its openAPIV3Schema), so the API server stores values Geometer's
/// types cannot hold.
pub fn looser_crd(
    kind: &str,
    pointer: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let crd = geometer_api::crds().into_iter().find(|c| c.spec.names.kind == kind).expect("a Geometer kind");
    let mut value = serde_json::to_value(crd).expect("CRD");
    let field = value
        .pointer_mut(&format!("/spec/versions/0/schema/openAPIV3Schema{pointer}"))
        .and_then(Value::as_object_mut)
        .expect("the field's schema");
    field.remove("maximum");
    serde_json::from_value(value).expect("CRD")
}

/// Where a MigPolicy's solver time limit is in its schema.
pub const POLICY_TIME_LIMIT: &str = "/properties/spec/properties/solver/properties/timeLimitMs";

/// Whether Geometer reads `object` as its `kind`, and if not the field that stops it.
pub fn decodes(kind: &str, object: &Value) -> Result<(), String> {
    use geometer_api::decode::from_value;
    let read = match kind {
        "MigPolicy" => from_value::<geometer_api::MigPolicy>(object).map(|_| ()),
        "MigPlan" => from_value::<geometer_api::MigPlan>(object).map(|_| ()),
        "MigNode" => from_value::<geometer_api::MigNode>(object).map(|_| ()),
        other => panic!("{other} is not a Geometer kind"),
    };
    read.map_err(|e| e.to_string())
}
