//! Right-sizing on the real control plane: a Deployment of whole-GPU pods that use a sixth of
//! their GPUs is measured by the agents, `geometer recommend` names the slice and the patch,
//! and once the patch is applied the real Deployment controller's new pods land on slices the
//! planner created.

use geometer_api::PolicyMode;
use geometer_simcluster::MigPod;
use geometer_testkit::control_plane::Identity;
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{RealCluster, NS};
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::Api;

use crate::support::{geometer, operator, two_nodes};

/// Pods of Deployment `app` running, each asking for `resource`.
async fn running_on(k8s: &RealCluster, app: &str, resource: &str) -> usize {
    k8s.running_limits(app).await.iter().filter(|(_, limits)| limits.iter().any(|l| l == resource)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measured_whole_gpu_pods_are_recommended_a_slice_and_land_on_it_once_patched() {
    let Some(k8s) = operator("rightsizing", &two_nodes(), &policy(PolicyMode::Auto, false)).await else {
        return;
    };
    // A chat model using 7,000 MiB and 5% of an 80 GB GPU, asking for the whole GPU.
    k8s.deploy("chat", 2, MigPod::new(NS, "chat").gpus(1).uses(7_000, 5).build()).await;
    wait_until(
        "2 chat pods running on whole GPUs",
        || async { (running_on(&k8s, "chat", "nvidia.com/gpu").await == 2).then_some(()) },
        || k8s.logs(),
    )
    .await;
    wait_until(
        "the agents measured both pods 3 times",
        || async {
            let usage = k8s.usage().await;
            (usage.len() == 2 && usage.iter().all(|u| u.samples >= 3 && u.peak_memory_mib == 7_000))
                .then_some(())
        },
        || k8s.logs(),
    )
    .await;

    let out = std::process::Command::new(geometer())
        .args(["recommend", "--min-samples", "3", "-o", "json"])
        .env("KUBECONFIG", k8s.cp.kubeconfig(Identity::Admin))
        .output()
        .expect("geometer recommend runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let chat = &report["recommendations"][0];
    assert_eq!(chat["owner"]["kind"], "Deployment", "{report}");
    assert_eq!(chat["owner"]["name"], "chat");
    assert_eq!(chat["verdict"]["verdict"], "slice");
    assert_eq!(chat["verdict"]["profile"], "1g.10gb", "7,000 MiB + 20% fits the 1g.10gb slice");
    assert_eq!(report["gpusGivenBack"], 1, "two pods on one GPU's slices give one GPU back");
    let command = chat["verdict"]["patch"].as_str().expect("a patch");
    assert!(command.starts_with("kubectl patch deployment chat -n "), "{command}");

    // Apply exactly the JSON patch of the command.
    let json = command.split('\'').nth(1).expect("the patch between quotes");
    let patch: json_patch::Patch = serde_json::from_str(json).expect("a JSON patch");
    Api::<Deployment>::namespaced(k8s.admin.clone(), NS)
        .patch("chat", &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .expect("the recommended patch applies");
    wait_until(
        "2 chat pods running on 1g.10gb slices",
        || async {
            k8s.check_alive();
            (running_on(&k8s, "chat", "nvidia.com/mig-1g.10gb").await == 2).then_some(())
        },
        || k8s.logs(),
    )
    .await;
    assert!(k8s.pods_without_devices().is_empty());
}
