//! `geometer plan` without `--snapshot` (`kubectl geometer plan`): what the controller would
//! plan now, read from a cluster (the in-memory API server over HTTP), writing nothing.

use std::process::{Command, Output};

use geometer_api::MigPlan;
use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::Namespace;
use serde_json::{json, Value};

fn seeded() -> ApiServer {
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).unwrap();
    }
    server.seed(&serde_json::from_value::<Namespace>(json!({"metadata": {"name": "ml"}})).unwrap()).unwrap();
    let node = |name: &str, pool: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"pool": pool}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}})
    };
    let mignode = |name: &str, phase: &str| {
        json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode", "metadata": {"name": name, "generation": 1},
        "spec": {"gpus": []}, "status": {"phase": phase, "observedGeneration": 1, "gpuCount": 1, "gpus": [{"index": 0, "uuid": format!("GPU-{name}"),
            "model": "H100-80GB", "pciDeviceId": "0x233010DE", "migMode": {"current": true, "pending": true},
            "instances": [{"profile": "7g.80gb", "start": 0, "size": 8, "gpuInstanceId": 0}]}]}})
    };
    for object in [
        node("gpu-a", "pool"),
        node("gpu-b", "pool"),
        mignode("gpu-a", "Ready"),
        mignode("gpu-b", "Draining"),
        json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "pool"},
            "spec": {"mode": "DryRun", "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["pool"]}]}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer-0", "namespace": "ml"},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
    ] {
        server.seed_value(object).unwrap();
    }
    server
}

async fn geometer(server: &ApiServer, args: &[&str]) -> Output {
    let (_addr, _serving) = server.serve_http("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_geometer"))
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_each_policy_from_the_cluster_and_writes_nothing() {
    let server = seeded();
    let writes_before = server.requests().iter().filter(|r| r.method != "GET").count();
    let out = geometer(&server, &["plan", "-o", "json"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pool = &results[0];
    assert_eq!(pool["policy"], "pool");
    assert_eq!(pool["mode"], "DryRun");
    assert!(pool["excluded"]["gpu-b"].as_str().unwrap().contains("reconfiguring"), "{pool}");
    let pods = pool["plan"]["pods"].as_array().unwrap();
    assert_eq!(pods[0]["pod"], "ml/infer-0");
    assert_eq!(pods[0]["node"], "gpu-a", "the only settled node gets the slice");
    let writes_after = server.requests().iter().filter(|r| r.method != "GET").count();
    assert_eq!(writes_before, writes_after, "read-only");
    assert!(server.objects::<MigPlan>().is_empty());

    let table = geometer(&server, &["plan"]).await;
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("== MigPolicy pool (DryRun) ==") && text.contains("left out: node gpu-b"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_without_a_snapshot_are_refused() {
    let server = seeded();
    let out = geometer(&server, &["plan", "--policy", "examples/policy-no-eviction.yaml"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policy FILE goes with --snapshot"));
    let out = geometer(&server, &["plan", "--time-limit-ms", "0"]).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--time-limit-ms") && stderr.contains("0 is out of range: give 1 to 600000"),
        "{stderr}"
    );
}
