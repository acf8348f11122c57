//! `geometer demo --join` (what `make demo-k8s` runs): the demo's workload on the real control
//! plane, to its summary, with GPUs reconfigured and plans applied.

use std::process::Command;

use geometer_testkit::control_plane::{start_or_skip, ControlPlane, Identity};
use geometer_testkit::real_cluster::install;

use crate::support::geometer;

/// The number after `label` on the summary line that starts with it.
fn summary_number(text: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("{label}?\n{text}"));
    let rest = line.trim_start()[label.len()..].trim_start();
    rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap_or_else(|_| panic!("{line}"))
}

/// Runs `geometer demo --join` with `extra` flags on `cp` (deploy/base installed): the summary
/// says pods were submitted, GPUs reconfigured and a plan applied. Its text.
fn demo_reconfigures_gpus(cp: &ControlPlane, extra: &[&str]) -> String {
    install(cp);
    let state = cp.dir().join("demo-nodes");
    let out = Command::new(geometer())
        .arg("demo")
        .args(extra)
        .args(["--nodes", "2", "--duration", "60", "--speed", "6", "--tick", "2", "--join"])
        .arg(&state)
        .env("KUBECONFIG", cp.kubeconfig(Identity::Admin))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(summary_number(&text, "pods submitted") > 0, "{text}");
    assert!(summary_number(&text, "GPUs reconfigured") >= 1, "{text}");
    let plans = text.lines().find(|l| l.trim_start().starts_with("plans")).unwrap();
    assert!(!plans.contains(" 0 applied"), "{plans}\n{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_on_the_real_control_plane() {
    let Some(cp) = start_or_skip("demo on the real control plane").await else { return };
    let text = demo_reconfigures_gpus(&cp, &[]);

    // The demo's over-provisioned chat Deployment keeps running: `geometer recommend` on the
    // cluster says what its replicas use (the simulated NVML reports 7,000 MiB and 5%).
    let out = Command::new(geometer())
        .args(["recommend", "--min-samples", "3", "-o", "json"])
        .env("KUBECONFIG", cp.kubeconfig(Identity::Admin))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let recommendations = report["recommendations"].as_array().expect("recommendations");
    let chat = recommendations
        .iter()
        .find(|r| r["owner"]["name"] == "chat")
        .unwrap_or_else(|| panic!("the chat Deployment is recommended: {report}\n{text}"));
    assert_eq!(chat["owner"]["kind"], "Deployment");
    assert_eq!(chat["model"], "H100-80GB");
    assert_eq!(chat["peakMemoryMib"], 7_000, "{chat}");
    assert_eq!(chat["verdict"]["profile"], "1g.10gb", "{chat}");
}

/// `geometer demo --dra --join` (`make demo-k8s ARGS=--dra`): the same workload on nodes whose
/// GPUs NVIDIA's DRA driver advertises (static MIG): the pods' `nvidia.com/mig-*` and
/// `nvidia.com/gpu` requests are served through DeviceClasses naming them, and the GPUs are
/// reshaped as on device-plugin nodes, the driver's slices republished each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_reshapes_dra_nodes_on_the_real_control_plane() {
    use k8s_openapi::api::resource::v1::ResourceSlice;

    let Some(cp) = start_or_skip("demo on DRA nodes on the real control plane").await else { return };
    demo_reconfigures_gpus(&cp, &["--dra"]);

    let client = cp.client(Identity::Admin).await;
    let mignodes =
        kube::Api::<geometer_api::MigNode>::all(client.clone()).list(&Default::default()).await.unwrap();
    assert_eq!(mignodes.items.len(), 2);
    for node in &mignodes.items {
        let stack = node.status.as_ref().and_then(|s| s.device_stack);
        assert_eq!(stack, Some(geometer_api::DeviceStack::DraStaticMig), "{:?}", node.metadata.name);
    }
    let slices = kube::Api::<ResourceSlice>::all(client).list(&Default::default()).await.unwrap();
    let republished = slices.items.iter().filter(|s| s.spec.pool.generation > 1).count();
    assert!(
        republished >= 1,
        "a reshaped node's slice is republished: {:?}",
        slices.items.iter().map(|s| s.spec.pool.generation).collect::<Vec<_>>()
    );
}
