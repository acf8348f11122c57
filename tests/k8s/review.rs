//! Plans reviewed with the real kubectl: DryRun publishes and never touches a GPU; Approve
//! waits for `kubectl patch ... approved: true`, then applies.

use geometer_api::{MigPlanPhase, PolicyMode};
use geometer_simcluster::MigPod;
use geometer_testkit::control_plane::Identity;
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{RealCluster, NS};
use geometer_testkit::wait::wait_until;

use crate::support::{operator, two_nodes};

async fn first_plan(k8s: &RealCluster) -> String {
    let plan =
        wait_until("a proposed plan", || async { k8s.plans().await.into_iter().next() }, || k8s.logs()).await;
    plan.metadata.name.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_publishes_a_plan_kubectl_shows_and_leaves_the_gpus_alone() {
    let Some(k8s) = operator("dry run", &two_nodes(), &policy(PolicyMode::DryRun, false)).await else {
        return;
    };
    k8s.deploy("small", 1, MigPod::new(NS, "small").slice("1g.10gb", 1).build()).await;
    let name = first_plan(&k8s).await;
    // The lifecycle says why the plan is not applied a pass after publishing it.
    let explained = || async {
        let plans = k8s.plans().await;
        let message = plans.iter().find_map(|p| p.status.as_ref()?.message.clone())?;
        message.starts_with("DryRun:").then_some(())
    };
    wait_until("the plan's status explains DryRun", explained, || k8s.logs()).await;
    let table = k8s.cp.kubectl(Identity::Admin, &["get", "migplans"]).unwrap();
    assert!(table.contains("PODS-HELPED") && table.contains(&name), "{table}");
    let described = k8s.cp.kubectl(Identity::Admin, &["describe", "migplan", &name]).unwrap();
    assert!(described.contains("1g.10gb") && described.contains("DryRun"), "{described}");
    // The compact review comes first, before the spec's lists of every instance.
    let review = described.find("geometer.dev/review").expect("the review annotation");
    let spec = described.find("Spec:").expect("the spec");
    assert!(review < spec, "{described}");
    assert!(described[review..spec].contains("gets 1g.10gb on gpu-"), "{described}");
    for node in ["gpu-1", "gpu-2"] {
        for gpu in 0..2 {
            assert_eq!(k8s.geometry(node, gpu), ["7g.80gb@0"], "DryRun never changes a GPU");
        }
    }
    assert!(k8s.running().await.is_empty());
    assert_eq!(k8s.plans().await[0].phase(), MigPlanPhase::Proposed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_waits_for_kubectl_patch_then_applies() {
    let Some(k8s) = operator("approve", &two_nodes(), &policy(PolicyMode::Approve, false)).await else {
        return;
    };
    k8s.deploy("small", 1, MigPod::new(NS, "small").slice("1g.10gb", 1).build()).await;
    let name = first_plan(&k8s).await;
    assert!(k8s.running().await.is_empty(), "nothing runs before the approval");
    let approval = r#"{"spec":{"approved":true}}"#;
    k8s.cp.kubectl(Identity::Admin, &["patch", "migplan", &name, "--type=merge", "-p", approval]).unwrap();
    wait_until("the pod running", || async { (k8s.running().await.len() == 1).then_some(()) }, || k8s.logs())
        .await;
    let done = k8s.succeeded_plan().await;
    assert_eq!(done.metadata.name.as_deref(), Some(name.as_str()));
}
