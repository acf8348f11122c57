//! What a kubelet does to stay alive in a real control plane: renew the node's Lease in
//! `kube-node-lease` every 10 seconds (its lease lasts 40) and re-post the Ready condition now
//! and then, so that the node-lifecycle controller neither taints the node `not-ready` nor
//! evicts its pods (kubernetes/kubernetes `pkg/kubelet/nodelease` and
//! `pkg/controller/nodelifecycle/node_lifecycle_controller.go`).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde_json::json;

use super::objects::now;

pub(crate) const LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_SECONDS: i32 = 40;
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// Node status is re-posted every this many lease renewals (the kubelet's report frequency is
/// five minutes when nothing changes; a minute keeps the condition fresh for readers).
const STATUS_EVERY: u32 = 6;

fn lease_micros() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

async fn renew(client: &kube::Client, node: &Node) -> Result<(), kube::Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let renewed = json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": lease_micros()}});
    match leases.patch(&name, &PatchParams::default(), &Patch::Merge(&renewed)).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let owner = node.controller_owner_ref(&()).map(|mut o| {
                o.controller = None;
                o
            });
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": owner.into_iter().collect::<Vec<_>>()},
                "spec": renewed["spec"],
            }))
            .map_err(kube::Error::SerdeError)?;
            leases.create(&PostParams::default(), &lease).await.map(|_| ())
        }
        other => other.map(|_| ()),
    }
}

async fn post_ready(client: &kube::Client, node: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "simulated kubelet is posting ready status", "lastHeartbeatTime": now()}]}});
    nodes.patch_status(node, &PatchParams::default(), &Patch::Strategic(&ready)).await.map(|_| ())
}

/// Keeps every node alive until aborted, each with its kubelet's client.
pub(crate) async fn run(nodes: Vec<(kube::Client, Node)>) {
    let mut ticks = 0u32;
    loop {
        for (client, node) in &nodes {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            if let Err(e) = renew(client, node).await {
                tracing::warn!(node = name, error = %e, "simulated kubelet could not renew its node lease");
            }
            if ticks % STATUS_EVERY == STATUS_EVERY - 1 {
                if let Err(e) = post_ready(client, name).await {
                    tracing::warn!(node = name, error = %e, "simulated kubelet could not post node status");
                }
            }
        }
        ticks = ticks.wrapping_add(1);
        tokio::time::sleep(RENEW_EVERY).await;
    }
}
