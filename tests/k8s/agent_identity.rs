//! One node's agent can act only on its own node: with deploy/base installed as a user installs
//! it, the agent of node `gpu-1` holds the ServiceAccount token of its pod there (a TokenRequest
//! bound to the pod, as the kubelet mounts it), and the real API server refuses it everything on
//! node `gpu-2` (the ValidatingAdmissionPolicy for its Node and MigNode, the controller's webhook
//! for evictions) and on its own Node anything but the cordon and the labels and annotations
//! Geometer owns. A token of the same ServiceAccount that names no node is refused outright.
//! The controller may create no Secret but its webhook's; each simulated kubelet writes as its
//! node, which NodeRestriction holds to that node.

use geometer_api::{MigNode, MigNodeSpec, PolicyMode, CORDONED_BY_ANNOTATION};
use geometer_simcluster::{DEVICE_PLUGIN_LABEL, DEVICE_PLUGIN_NAMESPACE};
use geometer_testkit::control_plane::{Identity, GEOMETER_NAMESPACE};
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{RealCluster, NS};
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use crate::support::{geometer, two_nodes};

const OWN: &str = "gpu-1";
const OTHER: &str = "gpu-2";

/// The answer was a refusal whose message says `why`.
fn refused<T: std::fmt::Debug>(answer: Result<T, kube::Error>, why: &str) {
    match answer {
        Err(kube::Error::Api(status)) => {
            assert!(status.code == 403 || status.code == 422, "{status:?}");
            assert!(status.message.contains(why), "refused, but not because {why:?}: {}", status.message);
        }
        other => panic!("expected a refusal because {why:?}, got {other:?}"),
    }
}

/// An eviction of `name` by `pods`' client, asked again while the controller's cache has not
/// seen the pod yet (429, as the agent retries it).
async fn evict(pods: &Api<Pod>, name: &str) -> Result<(), kube::Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match pods.evict(name, &EvictParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 429 && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            answer => return answer.map(|_| ()),
        }
    }
}

fn merge(patch: Value) -> Patch<Value> {
    Patch::Merge(patch)
}

/// A pod of the workload namespace bound to `node` (the simulated kubelet runs it).
async fn pod_on(admin: &Client, node: &str) -> String {
    let name = format!("work-{node}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.example.com/work:v1"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(admin.clone(), NS).create(&PostParams::default(), &pod).await.expect("a pod");
    name
}

/// The device plugin pod on `node`.
async fn plugin_pod(admin: &Client, node: &str) -> String {
    let (key, value) = DEVICE_PLUGIN_LABEL;
    let list =
        ListParams::default().labels(&format!("{key}={value}")).fields(&format!("spec.nodeName={node}"));
    let pods =
        Api::<Pod>::namespaced(admin.clone(), DEVICE_PLUGIN_NAMESPACE).list(&list).await.expect("pods");
    pods.items
        .first()
        .and_then(|p| p.metadata.name.clone())
        .unwrap_or_else(|| panic!("no device plugin pod on {node}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_can_change_only_its_own_node() {
    let Some(mut k8s) =
        RealCluster::start("agent-identity", geometer(), &two_nodes(), &policy(PolicyMode::DryRun, false))
            .await
    else {
        return;
    };
    // The controller's token creates its webhook's Secret and no other (server-side dry runs).
    let controller = Api::<Secret>::namespaced(k8s.cp.client(Identity::Controller).await, GEOMETER_NAMESPACE);
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let secret =
        |name: &str| -> Secret { serde_json::from_value(json!({"metadata": {"name": name}})).unwrap() };
    controller.create(&dry_run, &secret("geometer-webhook-tls")).await.expect("its webhook's Secret");
    refused(controller.create(&dry_run, &secret("stolen")).await, "only its webhook's Secret");

    // The controller serves the eviction webhook and writes its CA into the configuration.
    k8s.start_controller("controller-0");
    k8s.webhooks_trusted().await;
    let agent = k8s.cp.client_from(k8s.agent_kubeconfig(OWN)).await;
    let params = PatchParams::default();

    // Its Node and only its Node: the cordon, Geometer's annotations, the GPU Operator's labels.
    let nodes = Api::<Node>::all(agent.clone());
    let cordon = json!({"metadata": {"annotations": {CORDONED_BY_ANNOTATION: "geometer"}}, "spec": {"unschedulable": true}});
    refused(
        nodes.patch(OTHER, &params, &merge(cordon.clone())).await,
        "may change only its own node's objects",
    );
    nodes.patch(OWN, &params, &merge(cordon)).await.expect("the agent cordons its own node");
    let paused = json!({"metadata": {"labels": {"nvidia.com/gpu.deploy.dcgm": "paused-for-mig-change"}}});
    nodes
        .patch(OWN, &params, &merge(paused))
        .await
        .expect("the agent pauses a GPU Operator operand on its node");
    refused(
        nodes.patch(OWN, &params, &merge(json!({"metadata": {"labels": {"team": "ml"}}}))).await,
        "not team",
    );
    refused(
        nodes.patch(OWN, &params, &merge(json!({"metadata": {"annotations": {"owner": "x"}}}))).await,
        "not owner",
    );
    let taint = json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
    refused(nodes.patch(OWN, &params, &merge(taint)).await, "only spec.unschedulable");

    // Its MigNode and only its MigNode.
    let mignodes = Api::<MigNode>::all(agent.clone());
    let admin_mignodes = Api::<MigNode>::all(k8s.admin.clone());
    let create = PostParams::default();
    refused(
        mignodes.create(&create, &MigNode::new(OTHER, MigNodeSpec::default())).await,
        "may change only its own node's objects",
    );
    admin_mignodes.create(&create, &MigNode::new(OTHER, MigNodeSpec::default())).await.expect("as admin");
    mignodes.create(&create, &MigNode::new(OWN, MigNodeSpec::default())).await.expect("its own MigNode");
    let status = merge(json!({"status": {"gpuCount": 2}}));
    refused(mignodes.patch_status(OTHER, &params, &status).await, "may change only its own node's objects");
    mignodes.patch_status(OWN, &params, &status).await.expect("its own MigNode's status");

    // Evictions: the pods and the device plugin of its node only.
    let (own_pod, other_pod) = (pod_on(&k8s.admin, OWN).await, pod_on(&k8s.admin, OTHER).await);

    // The simulated kubelets report as their nodes (Node authorizer, NodeRestriction): gpu-1's
    // kubelet wrote its pod's status, and gpu-2's may not.
    wait_until(
        "gpu-1's kubelet reported its pod's status",
        || async {
            k8s.cp.pod_status_writers(NS, &own_pod).contains(&"system:node:gpu-1".to_string()).then_some(())
        },
        || format!("{:?}", k8s.cp.pod_status_writers(NS, &own_pod)),
    )
    .await;
    let other_kubelet = Api::<Pod>::namespaced(k8s.cp.node_client(OTHER).await, NS);
    let ready = merge(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
    refused(
        other_kubelet.patch_status(&own_pod, &params, &ready).await,
        "can only update pod status for pods with spec.nodeName set to itself",
    );
    let work = Api::<Pod>::namespaced(agent.clone(), NS);
    refused(evict(&work, &other_pod).await, "not pod ml/work-gpu-2 on node gpu-2");
    evict(&work, &own_pod).await.expect("a pod on its own node is evicted");
    let plugins = Api::<Pod>::namespaced(agent.clone(), DEVICE_PLUGIN_NAMESPACE);
    let (own_plugin, other_plugin) = (plugin_pod(&k8s.admin, OWN).await, plugin_pod(&k8s.admin, OTHER).await);
    refused(evict(&plugins, &other_plugin).await, "on node gpu-2");
    evict(&plugins, &own_plugin).await.expect("its own device plugin is restarted");

    // The same ServiceAccount with a token that names no node: nothing at all.
    let unbound = k8s.cp.client(Identity::Agent).await;
    refused(
        Api::<Node>::all(unbound.clone())
            .patch(OWN, &params, &merge(json!({"spec": {"unschedulable": false}})))
            .await,
        "names no node",
    );
    refused(evict(&Api::<Pod>::namespaced(unbound, NS), &other_pod).await, "names no node");
    // docs/security.md's live check: impersonating the agent carries no node either (kubectl
    // says so on stderr; `cordon` exits 0 even so).
    let kubectl = geometer_testkit::control_plane::kubectl().unwrap();
    let as_agent = "--as=system:serviceaccount:geometer-system:geometer-agent";
    let dry_run = std::process::Command::new(kubectl)
        .args([as_agent, "cordon", OTHER, "--dry-run=server"])
        .env("KUBECONFIG", k8s.cp.kubeconfig(Identity::Admin))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&dry_run.stderr);
    assert!(said.contains("geometer-agent-own-node") && said.contains("names no node"), "{said}");
    k8s.check_alive();
}
