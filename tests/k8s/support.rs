//! What the scenarios share: the `geometer` binary under test and the clusters they start.

use std::path::Path;

use geometer_api::MigPolicy;
use geometer_simcluster::{ClusterSpec, NodeSpec};
use geometer_testkit::real_cluster::RealCluster;
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

/// Waits until `replicas` pods of `app` run.
pub(crate) async fn running(k8s: &RealCluster, app: &str, replicas: usize) {
    wait_until(
        &format!("{replicas} pods of {app} running"),
        || async {
            k8s.check_alive();
            (k8s.running_of(app).await.len() == replicas).then_some(())
        },
        || k8s.logs(),
    )
    .await;
}
