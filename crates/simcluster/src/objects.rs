//! The Kubernetes objects the simulated cluster writes: nodes, device plugin pods, pod
//! statuses, and a builder for workload pods that ask for MIG slices.

use std::collections::BTreeMap;

use geometer_solver::catalog::Catalog;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use super::spec::{DeviceStack, NodeSpec, DEVICE_PLUGIN_LABEL, DEVICE_PLUGIN_NAMESPACE};
use geometer_agent::nvml::sim::ProcessUsage;
use geometer_api::resources::{device_resource, is_mig_resource, GPU_RESOURCE};

/// Pod annotation: how long the simulated kubelet runs the pod, in (real) seconds, e.g. `"12.5"`.
/// Without it the pod runs until it is deleted.
pub const RUN_SECONDS_ANNOTATION: &str = "sim.geometer.dev/run-seconds";

/// Pod annotation: GPU memory (MiB) and utilisation (percent) each of the pod's processes uses,
/// e.g. `"7000,35"`, as the simulated NVML then reports them (right-sizing measures these).
/// Without it a process uses 1 GiB and is idle.
pub const GPU_USAGE_ANNOTATION: &str = "sim.geometer.dev/gpu-usage";

/// Node annotation the kubelet bumps after it freed a deleted pod's devices, so that watchers
/// of the node (the agent waiting for a drain) look again at once.
pub const RELEASES_ANNOTATION: &str = "sim.geometer.dev/released-pods";
/// Pod label: while the pod runs it holds every GPU of its node open as an NVML client would
/// (DCGM, dcgm-exporter, the device plugin), so NVML refuses destroys and MIG mode changes.
pub const HOLDS_GPUS_LABEL: &str = "sim.geometer.dev/holds-gpus";

/// Whether the pod holds its node's GPUs open while it runs ([`HOLDS_GPUS_LABEL`] `"true"`).
pub(crate) fn holds_gpus(pod: &Pod) -> bool {
    pod.metadata.labels.as_ref().and_then(|l| l.get(HOLDS_GPUS_LABEL)).is_some_and(|v| v == "true")
}

/// Whether a DaemonSet owns the pod (its controller brings it back, not the simulated kubelet).
pub(crate) fn owned_by_daemonset(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
}

pub(crate) fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The Node as a cluster with the GPU Operator labels it: product, count, MIG strategy mixed.
pub(crate) fn node(spec: &NodeSpec, catalog: &Catalog) -> Node {
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    labels.insert("kubernetes.io/hostname".into(), spec.name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    if let Some(first) = spec.gpus.first() {
        let product = catalog
            .find(&first.model)
            .and_then(|m| {
                m.product_labels
                    .first()
                    .cloned()
                    .or_else(|| m.nvml_names.first().map(|n| n.replace(' ', "-")))
            })
            .unwrap_or_else(|| first.model.clone());
        labels.insert("nvidia.com/gpu.product".into(), product);
        labels.insert("nvidia.com/gpu.count".into(), spec.gpus.len().to_string());
        labels.insert("nvidia.com/mig.capable".into(), "true".into());
        labels.insert("nvidia.com/mig.strategy".into(), "mixed".into());
        labels.insert("geometer.dev/gpu-model".into(), first.model.clone());
    }
    labels.extend(spec.labels.clone());
    let resources = json!({"cpu": spec.cpu, "memory": spec.memory, "pods": spec.max_pods.to_string()});
    serde_json::from_value(json!({
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {"taints": spec.taints},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated kubelet is posting ready status",
                            "lastHeartbeatTime": now(), "lastTransitionTime": now()}],
            "nodeInfo": {"kubeletVersion": "v1.37.0-sim", "containerRuntimeVersion": "sim://1", "operatingSystem": "linux",
                         "architecture": "amd64", "osImage": "Geometer simulated node", "kernelVersion": "6.0-sim",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        },
    }))
    .expect("node object")
}

/// A device plugin pod on a node, as its DaemonSet creates it (pending; the kubelet runs it).
pub(crate) fn device_plugin_pod(node: &str, serial: u32) -> Pod {
    let container = json!({"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                           "env": [{"name": "MIG_STRATEGY", "value": "mixed"}]});
    let name = format!("nvidia-device-plugin-{node}-{serial}");
    node_daemon_pod(&name, DEVICE_PLUGIN_NAMESPACE, DEVICE_PLUGIN_LABEL, node, container)
}

/// A pod a node's DaemonSet creates on `node` (bound, pending, critical, tolerating every
/// taint), with one container.
pub(crate) fn node_daemon_pod(
    name: &str,
    namespace: &str,
    label: (&str, &str),
    node: &str,
    container: Value,
) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {label.0: label.1}},
        "spec": {
            "nodeName": node,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
        },
    }))
    .expect("a node plugin pod")
}

/// The pod that advertises a node's GPUs for `stack`: the device plugin's, or the DRA driver's
/// kubelet plugin.
pub(crate) fn plugin_pod(stack: DeviceStack, node: &str, serial: u32) -> Pod {
    match stack {
        DeviceStack::DevicePlugin => device_plugin_pod(node, serial),
        DeviceStack::DraStatic | DeviceStack::DraDynamicMig => crate::dra::plugin_pod(node, serial),
    }
}

pub fn is_device_plugin(pod: &Pod) -> bool {
    pod.metadata.namespace.as_deref() == Some(DEVICE_PLUGIN_NAMESPACE)
        && pod.metadata.labels.as_ref().and_then(|l| l.get(DEVICE_PLUGIN_LABEL.0)).map(String::as_str)
            == Some(DEVICE_PLUGIN_LABEL.1)
}

/// Node status patch: the MIG resources and whole GPUs the plugin advertises; names it no
/// longer has stay at 0, as the kubelet keeps them.
pub(crate) fn advertise_patch(node: &Node, counts: &BTreeMap<String, u64>) -> Value {
    let mut mig = serde_json::Map::new();
    let old = node.status.as_ref().and_then(|s| s.capacity.clone()).unwrap_or_default();
    for k in old.keys().filter(|k| is_mig_resource(k) || *k == GPU_RESOURCE) {
        mig.insert(k.clone(), json!("0"));
    }
    for (k, v) in counts {
        mig.insert(k.clone(), json!(v.to_string()));
    }
    json!({"status": {"capacity": mig, "allocatable": mig}})
}

fn container_statuses(pod: &Pod, state: Value, ready: bool) -> Vec<Value> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| json!({"name": c.name, "image": c.image, "imageID": "", "ready": ready, "restartCount": 0, "started": ready, "state": state}))
        .collect()
}

/// Status of a pod the kubelet started.
pub(crate) fn running_status(pod: &Pod, node_ip: &str) -> Value {
    let t = now();
    let conditions: Vec<Value> =
        ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
            .iter()
            .map(|c| json!({"type": c, "status": "True", "lastProbeTime": null, "lastTransitionTime": t}))
            .collect();
    json!({"status": {
        "phase": "Running",
        "hostIP": node_ip,
        "podIP": node_ip,
        "startTime": t,
        "conditions": conditions,
        "containerStatuses": container_statuses(pod, json!({"running": {"startedAt": t}}), true),
    }})
}

/// The first image of the pod that can never be pulled: one from a registry under `.invalid`,
/// the top-level domain reserved never to resolve (RFC 2606). The simulated kubelet leaves such
/// a pod in `ImagePullBackOff`, bound and never started, as a real kubelet does with an image
/// it cannot pull.
pub(crate) fn unpullable_image(pod: &Pod) -> Option<String> {
    let containers = pod.spec.iter().flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers));
    let images = containers.filter_map(|c| c.image.as_deref());
    images
        .map(str::to_string)
        .find(|image| image.split('/').next().is_some_and(|host| host.ends_with(".invalid")))
}

/// Status of a pod the kubelet cannot start because it cannot pull `image`: pending, its
/// containers waiting in `ImagePullBackOff`.
pub(crate) fn image_pull_status(pod: &Pod, node_ip: &str, image: &str) -> Value {
    let waiting = json!({"waiting": {"reason": "ImagePullBackOff", "message": format!("Back-off pulling image \"{image}\"")}});
    json!({"status": {
        "phase": "Pending",
        "hostIP": node_ip,
        "startTime": now(),
        "containerStatuses": container_statuses(pod, waiting, false),
    }})
}

/// Status of a pod whose containers ended (`Succeeded`) or that the kubelet refused (`Failed`).
pub(crate) fn ended_status(pod: &Pod, phase: &str, reason: &str, message: &str) -> Value {
    let t = now();
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|s| s.0.to_string())
        .unwrap_or_else(|| t.clone());
    let exit = if phase == "Succeeded" { 0 } else { 1 };
    let conditions: Vec<Value> = [("Ready", "False"), ("ContainersReady", "False"), ("Initialized", "True"), ("PodScheduled", "True")]
        .iter()
        .map(|(c, s)| json!({"type": c, "status": s, "reason": if *s == "False" { "PodCompleted" } else { "" }, "lastProbeTime": null, "lastTransitionTime": t}))
        .collect();
    let terminated =
        json!({"terminated": {"exitCode": exit, "reason": reason, "startedAt": started, "finishedAt": t}});
    let mut status = json!({"phase": phase, "conditions": conditions, "containerStatuses": container_statuses(pod, terminated, false)});
    if phase == "Failed" {
        status["reason"] = json!(reason);
        status["message"] = json!(message);
    }
    json!({ "status": status })
}

/// A workload pod asking for MIG slices, built up step by step:
///
/// ```
/// use geometer_simcluster::{MigPod, RUN_SECONDS_ANNOTATION};
/// use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
///
/// let pod = MigPod::new("ml", "infer-1").slice("1g.10gb", 1).run_seconds(30.0).build();
/// assert_eq!(pod.metadata.namespace.as_deref(), Some("ml"));
/// assert_eq!(pod.metadata.name.as_deref(), Some("infer-1"));
/// let spec = pod.spec.as_ref().unwrap();
/// let limits = spec.containers[0].resources.as_ref().unwrap().limits.as_ref().unwrap();
/// assert_eq!(limits.get("nvidia.com/mig-1g.10gb"), Some(&Quantity("1".into())));
/// let annotations = pod.metadata.annotations.as_ref().unwrap();
/// assert_eq!(annotations.get(RUN_SECONDS_ANNOTATION).map(String::as_str), Some("30"));
/// ```
#[derive(Debug, Clone)]
pub struct MigPod {
    namespace: String,
    name: String,
    slices: BTreeMap<String, u32>,
    cpu: String,
    memory: String,
    run_seconds: Option<f64>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Value>,
    priority: Option<i32>,
    /// `(kind, name)` of the controller that owns the pod.
    owner: Option<(String, String)>,
}

impl MigPod {
    pub fn new(namespace: &str, name: &str) -> MigPod {
        MigPod {
            namespace: namespace.into(),
            name: name.into(),
            slices: BTreeMap::new(),
            cpu: "1".into(),
            memory: "4Gi".into(),
            run_seconds: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            priority: None,
            owner: None,
        }
    }

    /// The pod belongs to ReplicaSet `<deployment>-<hash>` of Deployment `deployment`, as the
    /// Deployment controller names and labels them (the ReplicaSet itself need not exist).
    pub fn of_deployment(mut self, deployment: &str, hash: &str) -> MigPod {
        self.owner = Some(("ReplicaSet".into(), format!("{deployment}-{hash}")));
        self.label("pod-template-hash", hash)
    }

    /// Asks for `count` instances of `profile`.
    pub fn slice(mut self, profile: &str, count: u32) -> MigPod {
        *self.slices.entry(profile.into()).or_insert(0) += count;
        self
    }

    /// Asks for `count` whole GPUs (`nvidia.com/gpu`).
    pub fn gpus(self, count: u32) -> MigPod {
        self.slice(geometer_solver::catalog::WHOLE, count)
    }

    pub fn resources(mut self, cpu: &str, memory: &str) -> MigPod {
        self.cpu = cpu.into();
        self.memory = memory.into();
        self
    }

    /// The simulated kubelet ends the pod (`Succeeded`) after this many seconds of running.
    pub fn run_seconds(mut self, seconds: f64) -> MigPod {
        self.run_seconds = Some(seconds);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> MigPod {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> MigPod {
        self.annotations.insert(key.into(), value.into());
        self
    }

    pub fn node_selector(mut self, key: &str, value: &str) -> MigPod {
        self.node_selector.insert(key.into(), value.into());
        self
    }

    pub fn toleration(mut self, key: &str, value: &str, effect: &str) -> MigPod {
        self.tolerations.push(json!({"key": key, "operator": "Equal", "value": value, "effect": effect}));
        self
    }

    pub fn priority(mut self, priority: i32) -> MigPod {
        self.priority = Some(priority);
        self
    }

    /// Each of the pod's GPU processes uses `memory_mib` of its device and keeps it
    /// `utilization_percent` busy (see [`GPU_USAGE_ANNOTATION`]).
    pub fn uses(self, memory_mib: u64, utilization_percent: u32) -> MigPod {
        self.annotation(GPU_USAGE_ANNOTATION, &format!("{memory_mib},{utilization_percent}"))
    }

    pub fn build(self) -> Pod {
        let mut annotations = self.annotations;
        if let Some(s) = self.run_seconds {
            annotations.insert(RUN_SECONDS_ANNOTATION.into(), format!("{s}"));
        }
        let limits: BTreeMap<String, String> =
            self.slices.iter().map(|(p, n)| (device_resource(p), n.to_string())).collect();
        let mut requests = limits.clone();
        requests.insert("cpu".into(), self.cpu);
        requests.insert("memory".into(), self.memory);
        let mut spec = json!({
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": {"requests": requests, "limits": limits}}],
        });
        if !self.node_selector.is_empty() {
            spec["nodeSelector"] = json!(self.node_selector);
        }
        if !self.tolerations.is_empty() {
            spec["tolerations"] = json!(self.tolerations);
        }
        if let Some(p) = self.priority {
            spec["priority"] = json!(p);
        }
        let owners = self.owner.map(|(kind, name)| {
            json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "simulated", "controller": true}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels, "annotations": annotations, "ownerReferences": owners},
            "spec": spec,
        }))
        .expect("workload pod")
    }
}

/// How long the kubelet runs a pod, from [`RUN_SECONDS_ANNOTATION`].
pub fn run_seconds(pod: &Pod) -> Option<f64> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RUN_SECONDS_ANNOTATION))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
}

/// What each of the pod's GPU processes uses, from [`GPU_USAGE_ANNOTATION`]; the default (1 GiB,
/// idle) when absent or unreadable.
pub fn gpu_usage(pod: &Pod) -> ProcessUsage {
    let read = pod.metadata.annotations.as_ref().and_then(|a| a.get(GPU_USAGE_ANNOTATION)).and_then(|v| {
        let (memory, utilization) = v.split_once(',')?;
        Some(ProcessUsage {
            memory_mib: memory.trim().parse().ok()?,
            utilization_percent: utilization.trim().parse::<u32>().ok()?.min(100),
        })
    });
    read.unwrap_or_default()
}
