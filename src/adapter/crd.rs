//! `MigNode` and `MigPolicy` objects, read untyped until the typed CRDs (src/api) land. This
//! is the only place that knows their field names; switching to the typed CRDs changes only
//! this file.
//!
//! Fields read (all optional unless said):
//! - `MigNode` (name = node name): `status.gpus[]` with `index` (required), the model as
//!   `model`, `product` or `deviceId` (one required), and `instances[]` with `profile`
//!   (required), `start` or `placement.start` (required), and the pod using it as `pod`
//!   (`namespace/name`) or `pod: {namespace, name}`.
//! - `MigPolicy` (as in src/api/policy.rs): `spec.nodeSelector.matchLabels` (a plain label map
//!   is accepted too; `matchExpressions` is refused, not ignored), `spec.allowedProfiles[]`,
//!   `spec.headroom` (profile -> slices), `spec.disruption.evictionAllowed`,
//!   `spec.disruption.doNotDisruptAnnotations[]`, `spec.solver.timeLimitMs`,
//!   `spec.solver.maxGpusChanged`, `spec.solver.maxNodesChanged`.
//!   (`disruption.maxNodesReconfiguring` limits rollout concurrency, not the plan.)

use std::collections::BTreeMap;

use geometer_solver::snapshot::{Gpu, Instance, Policy};
use serde_json::Value;

use super::AdapterError;

/// What a MigPolicy says, beyond the solver's policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyObject {
    pub name: String,
    pub policy: Policy,
    /// Empty: every node with MIG GPUs.
    pub node_selector: BTreeMap<String, String>,
    /// Empty: the defaults.
    pub do_not_disrupt: Vec<String>,
}

fn err(object: &str, field: &str, value: &Value, problem: &str) -> AdapterError {
    AdapterError::Field { object: object.to_string(), field: field.to_string(), value: value.to_string(), problem: problem.to_string() }
}

fn name_of(obj: &Value) -> String {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string()
}

/// GPUs of a MigNode's inventory.
pub fn mig_node_gpus(obj: &Value) -> Result<(String, Vec<Gpu>), AdapterError> {
    let name = name_of(obj);
    let object = format!("MigNode {name}");
    if name.is_empty() {
        return Err(err(&object, "metadata.name", &Value::Null, "a MigNode is named after its node"));
    }
    let mut gpus = Vec::new();
    let list = obj.pointer("/status/gpus").cloned().unwrap_or(Value::Array(vec![]));
    let Value::Array(list) = list else {
        return Err(err(&object, "status.gpus", &list, "expected a list"));
    };
    for (i, g) in list.iter().enumerate() {
        let at = format!("status.gpus[{i}]");
        let index = g
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| err(&object, &format!("{at}.index"), g.get("index").unwrap_or(&Value::Null), "expected a GPU index (0, 1, ...)"))?;
        let model = ["model", "product", "deviceId"]
            .iter()
            .find_map(|k| g.get(*k).and_then(Value::as_str))
            .ok_or_else(|| err(&object, &format!("{at}.model"), &Value::Null, "expected the GPU model (model, product or deviceId)"))?
            .to_string();
        let mut instances = Vec::new();
        for (j, inst) in g.get("instances").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let at = format!("{at}.instances[{j}]");
            let profile = inst
                .get("profile")
                .and_then(Value::as_str)
                .ok_or_else(|| err(&object, &format!("{at}.profile"), inst.get("profile").unwrap_or(&Value::Null), "expected a profile name"))?;
            let start = inst
                .get("start")
                .or_else(|| inst.pointer("/placement/start"))
                .and_then(Value::as_u64)
                .and_then(|v| u8::try_from(v).ok())
                .ok_or_else(|| err(&object, &format!("{at}.start"), inst.get("start").unwrap_or(&Value::Null), "expected the placement start (0-31)"))?;
            let pod = match inst.get("pod") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Object(o)) => match (o.get("namespace").and_then(Value::as_str), o.get("name").and_then(Value::as_str)) {
                    (Some(ns), Some(n)) => Some(format!("{ns}/{n}")),
                    _ => return Err(err(&object, &format!("{at}.pod"), &inst["pod"], "expected {namespace, name}")),
                },
                Some(other) => return Err(err(&object, &format!("{at}.pod"), other, "expected `namespace/name`")),
            };
            instances.push(Instance { profile: profile.to_string(), start, pod });
        }
        gpus.push(Gpu { index, model, instances });
    }
    Ok((name, gpus))
}

/// GPUs of a typed MigNode's inventory (what its agent read from NVML).
pub fn inventory(node: &crate::api::MigNode) -> Vec<Gpu> {
    let gpus = node.status.as_ref().map(|s| s.gpus.as_slice()).unwrap_or_default();
    gpus.iter()
        .map(|g| Gpu {
            index: g.index,
            model: g.model.clone(),
            instances: g
                .instances
                .iter()
                .map(|i| Instance { profile: i.profile.clone(), start: i.start, pod: i.pod.clone() })
                .collect(),
        })
        .collect()
}

/// A MigPolicy object.
pub fn mig_policy(obj: &Value) -> Result<PolicyObject, AdapterError> {
    let name = name_of(obj);
    let object = format!("MigPolicy {name}");
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let mut out = PolicyObject { name, ..PolicyObject::default() };
    let strings = |v: Option<&Value>, field: &str| -> Result<Vec<String>, AdapterError> {
        match v {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(str::to_string).ok_or_else(|| err(&object, field, x, "expected a string")))
                .collect(),
            Some(other) => Err(err(&object, field, other, "expected a list of strings")),
        }
    };
    let count = |v: Option<&Value>, field: &str| -> Result<Option<u32>, AdapterError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x.as_u64().and_then(|n| u32::try_from(n).ok()).map(Some).ok_or_else(|| err(&object, field, x, "expected a non-negative integer")),
        }
    };
    if let Some(exprs) = spec.pointer("/nodeSelector/matchExpressions").filter(|e| e.as_array().is_some_and(|a| !a.is_empty())) {
        return Err(err(&object, "spec.nodeSelector.matchExpressions", exprs, "not supported by `geometer plan` yet; use matchLabels"));
    }
    let selector = spec.get("nodeSelector").map(|s| if s.get("matchLabels").is_some() || s.get("matchExpressions").is_some() {
        s.get("matchLabels").unwrap_or(&Value::Null)
    } else {
        s
    });
    if let Some(sel) = selector.filter(|s| !s.is_null()) {
        let Value::Object(map) = sel else { return Err(err(&object, "spec.nodeSelector", sel, "expected a map of labels")) };
        for (k, v) in map {
            let v = v.as_str().ok_or_else(|| err(&object, &format!("spec.nodeSelector.{k}"), v, "expected a string"))?;
            out.node_selector.insert(k.clone(), v.to_string());
        }
    }
    out.policy.allowed_profiles = strings(spec.get("allowedProfiles"), "spec.allowedProfiles")?;
    if let Some(Value::Object(map)) = spec.get("headroom") {
        for (k, v) in map {
            let n = count(Some(v), &format!("spec.headroom.{k}"))?.unwrap_or(0);
            out.policy.headroom.insert(k.clone(), n);
        }
    } else if let Some(h) = spec.get("headroom").filter(|h| !h.is_null()) {
        return Err(err(&object, "spec.headroom", h, "expected a map profile -> slices"));
    }
    let disruption = spec.get("disruption").cloned().unwrap_or(Value::Null);
    match disruption.get("evictionAllowed") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => out.policy.eviction_allowed = *b,
        Some(other) => return Err(err(&object, "spec.disruption.evictionAllowed", other, "expected true or false")),
    }
    out.do_not_disrupt = strings(disruption.get("doNotDisruptAnnotations"), "spec.disruption.doNotDisruptAnnotations")?;
    let solver = spec.get("solver").cloned().unwrap_or(Value::Null);
    out.policy.max_gpus_changed = count(solver.get("maxGpusChanged"), "spec.solver.maxGpusChanged")?;
    out.policy.max_nodes_changed = count(solver.get("maxNodesChanged"), "spec.solver.maxNodesChanged")?;
    out.policy.time_limit_ms = count(solver.get("timeLimitMs"), "spec.solver.timeLimitMs")?.map(u64::from);
    if out.policy.time_limit_ms == Some(0) {
        return Err(err(&object, "spec.solver.timeLimitMs", &Value::from(0), "must be positive"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_mig_node_inventory() {
        let obj: Value = serde_json::json!({
            "kind": "MigNode", "metadata": {"name": "n1"},
            "status": {"gpus": [{"index": 0, "model": "A100-40GB", "instances": [
                {"profile": "3g.20gb", "start": 4, "pod": "ml/a"},
                {"profile": "1g.5gb", "placement": {"start": 0}, "pod": {"namespace": "ml", "name": "b"}}]}]}
        });
        let (name, gpus) = mig_node_gpus(&obj).unwrap();
        assert_eq!(name, "n1");
        assert_eq!(gpus[0].instances[0].pod.as_deref(), Some("ml/a"));
        assert_eq!(gpus[0].instances[1].start, 0);
        assert_eq!(gpus[0].instances[1].pod.as_deref(), Some("ml/b"));
    }

    #[test]
    fn errors_name_field_and_value() {
        let obj: Value = serde_json::json!({"kind": "MigNode", "metadata": {"name": "n1"},
            "status": {"gpus": [{"index": 0, "model": "A100-40GB", "instances": [{"profile": "1g.5gb", "start": "x"}]}]}});
        let e = mig_node_gpus(&obj).unwrap_err().to_string();
        assert!(e.contains("status.gpus[0].instances[0].start"), "{e}");
        let obj: Value = serde_json::json!({"kind": "MigPolicy", "metadata": {"name": "p"},
            "spec": {"disruption": {"evictionAllowed": "yes"}}});
        let e = mig_policy(&obj).unwrap_err().to_string();
        assert!(e.contains("spec.disruption.evictionAllowed") && e.contains("yes"), "{e}");
    }

    #[test]
    fn reads_a_policy() {
        let obj: Value = serde_json::json!({"kind": "MigPolicy", "metadata": {"name": "p"},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "mig"}}, "allowedProfiles": ["1g.10gb"],
                     "headroom": {"1g.10gb": 2}, "disruption": {"evictionAllowed": true, "maxNodesReconfiguring": 1},
                     "solver": {"timeLimitMs": 2000, "maxNodesChanged": 1}}});
        let p = mig_policy(&obj).unwrap();
        assert_eq!(p.node_selector["pool"], "mig");
        assert!(p.policy.eviction_allowed);
        assert_eq!(p.policy.max_nodes_changed, Some(1));
        assert_eq!(p.policy.time_limit_ms, Some(2000));
        assert_eq!(p.policy.headroom["1g.10gb"], 2);
    }
}
