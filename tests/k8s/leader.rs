//! Two controller replicas with leader election on the real API server: the leader is killed
//! with SIGKILL, the other takes the Lease over and carries out the next demand shift.

use geometer_api::PolicyMode;
use geometer_simcluster::MigPod;
use geometer_testkit::control_plane::GEOMETER_NAMESPACE;
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{RealCluster, NS};
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::support::{geometer, two_nodes};

async fn holder(k8s: &RealCluster) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(k8s.admin.clone(), GEOMETER_NAMESPACE);
    leases.get_opt("geometer-controller").await.ok()??.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_replica_takes_over_when_the_leader_is_killed() {
    let policy = policy(PolicyMode::Auto, false);
    let Some(mut k8s) = RealCluster::start("leader election", geometer(), &two_nodes(), &policy).await else {
        return;
    };
    k8s.start_agents();
    k8s.start_controller("controller-0");
    k8s.start_controller("controller-1");
    let leader = wait_until("a leader", || async { holder(&k8s).await }, || k8s.logs()).await;
    let follower = if leader == "controller-0" { "controller-1" } else { "controller-0" };
    k8s.kill_controller(&leader);

    k8s.deploy("small", 2, MigPod::new(NS, "small").slice("1g.10gb", 1).build()).await;
    wait_until(
        "both pods running",
        || async { (k8s.running().await.len() == 2).then_some(()) },
        || k8s.logs(),
    )
    .await;
    assert_eq!(holder(&k8s).await.as_deref(), Some(follower), "the follower holds the lease");
    k8s.succeeded_plan().await;
}
