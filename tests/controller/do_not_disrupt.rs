//! The planner reads do-not-disrupt annotations exactly as the agent's drain does: a duration
//! that has not run out, or a value that cannot be read, protects a running pod from being
//! planned for eviction; the same pod without the annotation (or with a protection that ran
//! out) is evicted to make room for a higher-priority pod.

use geometer_controller::adapter::{build_snapshot, parse_objects};
use geometer_solver::catalog::Catalog;
use geometer_solver::plan::PlanOptions;
use jiff::Timestamp;
use serde_json::{json, Value};

const NOW: &str = "2026-06-01T12:00:00Z";

/// One H100 node: GPU 0 holds a 1g.10gb used by `batch/etl` (priority 0), GPU 1 a 7g.80gb used
/// by `batch/render`, GPU 2 a 3g.40gb at start 4 used by `batch/other` (both always
/// do-not-disrupt). A priority-1000 pod waits for a 7g.80gb: only evicting `batch/etl` (which
/// can land again on GPU 2's free half) makes room for it.
fn cluster(etl_annotations: Value, etl_started: &str) -> String {
    let pod = |name: &str, profile: &str, priority: i32, node: Option<&str>| {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "batch", "creationTimestamp": "2026-06-01T00:00:00Z"},
            "spec": {"priority": priority, "containers": [{"name": "main", "image": "x",
                "resources": {"limits": {format!("nvidia.com/mig-{profile}"): "1"}}}]},
        });
        match node {
            Some(node) => {
                pod["spec"]["nodeName"] = json!(node);
                pod["status"] = json!({"phase": "Running", "startTime": "2026-06-01T00:00:00Z"});
            }
            None => {
                pod["status"] = json!({"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
            }
        }
        pod
    };
    let mut etl = pod("etl", "1g.10gb", 0, Some("h100"));
    etl["metadata"]["annotations"] = etl_annotations;
    etl["status"]["startTime"] = json!(etl_started);
    let protected = |name: &str, profile: &str| {
        let mut pod = pod(name, profile, 0, Some("h100"));
        pod["metadata"]["annotations"] = json!({KEY: "true"});
        pod
    };
    let gpu = |index: u32, profile: &str, start: u8, size: u8, pod: &str| {
        json!({"index": index, "uuid": format!("GPU-{index}"), "model": "H100-80GB", "pciDeviceId": "0x233010DE",
            "migMode": {"current": true, "pending": true},
            "instances": [{"profile": profile, "start": start, "size": size, "gpuInstanceId": 0, "pod": pod}]})
    };
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "h100", "labels": {"pool": "h100"}},
         "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}},
        {"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode", "metadata": {"name": "h100"}, "spec": {},
         "status": {"gpus": [gpu(0, "1g.10gb", 0, 1, "batch/etl"), gpu(1, "7g.80gb", 0, 8, "batch/render"),
             gpu(2, "3g.40gb", 4, 4, "batch/other")]}},
        {"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "p"},
         "spec": {"nodeSelector": {"matchLabels": {"pool": "h100"}}, "disruption": {"evictionAllowed": true}}},
        etl,
        protected("render", "7g.80gb"),
        protected("other", "3g.40gb"),
        pod("train", "7g.80gb", 1000, None),
    ]})
    .to_string()
}

/// The `namespace/name` of every pod the plan evicts.
fn evictions(etl_annotations: Value, etl_started: &str) -> Vec<String> {
    let objects = parse_objects(&cluster(etl_annotations, etl_started)).unwrap();
    let now: Timestamp = NOW.parse().unwrap();
    let built = build_snapshot(&objects, Catalog::builtin(), None, now).unwrap();
    let plan = geometer_solver::plan(&built.snapshot, Catalog::builtin(), &PlanOptions::default()).unwrap();
    plan.evictions.iter().map(|e| e.pod.to_string()).collect()
}

const KEY: &str = "geometer.dev/do-not-disrupt";

#[test]
fn an_unprotected_pod_is_evicted_for_a_higher_priority_one() {
    assert_eq!(evictions(json!({}), "2026-06-01T11:50:00Z"), ["batch/etl"]);
}

#[test]
fn a_duration_that_has_not_run_out_protects_the_pod() {
    // Started ten minutes before NOW, protected for an hour.
    assert_eq!(evictions(json!({KEY: "1h"}), "2026-06-01T11:50:00Z"), Vec::<String>::new());
    // The Karpenter key is honoured by default too.
    assert_eq!(
        evictions(json!({"karpenter.sh/do-not-disrupt": "30m"}), "2026-06-01T11:50:00Z"),
        Vec::<String>::new()
    );
}

#[test]
fn a_duration_that_ran_out_protects_no_more() {
    // Started two hours before NOW, protected for an hour.
    assert_eq!(evictions(json!({KEY: "1h"}), "2026-06-01T10:00:00Z"), ["batch/etl"]);
}

#[test]
fn an_unreadable_value_protects_the_pod() {
    assert_eq!(evictions(json!({KEY: "until friday"}), "2026-06-01T11:50:00Z"), Vec::<String>::new());
}

#[test]
fn false_protects_nothing() {
    assert_eq!(evictions(json!({KEY: "false"}), "2026-06-01T11:50:00Z"), ["batch/etl"]);
}
