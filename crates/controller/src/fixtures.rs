#![allow(clippy::unwrap_used)] // test code
//! API scenarios as data, for the controller's unit tests: each builder states one object the
//! way `kubectl get -o yaml` would show it, with only the fields that matter.

use crate::adapter::PodView;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use geometer_api::{MigNode, MigPlan, MigPolicy};

pub(crate) fn policy(name: &str, mode: &str) -> MigPolicy {
    serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy",
        "metadata": {"name": name, "generation": 1, "resourceVersion": "10"},
        "spec": {"mode": mode, "stabilisationSeconds": 0, "nodeSelector": {"matchLabels": {"pool": name}}}
    }))
    .expect("policy fixture")
}

/// An instance: `(profile, start, pod using it)`.
pub(crate) type Inst<'a> = (&'a str, u8, Option<&'a str>);

/// A MigNode whose agent is Ready on its spec generation, with GPUs `(index, instances)`.
pub(crate) fn mignode(
    name: &str,
    generation: i64,
    plan: Option<&str>,
    gpus: &[(u32, &[Inst<'_>])],
) -> MigNode {
    let inventory: Vec<Value> = gpus
        .iter()
        .map(|(index, instances)| {
            json!({
                "index": index, "uuid": format!("GPU-{name}-{index}"), "model": "H100-80GB",
                "pciDeviceId": "0x233010DE", "migMode": {"current": true, "pending": true},
                "instances": instances.iter().enumerate().map(|(i, (profile, start, pod))| json!({
                    "profile": profile, "start": start, "size": 1, "gpuInstanceId": i, "pod": pod
                })).collect::<Vec<_>>()
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode",
        "metadata": {"name": name, "generation": generation, "resourceVersion": format!("{generation}0")},
        "spec": {"plan": plan, "gpus": []},
        "status": {"gpus": inventory, "gpuCount": gpus.len(), "phase": "Ready", "observedGeneration": generation}
    }))
    .expect("mignode fixture")
}

/// The same MigNode with the agent in another phase; `Failed` gets a Failed condition.
pub(crate) fn in_phase(mut node: MigNode, phase: &str, message: &str) -> MigNode {
    let mut status = serde_json::to_value(node.status.take().unwrap_or_default()).unwrap();
    status["phase"] = json!(phase);
    if phase == "Failed" {
        status["conditions"] = json!([{
            "type": "Failed", "status": "True", "reason": "DrainTimeout", "message": message,
            "lastTransitionTime": "2025-01-01T00:00:00Z"
        }]);
    }
    node.status = Some(serde_json::from_value(status).unwrap());
    node
}

/// A plan that turns GPU 0 of `node` from one `7g.80gb` into seven `1g.10gb` for `pod`.
pub(crate) fn plan(name: &str, policy: &str, phase: &str, approved: bool, node: &str, pod: &str) -> MigPlan {
    let sevens: Vec<Value> = (0..7).map(|s| json!({"profile": "1g.10gb", "start": s})).collect();
    serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlan",
        "metadata": {"name": name, "resourceVersion": "20", "uid": format!("uid-{name}")},
        "spec": {
            "policy": policy, "approved": approved,
            "nodes": [{"node": node, "gpus": [{
                "index": 0, "model": "H100-80GB",
                "from": [{"profile": "7g.80gb", "start": 0}], "to": sevens,
                "operations": {"destroy": [{"profile": "7g.80gb", "start": 0}], "create": sevens}
            }]}],
            "evictions": [],
            "demand": {"met": [{"pod": pod, "profile": "1g.10gb", "node": node}], "unmet": []},
            "objective": 1.0, "solveMs": 3,
            "summary": {"podsHelped": 1, "podsUnmet": 0, "gpusChanged": 1, "nodesChanged": 1, "evictions": 0}
        },
        "status": {"phase": phase}
    }))
    .expect("plan fixture")
}

/// A pod: pending when `node` is None, else bound there.
pub(crate) fn pod(namespace: &str, name: &str, node: Option<&str>) -> PodView {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x",
            "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
        "status": {"phase": "Pending"}
    }))
    .expect("pod fixture")
}

/// A pending pod the scheduler marked `Unschedulable`: demand for a `profile` slice.
pub(crate) fn unschedulable(namespace: &str, name: &str, profile: &str) -> PodView {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "main", "image": "x",
            "resources": {"limits": {format!("nvidia.com/mig-{profile}"): "1"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .expect("pod fixture")
}

/// A schedulable node with 64 CPUs and 512 GiB in `pool`.
pub(crate) fn node(name: &str, pool: &str) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": pool}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}
    }))
    .expect("node fixture")
}

pub(crate) fn by_name(nodes: Vec<MigNode>) -> BTreeMap<String, Arc<MigNode>> {
    nodes.into_iter().map(|n| (n.metadata.name.clone().unwrap(), Arc::new(n))).collect()
}
