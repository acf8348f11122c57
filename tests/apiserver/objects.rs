//! Objects the API-server tests create, and the status code of a refused call.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};

pub(crate) fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}]},
    }))
    .unwrap()
}

pub(crate) fn running_pod(name: &str, node: &str, labels: Value, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap()
}

pub(crate) fn node(name: &str) -> Node {
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}}),
    )
    .unwrap()
}

pub(crate) fn api_code(err: kube::Error) -> u16 {
    match err {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error status, got {other:?}"),
    }
}

pub(crate) fn pdb(name: &str, spec: Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"}, "spec": spec})).unwrap()
}
