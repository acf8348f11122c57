//! `geometer agent run` as a process: simulated GPUs, the in-memory API server over HTTP and a
//! kubeconfig, as a demo or a person at a terminal would run it.

use std::collections::BTreeMap;
use std::time::Duration;

use geometer_api::{MigNode, MigNodePhase};
use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

const NODE: &str = "sim-node";

fn plugin_pod(n: u32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("nvidia-device-plugin-{n}"), "namespace": "gpu-operator",
                     "labels": {"app": "nvidia-device-plugin-daemonset"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "plugin", "image": "nvidia/k8s-device-plugin"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap()
}

use geometer_testkit::wait::wait_for;

/// Plays the device plugin's DaemonSet: when its pod is evicted, advertise what the agent's
/// inventory shows and start a new pod.
async fn device_plugin(server: ApiServer) {
    let mut n = 1;
    loop {
        let running =
            server.objects::<Pod>().iter().any(|p| p.metadata.namespace.as_deref() == Some("gpu-operator"));
        if !running {
            let mut counts: BTreeMap<String, u64> = BTreeMap::new();
            if let Some(status) = server.object::<MigNode>("", NODE).and_then(|m| m.status) {
                for i in status.gpus.iter().flat_map(|g| &g.instances).filter(|i| i.uuid.is_some()) {
                    *counts.entry(format!("nvidia.com/mig-{}", i.profile)).or_default() += 1;
                }
            }
            let alloc: serde_json::Map<_, _> =
                counts.into_iter().map(|(k, v)| (k, json!(v.to_string()))).collect();
            Api::<Node>::all(server.client())
                .patch_status(
                    NODE,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"allocatable": alloc}})),
                )
                .await
                .unwrap();
            server.seed(&plugin_pod(n)).unwrap();
            n += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_with_simulated_gpus_carries_out_a_spec() {
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).unwrap();
    }
    server.seed(&serde_json::from_value::<Node>(json!({"metadata": {"name": NODE}})).unwrap()).unwrap();
    server.seed(&plugin_pod(0)).unwrap();
    let (_addr, _http) = server.serve_http("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();

    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_geometer"))
        .args(["agent", "run", "--node", NODE, "--simulate", "H100-80GB:2", "--poll-interval", "50ms"])
        .arg(format!("--metrics-addr={metrics_addr}"))
        .env("KUBECONFIG", &kubeconfig)
        .env("GEOMETER_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let plugin = tokio::spawn(device_plugin(server.clone()));

    // The agent creates its MigNode and publishes what it found.
    let status = wait_for("the agent's MigNode", || {
        let s = server.object::<MigNode>("", NODE)?.status?;
        (s.phase == MigNodePhase::Ready).then_some(s)
    })
    .await;
    assert_eq!(status.gpu_count, 2);
    assert!(status
        .gpus
        .iter()
        .all(|g| g.model == "H100-80GB" && g.mig_mode.current && g.instances.is_empty()));

    let api: Api<MigNode> = Api::all(server.client());
    let spec = json!({"spec": {"plan": "by-hand", "gpus": [{"index": 1, "geometry": [
        {"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}]}});
    let generation = api
        .patch(NODE, &PatchParams::default(), &Patch::Merge(spec))
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    let status = wait_for("the change to be Ready", || {
        let m = server.object::<MigNode>("", NODE)?;
        let s = m.status?;
        (s.phase == MigNodePhase::Ready && s.observed_generation == Some(generation)).then_some(s)
    })
    .await;
    let placed: Vec<String> = status.gpus[1].instances.iter().map(|i| i.placed().to_string()).collect();
    assert_eq!(placed, vec!["3g.40gb@0", "3g.40gb@4"]);
    assert!(status.gpus[0].instances.is_empty(), "a GPU the spec does not name is left alone");
    let node = server.object::<Node>("", NODE).unwrap();
    let alloc = node.status.unwrap().allocatable.unwrap();
    assert_eq!(alloc["nvidia.com/mig-3g.40gb"].0, "2");
    // The agent's /metrics counts the steps it took.
    let scrape = http_get(metrics_addr, "/metrics").await;
    assert!(scrape.contains("geometer_agent_steps_total{action=\"CreateGpuInstance\"} 2"), "{scrape}");
    assert!(scrape.contains("geometer_agent_unreadable_objects{kind=\"MigNode\"} 0"), "{scrape}");

    agent.kill().await.unwrap();
    plugin.abort();
}

/// The body of a plain HTTP/1.1 GET.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    raw.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

#[test]
fn a_bad_simulate_flag_is_bad_input_naming_the_flag() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_geometer"))
        .args(["agent", "run", "--node", NODE, "--simulate", "H100-80GB:none"])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--simulate") && stderr.contains("none"), "{stderr}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_geometer"))
        .args(["agent", "run", "--node", NODE, "--simulate", "Z9000:1"])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Z9000"));
}
