//! A stand-in for the NVIDIA GPU Operator on the simulated node: its deploy labels on the Node,
//! its operand DaemonSets' pods (the `app` labels and node selectors of NVIDIA/gpu-operator
//! `assets/state-*/`), created and removed as the DaemonSet controller would as the labels
//! change, and the NVML clients those operands hold on the simulated GPUs while they run. The
//! Operator's own label writer is here too: a missing or empty deploy label becomes `true`, any
//! other value is kept (NVIDIA/gpu-operator `controllers/state_manager.go`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use geometer_agent::nvml::sim::SimNvml;
use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;

use super::{advertise_checked, NODE, PLUGIN_LABEL, PLUGIN_NAMESPACE};

/// Namespace of the third-party GPU client DaemonSet (it selects `nvidia.com/gpu.deploy.client`).
pub const CLIENTS_NAMESPACE: &str = "monitoring";

/// One operand DaemonSet.
#[derive(Debug, Clone)]
pub struct Operand {
    pub name: &'static str,
    pub namespace: &'static str,
    pub app: &'static str,
    /// Its pod template's `nodeSelector`.
    pub selector: &'static [(&'static str, &'static str)],
    /// It keeps every GPU open while it runs (NVML answers IN_USE to destroys and MIG mode
    /// changes).
    pub holds_gpus: bool,
}

/// The operands of a stock GPU Operator node, plus a third-party GPU client.
pub const OPERANDS: [Operand; 7] = [
    Operand {
        name: "nvidia-device-plugin-daemonset",
        namespace: PLUGIN_NAMESPACE,
        app: PLUGIN_LABEL.1,
        selector: &[("nvidia.com/gpu.deploy.device-plugin", "true")],
        holds_gpus: true,
    },
    Operand {
        name: "gpu-feature-discovery",
        namespace: PLUGIN_NAMESPACE,
        app: "gpu-feature-discovery",
        selector: &[("nvidia.com/gpu.deploy.gpu-feature-discovery", "true")],
        holds_gpus: false,
    },
    Operand {
        name: "nvidia-dcgm-exporter",
        namespace: PLUGIN_NAMESPACE,
        app: "nvidia-dcgm-exporter",
        selector: &[("nvidia.com/gpu.deploy.dcgm-exporter", "true")],
        holds_gpus: true,
    },
    Operand {
        name: "nvidia-dcgm",
        namespace: PLUGIN_NAMESPACE,
        app: "nvidia-dcgm",
        selector: &[("nvidia.com/gpu.deploy.dcgm", "true")],
        holds_gpus: true,
    },
    Operand {
        name: "nvidia-device-plugin-mps-control-daemon",
        namespace: PLUGIN_NAMESPACE,
        app: "nvidia-device-plugin-mps-control-daemon",
        selector: &[("nvidia.com/gpu.deploy.device-plugin", "true"), ("nvidia.com/mps.capable", "true")],
        holds_gpus: true,
    },
    Operand {
        name: "nvidia-operator-validator",
        namespace: PLUGIN_NAMESPACE,
        app: "nvidia-operator-validator",
        selector: &[("nvidia.com/gpu.deploy.operator-validator", "true")],
        holds_gpus: false,
    },
    Operand {
        name: "gpu-client",
        namespace: CLIENTS_NAMESPACE,
        app: "gpu-client",
        selector: &[("nvidia.com/gpu.deploy.client", "true")],
        holds_gpus: true,
    },
];

/// The labels the Operator writes on a GPU node handed to Geometer (mig-manager off), with its
/// defaults: DCGM off (dcgm-exporter embeds its own host engine), no MPS.
pub const OPERATOR_LABELS: [(&str, &str); 10] = [
    ("nvidia.com/gpu.present", "true"),
    ("nvidia.com/gpu.deploy.device-plugin", "true"),
    ("nvidia.com/gpu.deploy.gpu-feature-discovery", "true"),
    ("nvidia.com/gpu.deploy.dcgm-exporter", "true"),
    ("nvidia.com/gpu.deploy.dcgm", "false"),
    ("nvidia.com/gpu.deploy.operator-validator", "true"),
    ("nvidia.com/gpu.deploy.client", "true"),
    ("nvidia.com/gpu.deploy.mig-manager", "false"),
    ("nvidia.com/mig.strategy", "mixed"),
    ("nvidia.com/mps.capable", "false"),
];

/// What the stand-in did, for tests to check.
#[derive(Debug, Default, Clone)]
pub struct OperatorLog {
    /// Pods started, by operand name.
    pub started: BTreeMap<String, usize>,
    /// Pods taken off the node (their labels stopped matching, or they were evicted).
    pub stopped: BTreeMap<String, usize>,
}

/// Runs the operands on `NODE` while their selectors match its labels, and holds the GPUs for
/// those that keep them open. Operands named in `stuck` never leave (a pod whose finalizer
/// nobody removes).
pub(crate) async fn run(
    server: ApiServer,
    sim: SimNvml,
    log: Arc<Mutex<OperatorLog>>,
    stuck: Arc<Mutex<Vec<String>>>,
) {
    let mut generation = 0u64;
    let mut running: BTreeSet<&'static str> = BTreeSet::new();
    loop {
        let node = server.object::<Node>("", NODE).expect("node");
        let labels = node.metadata.labels.clone().unwrap_or_default();
        write_missing_labels(&server, &labels).await;
        for operand in &OPERANDS {
            let wanted = operand.selector.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v));
            let pod = live_pod(&server, operand);
            if pod.is_none() && running.remove(operand.name) {
                sim.hold_every_gpu(&client_name(operand), false);
                *log.lock().unwrap().stopped.entry(operand.name.into()).or_default() += 1;
            }
            match (wanted, pod) {
                (true, None) => {
                    generation += 1;
                    start(&server, &sim, operand, generation).await;
                    running.insert(operand.name);
                    *log.lock().unwrap().started.entry(operand.name.into()).or_default() += 1;
                }
                (false, Some(pod)) if !stuck.lock().unwrap().iter().any(|s| s == operand.name) => {
                    // Its containers stop (and let go of the GPUs) before the pod object goes,
                    // as the kubelet finishes a deletion.
                    sim.hold_every_gpu(&client_name(operand), false);
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let _ = Api::<Pod>::namespaced(server.client(), operand.namespace)
                        .delete(&name, &DeleteParams::default())
                        .await;
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The Operator's label writer: a missing or empty deploy label of an operand becomes `true`.
async fn write_missing_labels(server: &ApiServer, labels: &BTreeMap<String, String>) {
    let missing: serde_json::Map<String, serde_json::Value> = OPERATOR_LABELS
        .iter()
        .filter(|(k, _)| {
            k.starts_with("nvidia.com/gpu.deploy.") && labels.get(*k).is_none_or(|v| v.is_empty())
        })
        .filter(|(k, _)| *k != "nvidia.com/gpu.deploy.mig-manager")
        .map(|(k, _)| (k.to_string(), json!("true")))
        .collect();
    if !missing.is_empty() {
        Api::<Node>::all(server.client())
            .patch(NODE, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": missing}})))
            .await
            .expect("label writer");
    }
}

fn live_pod(server: &ApiServer, operand: &Operand) -> Option<Pod> {
    server.objects::<Pod>().into_iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(operand.namespace)
            && p.metadata.labels.as_ref().and_then(|l| l.get("app")).map(String::as_str) == Some(operand.app)
    })
}

fn client_name(operand: &Operand) -> String {
    format!("{}/{}", operand.namespace, operand.name)
}

async fn start(server: &ApiServer, sim: &SimNvml, operand: &Operand, generation: u64) {
    if operand.app == PLUGIN_LABEL.1 {
        // A starting device plugin enumerates the MIG devices and the kubelet updates
        // allocatable.
        advertise_checked(server, sim, false).await;
    }
    let selector: serde_json::Map<String, serde_json::Value> =
        operand.selector.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": format!("{}-{generation}", operand.name),
            "namespace": operand.namespace,
            "labels": {"app": operand.app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": operand.name, "uid": format!("ds-{}", operand.name), "controller": true}],
        },
        "spec": {"nodeName": NODE, "nodeSelector": selector, "containers": [{"name": "main", "image": "nvidia"}]},
        "status": {
            "phase": "Running",
            "startTime": jiff::Timestamp::now().to_string(),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .expect("operand pod");
    server.seed(&pod).expect("operand pod");
    if operand.holds_gpus {
        sim.hold_every_gpu(&client_name(operand), true);
    }
}
