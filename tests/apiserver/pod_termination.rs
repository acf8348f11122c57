//! Graceful pod deletion, as kube-apiserver does it once kubelets run: a bound pod that has not
//! ended is only marked terminating (deletionTimestamp its grace period ahead) until its
//! kubelet deletes it with `gracePeriodSeconds: 0`; unbound and ended pods go at once; an
//! eviction is a graceful delete too, and a terminating pod counts against its budget.

use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, EvictParams, Preconditions};
use serde_json::json;

fn pod(name: &str, node: Option<&str>, phase: &str) -> Pod {
    let mut spec =
        json!({"containers": [{"name": "main", "image": "busybox:1"}], "terminationGracePeriodSeconds": 45});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": spec,
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap()
}

fn graceful() -> (ApiServer, Api<Pod>) {
    let server = ApiServer::new();
    server.set_graceful_pod_deletion(true);
    let pods = Api::default_namespaced(server.client());
    (server, pods)
}

#[tokio::test]
async fn a_bound_pod_terminates_until_its_kubelet_deletes_it() {
    let (server, pods) = graceful();
    server.seed(&pod("web-1", Some("n1"), "Running")).unwrap();
    let marked = pods.delete("web-1", &DeleteParams::default()).await.unwrap();
    let left = marked.left().expect("the pod is still there, marked");
    assert_eq!(left.metadata.deletion_grace_period_seconds, Some(45), "its own grace period");
    assert!(left.metadata.deletion_timestamp.is_some());
    assert!(pods.get("web-1").await.is_ok(), "terminating, not gone");
    // A second delete changes nothing; the kubelet's final delete (grace 0, this uid) removes it.
    pods.delete("web-1", &DeleteParams::default()).await.unwrap();
    let uid = left.metadata.uid.clone();
    let last = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid, resource_version: None }),
        ..DeleteParams::default()
    };
    pods.delete("web-1", &last).await.unwrap();
    assert!(pods.get_opt("web-1").await.unwrap().is_none());
}

#[tokio::test]
async fn unbound_and_ended_pods_go_at_once_and_evictions_terminate() {
    let (server, pods) = graceful();
    server.seed(&pod("pending", None, "Pending")).unwrap();
    server.seed(&pod("done", Some("n1"), "Succeeded")).unwrap();
    server.seed(&pod("running", Some("n1"), "Running")).unwrap();
    for name in ["pending", "done"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
        assert!(pods.get_opt(name).await.unwrap().is_none(), "{name} is gone at once");
    }
    pods.evict("running", &EvictParams::default()).await.unwrap();
    let evicted = pods.get("running").await.unwrap();
    assert!(evicted.metadata.deletion_timestamp.is_some(), "an eviction is a graceful delete");
    // Evicting a pod that is already terminating succeeds and changes nothing.
    pods.evict("running", &EvictParams::default()).await.unwrap();
    assert_eq!(
        pods.get("running").await.unwrap().metadata.deletion_timestamp,
        evicted.metadata.deletion_timestamp
    );
}

#[tokio::test]
async fn without_kubelets_pods_go_at_once() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    server.seed(&pod("web-1", Some("n1"), "Running")).unwrap();
    pods.delete("web-1", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("web-1").await.unwrap().is_none());
}
