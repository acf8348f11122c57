//! A demand shift on the real control plane: pods of a Deployment wait for a slice no GPU has,
//! the controller plans, the agent cordons, repartitions and gets the new slices advertised,
//! and the real scheduler places the waiting pods on them.

use geometer_api::PolicyMode;
use geometer_simcluster::MigPod;
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::NS;
use geometer_testkit::wait::wait_until;

use crate::support::{operator, two_nodes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_waiting_for_slices_runs_after_the_repartition() {
    let Some(k8s) = operator("demand shift", &two_nodes(), &policy(PolicyMode::Auto, false)).await else {
        return;
    };
    k8s.deploy("small", 4, MigPod::new(NS, "small").slice("1g.10gb", 1).build()).await;

    let running = wait_until(
        "four pods of the Deployment running",
        || async {
            k8s.check_alive();
            let running = k8s.running().await;
            (running.len() == 4).then_some(running)
        },
        || k8s.logs(),
    )
    .await;
    assert!(running.iter().all(|p| p.starts_with("small-")), "{running:?}");
    k8s.succeeded_plan().await;
    // Only as many GPUs changed as the pods needed (7 x 1g.10gb fit on one GPU).
    let changed: usize = ["gpu-1", "gpu-2"]
        .iter()
        .map(|n| (0..2).filter(|g| k8s.geometry(n, *g) != ["7g.80gb@0"]).count())
        .sum();
    assert_eq!(changed, 1, "one GPU repartitioned for four 1g.10gb pods");
    wait_until("nodes settled and uncordoned", || async { k8s.settled().await.then_some(()) }, || k8s.logs())
        .await;
    // The real server records who wrote what: every write names its field manager.
    let managers = k8s.field_managers().await;
    assert!(managers.contains(&("MigNode".into(), "geometer-agent".into(), "status".into())), "{managers:?}");
    assert!(
        managers.contains(&("MigPlan".into(), "geometer-controller".into(), "status".into())),
        "{managers:?}"
    );
    assert!(
        managers.contains(&("MigNode".into(), "geometer-controller".into(), String::new())),
        "{managers:?}"
    );
    assert!(!managers.iter().any(|(_, m, _)| m == "unknown"), "{managers:?}");
}

/// A Job whose pods wait for slices: they run on the new ones, end `Succeeded` when their time
/// is up, and the real Job controller marks the Job Complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_for_slices_completes_after_the_repartition() {
    let Some(k8s) = operator("job", &two_nodes(), &policy(PolicyMode::Auto, false)).await else {
        return;
    };
    let pod = MigPod::new(NS, "batch").slice("2g.20gb", 1).run_seconds(2.0).build();
    k8s.run_job("batch", 3, pod).await;
    wait_until(
        "the Job Complete",
        || async {
            k8s.check_alive();
            k8s.job_condition("batch", "Complete").await.then_some(())
        },
        || k8s.logs(),
    )
    .await;
    let pods = k8s.pods_of("batch").await;
    let succeeded =
        pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"));
    assert_eq!(succeeded.count(), 3, "{pods:?}");
    assert!(!k8s.job_condition("batch", "Failed").await);
}
