//! What the scenarios share: the `geometer` binary under test and the clusters they start.

use std::path::Path;

use geometer_api::MigPolicy;
use geometer_api::PolicyMode;
use geometer_simcluster::{ClusterSpec, MigPod, NodeSpec};
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{RealCluster, NS};
use geometer_testkit::wait::wait_until;

pub(crate) const WHOLE: &[(&str, u8)] = &[("7g.80gb", 0)];
pub(crate) const HALVES: &[(&str, u8)] = &[("3g.40gb", 0), ("3g.40gb", 4)];

pub(crate) fn geometer() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_geometer"))
}

pub(crate) fn two_nodes() -> ClusterSpec {
    ClusterSpec::new(vec![
        NodeSpec::new("gpu-1", "H100-80GB", 2, WHOLE),
        NodeSpec::new("gpu-2", "H100-80GB", 2, WHOLE),
    ])
}

/// The cluster with its agents and one controller running; `None` when the test is skipped.
pub(crate) async fn operator(test: &str, spec: &ClusterSpec, policy: &MigPolicy) -> Option<RealCluster> {
    let mut k8s = RealCluster::start(test, geometer(), spec, policy).await?;
    k8s.start_agents();
    k8s.start_controller("controller-0");
    Some(k8s)
}

/// The pods of `app` once `count` of them run: (name, uid, node).
pub(crate) async fn running(k8s: &RealCluster, app: &str, count: usize) -> Vec<(String, String, String)> {
    wait_until(
        &format!("{count} pod(s) of {app} running"),
        || async {
            k8s.check_alive();
            let pods = k8s.running_of(app).await;
            (pods.len() == count).then_some(pods)
        },
        || k8s.logs(),
    )
    .await
}

/// One node, two H100s split in halves, a 3g pod (each its own Deployment) on the first half of
/// each GPU and the second halves free; then a Deployment wanting a whole GPU. Only moving one
/// half-GPU pod to the other GPU's free half makes room, so a plan with eviction evicts unless
/// the pods are protected. Returns the uids of the pods of `a` and `c`.
pub(crate) async fn fragmented(test: &str, protected: bool) -> Option<(RealCluster, Vec<String>)> {
    let spec = ClusterSpec::new(vec![NodeSpec::new("gpu-1", "H100-80GB", 2, HALVES)]);
    let k8s = operator(test, &spec, &policy(PolicyMode::Auto, true)).await?;
    for app in ["a", "b", "c", "d"] {
        let mut pod = MigPod::new(NS, app).slice("3g.40gb", 1);
        if protected {
            pod = pod.annotation("karpenter.sh/do-not-disrupt", "true");
        }
        k8s.deploy(app, 1, pod.build()).await;
        running(&k8s, app, 1).await;
    }
    k8s.delete_deployment("b").await;
    k8s.delete_deployment("d").await;
    let mut uids = Vec::new();
    for app in ["a", "c"] {
        uids.push(running(&k8s, app, 1).await[0].1.clone());
    }
    k8s.deploy("whole", 1, MigPod::new(NS, "whole").slice("7g.80gb", 1).build()).await;
    Some((k8s, uids))
}
