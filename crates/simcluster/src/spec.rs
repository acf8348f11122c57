//! What a simulated cluster is made of: nodes, their GPUs (catalog models with an initial
//! geometry), labels, taints, CPU and memory.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;

/// Namespace of the simulated NVIDIA device plugin's pods (the GPU Operator's).
pub const DEVICE_PLUGIN_NAMESPACE: &str = "gpu-operator";
/// Labels of the device plugin's pods; the agent finds them with
/// [`geometer_agent::DEFAULT_DEVICE_PLUGIN_SELECTOR`].
pub const DEVICE_PLUGIN_LABEL: (&str, &str) = ("app", "nvidia-device-plugin-daemonset");

/// What advertises a node's GPUs to Kubernetes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceStack {
    /// NVIDIA's device plugin: extended resources (`nvidia.com/mig-<profile>`) in the Node's
    /// allocatable.
    #[default]
    DevicePlugin,
    /// NVIDIA's DRA driver in its static MIG mode: one ResourceSlice per node listing the MIG
    /// devices that exist, and nothing in the Node's allocatable (see [`crate::dra`]).
    DraStatic,
    /// NVIDIA's DRA driver in its DynamicMIG mode: a counter set per GPU and one abstract
    /// device per profile and placement; the instance is made when a claim's pod starts and
    /// destroyed when it stops (see [`crate::dra`]).
    DraDynamicMig,
}

impl DeviceStack {
    /// NVIDIA's DRA driver advertises the node's GPUs, in either mode.
    pub fn is_dra(self) -> bool {
        self != DeviceStack::DevicePlugin
    }
}

/// One GPU: a catalog model (key, PCI id or NVML name) and the instances it starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSpec {
    pub model: String,
    /// `(profile, start)` pairs, e.g. `("3g.40gb", 0)`; `[("whole", 0)]` for MIG mode off.
    pub geometry: Vec<(String, u8)>,
}

impl GpuSpec {
    pub fn new(model: &str, geometry: &[(&str, u8)]) -> GpuSpec {
        GpuSpec {
            model: model.to_string(),
            geometry: geometry.iter().map(|(p, s)| (p.to_string(), *s)).collect(),
        }
    }

    /// The geometry `[("whole", 0)]`: the GPU starts with MIG mode off.
    pub fn is_whole(&self) -> bool {
        matches!(self.geometry.as_slice(), [(p, 0)] if p == geometer_solver::catalog::WHOLE)
    }
}

/// One node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub name: String,
    pub gpus: Vec<GpuSpec>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Allocatable CPU and memory as Kubernetes quantities.
    pub cpu: String,
    pub memory: String,
    pub max_pods: u32,
    pub stack: DeviceStack,
}

impl NodeSpec {
    /// A node with `count` GPUs of `model`, each with `geometry`, 128 CPUs and 1 TiB.
    pub fn new(name: impl Into<String>, model: &str, count: usize, geometry: &[(&str, u8)]) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            gpus: vec![GpuSpec::new(model, geometry); count],
            labels: BTreeMap::new(),
            taints: Vec::new(),
            cpu: "128".into(),
            memory: "1Ti".into(),
            max_pods: 110,
            stack: DeviceStack::DevicePlugin,
        }
    }

    /// The node's GPUs are advertised by NVIDIA's DRA driver in static MIG mode.
    pub fn dra(mut self) -> NodeSpec {
        self.stack = DeviceStack::DraStatic;
        self
    }

    /// The node's GPUs are advertised by NVIDIA's DRA driver in DynamicMIG mode. Their MIG mode
    /// is on and, whatever geometry they were given, they start without instances (the
    /// driver destroys at its start every instance no prepared claim holds).
    pub fn dynamic_mig(mut self) -> NodeSpec {
        self.stack = DeviceStack::DraDynamicMig;
        for gpu in &mut self.gpus {
            gpu.geometry.clear();
        }
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> NodeSpec {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> NodeSpec {
        self.taints.push(Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        });
        self
    }

    pub fn resources(mut self, cpu: &str, memory: &str) -> NodeSpec {
        self.cpu = cpu.into();
        self.memory = memory.into();
        self
    }
}

/// The whole cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterSpec {
    pub nodes: Vec<NodeSpec>,
    /// How long each NVML call that changes a GPU takes for agents (zero: instant).
    pub nvml_latency: Duration,
    /// The device plugin's pods come from a real DaemonSet (the GPU Operator's, created by the
    /// test): the simulated cluster neither creates nor recreates them, and does not wait for
    /// them when it joins.
    pub plugin_daemonset: bool,
}

impl ClusterSpec {
    pub fn new(nodes: Vec<NodeSpec>) -> ClusterSpec {
        ClusterSpec { nodes, nvml_latency: Duration::ZERO, plugin_daemonset: false }
    }

    /// [`ClusterSpec::plugin_daemonset`].
    pub fn with_plugin_daemonset(mut self) -> ClusterSpec {
        self.plugin_daemonset = true;
        self
    }

    pub fn with_nvml_latency(mut self, per_change: Duration) -> ClusterSpec {
        self.nvml_latency = per_change;
        self
    }

    /// `count` identical nodes named `<prefix>-<n>` (n from 1, zero-padded to sort by name).
    pub fn uniform(
        prefix: &str,
        count: usize,
        model: &str,
        gpus: usize,
        geometry: &[(&str, u8)],
    ) -> ClusterSpec {
        let width = count.to_string().len();
        ClusterSpec::new(
            (1..=count)
                .map(|i| NodeSpec::new(format!("{prefix}-{i:0width$}"), model, gpus, geometry))
                .collect(),
        )
    }

    pub fn gpu_count(&self) -> usize {
        self.nodes.iter().map(|n| n.gpus.len()).sum()
    }
}
