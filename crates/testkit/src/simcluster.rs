//! Shared set-up for tests on the simulated cluster.
#![allow(dead_code)]

use geometer_apiserver::ApiServer;
use geometer_simcluster::{ClusterSpec, SimCluster};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

pub const NS: &str = "ml";

/// An API server with Geometer's CRDs and the `ml` namespace, and the cluster on it.
pub async fn cluster(spec: &ClusterSpec) -> (ApiServer, SimCluster) {
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).expect("CRD");
    }
    server
        .seed(&serde_json::from_value::<Namespace>(json!({"metadata": {"name": NS}})).unwrap())
        .expect("namespace");
    let cluster = SimCluster::start(&server, spec).await.expect("simulated cluster starts");
    (server, cluster)
}

pub async fn create(server: &ApiServer, pod: Pod) -> Pod {
    Api::<Pod>::namespaced(server.client(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

pub use crate::wait::wait_for;

pub fn pod(server: &ApiServer, name: &str) -> Pod {
    server.object::<Pod>(NS, name).unwrap_or_else(|| panic!("pod {name} exists"))
}

pub fn phase(server: &ApiServer, name: &str) -> Option<String> {
    server.object::<Pod>(NS, name).and_then(|p| p.status?.phase)
}

pub fn node_name(server: &ApiServer, name: &str) -> Option<String> {
    server.object::<Pod>(NS, name).and_then(|p| p.spec?.node_name)
}

/// `(reason, message)` of a pod's PodScheduled condition when it is False.
pub fn unschedulable(server: &ApiServer, name: &str) -> Option<(String, String)> {
    let pod = server.object::<Pod>(NS, name)?;
    let c = pod.status?.conditions?.into_iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some((c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
}

/// MIG resources in a node's allocatable that are above 0.
pub fn mig_allocatable(server: &ApiServer, node: &str) -> std::collections::BTreeMap<String, String> {
    server
        .object::<Node>("", node)
        .and_then(|n| n.status?.allocatable)
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| geometer_api::resources::is_mig_resource(k) && v.0 != "0")
        .map(|(k, v)| (k, v.0))
        .collect()
}
