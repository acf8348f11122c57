//! Two controllers elect one leader on a Lease in the in-memory API server; when the leader
//! gives the lease up, the other takes over.

use std::time::Duration;

use geometer_apiserver::ApiServer;
use geometer_controller::{Leadership, LeaseSettings};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

fn settings(identity: &str) -> LeaseSettings {
    LeaseSettings { duration_seconds: 2, grace_seconds: 1, ..LeaseSettings::new("default", identity) }
}

/// Guards against a hang only; the test asserts who leads, never how fast.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn two_controllers_elect_one_leader_and_hand_over_on_release() {
    let server = ApiServer::new();
    let mut a = Leadership::join(server.client(), &settings("controller-a")).await.expect("a joins");
    let mut b = Leadership::join(server.client(), &settings("controller-b")).await.expect("b joins");

    let winner = tokio::time::timeout(PATIENCE, async {
        tokio::select! {
            r = a.acquired() => { r.expect("a's election runs"); "controller-a" }
            r = b.acquired() => { r.expect("b's election runs"); "controller-b" }
        }
    })
    .await
    .expect("someone leads");
    assert!(a.is_leader() ^ b.is_leader(), "exactly one leader");

    let lease =
        Api::<Lease>::namespaced(server.client(), "default").get("geometer-controller").await.unwrap();
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some(winner));

    let (leader, mut follower, follower_name) =
        if winner == "controller-a" { (a, b, "controller-b") } else { (b, a, "controller-a") };
    leader.release().await;
    tokio::time::timeout(PATIENCE, follower.acquired()).await.expect("follower takes over").unwrap();
    let lease =
        Api::<Lease>::namespaced(server.client(), "default").get("geometer-controller").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity).as_deref(), Some(follower_name));
    follower.release().await;
}

#[tokio::test]
async fn bad_lease_timing_is_refused_with_the_values() {
    let server = ApiServer::new();
    let bad = LeaseSettings { duration_seconds: 5, grace_seconds: 5, ..LeaseSettings::new("default", "x") };
    let err = Leadership::join(server.client(), &bad).await.err().expect("refused");
    assert_eq!(
        err.to_string(),
        "lease default/geometer-controller: duration_seconds (5) must be greater than grace_seconds (5) and both above 0"
    );
}
