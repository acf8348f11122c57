//! `MigNode`: one per managed node, named like the node.
//!
//! Spec (written by the controller): the desired geometry per GPU and the plan it comes from.
//! `metadata.generation` grows with every spec change; the agent works towards one generation at
//! a time and reports it in `status.observedGeneration`. The node has converged when
//! `status.observedGeneration == metadata.generation` and `status.phase == Ready`.
//!
//! Status (written by the agent): what is on the GPUs (inventory), the phase and the step of the
//! current reconfiguration, and conditions. The step is written before it is taken, so a
//! restarted agent knows what it was doing.
// kube's `CustomResource` derive makes rustc report the spec types as unreachable `pub`
// (a false positive: they are re-exported from the crate root).
#![allow(unreachable_pub)]
// kube-derive's repeated `printcolumn(...)` entries look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use geometer_solver::catalog::Catalog;

use super::PlacedInstance;
pub use crate::limits::MAX_PODS_SHARING_A_DEVICE;
use crate::limits::{MAX_GPUS_PER_NODE, MAX_INSTANCES_PER_GPU, MAX_MEASURED_PODS_PER_NODE};

/// Desired MIG geometry of one node's GPUs.
#[derive(CustomResource, KubeSchema, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "geometer.dev",
    version = "v1alpha1",
    kind = "MigNode",
    plural = "mignodes",
    shortname = "mnode",
    category = "geometer",
    status = "MigNodeStatus",
    derive = "PartialEq",
    doc = "MIG geometry of one node: desired (spec, from the controller) and observed (status, from the node agent).",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Ready, or the stage of the current reconfiguration"
    ),
    printcolumn(
        name = "Step",
        type_ = "string",
        json_path = ".status.step.action",
        description = "Step being taken"
    ),
    printcolumn(
        name = "Plan",
        type_ = "string",
        json_path = ".spec.plan",
        description = "MigPlan the desired geometry comes from"
    ),
    printcolumn(
        name = "GPUs",
        type_ = "integer",
        json_path = ".status.gpuCount",
        description = "GPUs the agent sees"
    ),
    printcolumn(
        name = "Stack",
        type_ = "string",
        json_path = ".status.deviceStack",
        description = "How the node's GPUs are advertised: DevicePlugin, DraStaticMig, DraDynamicMig or Both",
        priority = 1
    ),
    printcolumn(
        name = "Cordoned",
        type_ = "boolean",
        json_path = ".status.cordonedByGeometer",
        description = "Whether Geometer cordoned the node",
        priority = 1
    ),
    printcolumn(name = "Generation", type_ = "integer", json_path = ".metadata.generation", priority = 1),
    printcolumn(
        name = "Observed",
        type_ = "integer",
        json_path = ".status.observedGeneration",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MigNodeSpec {
    /// MigPlan the desired geometry comes from; unset when none was applied yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,

    /// Desired geometry per GPU. A GPU that is not listed is left as it is.
    #[serde(default)]
    #[schemars(length(max = MAX_GPUS_PER_NODE))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["index".into()]))]
    pub gpus: Vec<GpuGeometry>,

    /// DynamicMIG: the pods the agent evicts so that a claim fragmentation blocks can be
    /// allocated; written and cleared by the controller. The agent changes no instance there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
}

/// Room being opened on a DynamicMIG node's GPU for one claim by moving pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Compaction {
    /// The MigPolicy whose disruption rules the evictions follow.
    pub policy: String,
    /// The pod whose claim the room is for, `namespace/name`.
    pub for_pod: String,
    /// The DRA device (of pool `<node>`) the claim can be allocated once the pods have moved.
    pub device: String,
    /// The pods to evict.
    #[schemars(length(max = MAX_INSTANCES_PER_GPU))]
    pub evict: Vec<PodRef>,
    /// When the controller asked; the compaction is given up after the policy's drain timeout.
    pub started_at: Time,
}

/// One pod: `namespace/name`, and its uid, so that a new pod of the same name is left alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    pub pod: String,
    pub uid: String,
}

/// Desired geometry of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuGeometry {
    /// NVML index of the GPU.
    pub index: u32,
    /// Instances the GPU should have; empty means no instances (MIG mode stays enabled), and
    /// the one instance `whole` at 0 means MIG mode off (the whole GPU, `nvidia.com/gpu`).
    #[serde(default)]
    #[schemars(length(max = MAX_INSTANCES_PER_GPU))]
    pub geometry: Vec<PlacedInstance>,
}

/// What the agent sees and does on the node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigNodeStatus {
    /// Every NVIDIA GPU on the node, MIG-capable or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GPUS_PER_NODE))]
    pub gpus: Vec<GpuInventory>,
    /// Number of entries in `gpus` (for `kubectl get`).
    #[serde(default)]
    pub gpu_count: u32,
    #[serde(default)]
    pub phase: MigNodePhase,
    /// The step being taken, written before it is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<AgentStep>,
    /// `Ready`, `Reconfiguring`, `DrainBlocked`, `Failed`, `CatalogMismatch`, `Refused`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Where NVML and Geometer's catalog disagree on this node's GPUs (NVML is trusted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog_disagreements: Vec<CatalogDisagreement>,
    /// Whether the agent cordoned the node (and so may uncordon it).
    #[serde(default)]
    pub cordoned_by_geometer: bool,
    /// The spec generation the phase and step work towards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What each pod holding a whole GPU alone uses of it, as NVML measured it (right-sizing:
    /// `geometer recommend`). Pods sharing a GPU are not measured: NVML cannot tell their
    /// processes apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_MEASURED_PODS_PER_NODE))]
    pub usage: Vec<PodGpuUsage>,
    /// The GPU Operator operands the agent paused for the change in progress: each deploy
    /// label's value before the pause. Also on the Node (annotation
    /// `geometer.dev/paused-operands`); cleared once every label is restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_operands: Option<crate::gpu_operator::PausedOperands>,
    /// How the node's GPUs are advertised to pods, as the agent found it; unset by an agent
    /// that predates DRA (then the controller plans the node only as a device-plugin node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_stack: Option<DeviceStack>,
}

/// How a node's GPUs are advertised to pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeviceStack {
    /// NVIDIA's device plugin: `nvidia.com/mig-<profile>` and `nvidia.com/gpu` resources.
    DevicePlugin,
    /// NVIDIA's DRA driver in static MIG mode: the instances that exist, as ResourceSlice
    /// devices; Geometer changes them and restarts the driver's kubelet plugin.
    DraStaticMig,
    /// NVIDIA's DRA driver in DynamicMIG mode: it makes and removes instances itself;
    /// Geometer never changes them.
    DraDynamicMig,
    /// Both advertise the GPUs, each giving them out: refused until one is removed.
    Both,
}

/// A bounded summary of one pod's use of the whole GPU it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGpuUsage {
    /// `namespace/name`.
    pub pod: String,
    /// NVML index of the GPU it holds.
    pub gpu: u32,
    /// Catalog key of the GPU model (what a MIG profile is chosen from).
    pub model: String,
    /// First sample.
    pub since: Time,
    /// Samples taken (one per agent round).
    pub samples: u32,
    /// Highest GPU memory its processes used together, MiB.
    pub peak_memory_mib: u64,
    /// 95th percentile of the sampled memory, MiB (rounded up to the summary's resolution).
    pub p95_memory_mib: u64,
    /// Highest sampled GPU utilisation (SM busy time), percent.
    pub peak_utilization_percent: u32,
    /// Mean sampled GPU utilisation, percent.
    pub mean_utilization_percent: u32,
}

/// Condition types the agent sets on a MigNode.
impl MigNodeStatus {
    pub const READY: &'static str = "Ready";
    pub const RECONFIGURING: &'static str = "Reconfiguring";
    pub const DRAIN_BLOCKED: &'static str = "DrainBlocked";
    pub const FAILED: &'static str = "Failed";
    pub const CATALOG_MISMATCH: &'static str = "CatalogMismatch";
    /// True while the GPU Operator's labels refuse a change of the node (mig-manager owns it,
    /// a driver upgrade runs, the device plugin's MIG strategy is not `mixed`).
    pub const REFUSED: &'static str = "Refused";
}

/// One GPU as the agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuInventory {
    /// NVML index.
    pub index: u32,
    /// GPU UUID (`GPU-...`).
    pub uuid: String,
    /// Catalog key (e.g. `H100-80GB`), or NVML's product name when the catalog does not know the
    /// GPU.
    pub model: String,
    /// PCI device id with the vendor in the low half, as hex: `0x233010DE`.
    pub pci_device_id: String,
    pub mig_mode: MigModeStatus,
    /// GPU instances that exist now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_INSTANCES_PER_GPU))]
    pub instances: Vec<MigInstance>,
    /// `namespace/name` of a pod holding the whole GPU (`nvidia.com/gpu`), when MIG is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Further pods holding the whole GPU when the device plugin shares it (time-slicing or
    /// MPS replicas, `<GPU uuid>::<n>`). Each must leave before MIG mode can change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PODS_SHARING_A_DEVICE))]
    pub shared_with: Vec<String>,
    /// Per catalog profile the GPU offers, the resource the NVIDIA device plugin advertises
    /// its instances as (`nvidia.com/mig-<name>`), computed from NVML's memory figures as the
    /// device plugin computes it; it can differ from the profile name. Empty without MIG mode.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub advertised_as: BTreeMap<String, String>,
    /// With MIG mode on: the runs of placement units (memory slices) no instance covers, in
    /// order. A profile fits only at its own placements, so free units can still leave a larger
    /// profile no room (on a DynamicMIG node, the plan says which claims that blocks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub free_placements: Vec<PlacementRun>,
}

/// A run of placement units: the first and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlacementRun {
    pub start: u8,
    pub size: u8,
}

impl PlacementRun {
    /// The runs of `units` placement units that none of `taken` (`(start, size)`) covers.
    pub fn free(units: u8, taken: impl Iterator<Item = (u8, u8)>) -> Vec<PlacementRun> {
        let mut used = vec![false; usize::from(units)];
        for (start, size) in taken {
            for unit in start..start.saturating_add(size).min(units) {
                used[usize::from(unit)] = true;
            }
        }
        PlacementRun::runs((0..units).filter(|&u| !used[usize::from(u)]))
    }

    /// Free placement units (in ascending order) as runs.
    pub fn runs(free: impl IntoIterator<Item = u8>) -> Vec<PlacementRun> {
        let mut runs: Vec<PlacementRun> = Vec::new();
        for unit in free {
            match runs.last_mut() {
                Some(run) if run.start + run.size == unit => run.size += 1,
                _ => runs.push(PlacementRun { start: unit, size: 1 }),
            }
        }
        runs
    }
}

/// MIG mode now and after the next GPU reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigModeStatus {
    pub current: bool,
    pub pending: bool,
}

/// One GPU instance (with its compute instance) that exists on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigInstance {
    /// Profile name as the catalog knows it; NVML's own name when the catalog has none.
    pub profile: String,
    /// First placement unit.
    pub start: u8,
    /// Placement units covered.
    pub size: u8,
    pub gpu_instance_id: u32,
    /// Unset while the GPU instance has no compute instance (half built).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance_id: Option<u32>,
    /// MIG device UUID (`MIG-...`), which the device plugin advertises; unset without a compute
    /// instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// `namespace/name` of the pod the kubelet assigned this device to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Further pods the kubelet assigned this same device to, when the device plugin shares it
    /// (time-slicing or MPS replicas, advertised as `<device id>::<n>`). Each must leave before
    /// the instance goes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PODS_SHARING_A_DEVICE))]
    pub shared_with: Vec<String>,
    /// Set when the GPU instance is not exactly one compute instance spanning it (several
    /// compute instances, or one smaller than it): why it is rebuilt before use. The device
    /// plugin would advertise such devices under `<c>c.<g>g...` names no plan asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<String>,
    /// Processes NVML reports on the instance (in use even without a pod, e.g. outside
    /// Kubernetes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub processes: u32,
}

impl MigNode {
    /// What its agent measured of the pods holding its whole GPUs (`status.usage`).
    pub fn usage(&self) -> &[PodGpuUsage] {
        self.status.as_ref().map_or(&[], |s| &s.usage)
    }
}

/// A MigNode an older agent wrote, or one a person created without `spec`: an empty `spec`
/// (no desired geometry) where it is missing, and each instance's `size` from its profile
/// on its GPU's model in the catalog. What cannot be derived stays missing, to be named.
impl crate::decode::Stored for MigNode {
    fn fill_derived(value: &mut serde_json::Value) -> bool {
        use serde_json::Value;
        let Value::Object(object) = value else { return false };
        let mut filled = false;
        if object.get("spec").is_none_or(Value::is_null) {
            object.insert("spec".into(), Value::Object(Default::default()));
            filled = true;
        }
        let gpus = object.get_mut("status").and_then(|s| s.get_mut("gpus")).and_then(Value::as_array_mut);
        for gpu in gpus.into_iter().flatten() {
            let model = gpu.get("model").and_then(Value::as_str).and_then(|m| Catalog::builtin().find(m));
            let (Some(model), Some(instances)) =
                (model, gpu.get_mut("instances").and_then(Value::as_array_mut))
            else {
                continue;
            };
            for instance in instances.iter_mut().filter_map(Value::as_object_mut) {
                let profile = instance.get("profile").and_then(Value::as_str).and_then(|p| model.profile(p));
                if let (None, Some(profile)) = (instance.get("size"), profile) {
                    instance.insert("size".into(), model.profile_info(profile).size.into());
                    filled = true;
                }
            }
        }
        filled
    }
}

impl GpuInventory {
    /// Every pod the kubelet assigned the whole GPU to.
    pub fn pods(&self) -> impl Iterator<Item = &String> {
        self.pod.iter().chain(&self.shared_with)
    }

    /// The GPU's geometry as plans name it, each instance with the pod using it: with MIG mode
    /// off, the one instance `whole` at 0, held by the pod using the GPU.
    pub fn placed_instances(&self) -> Vec<(PlacedInstance, Option<&String>)> {
        if !self.mig_mode.current {
            return vec![(PlacedInstance::new(geometer_solver::catalog::WHOLE, 0), self.pod.as_ref())];
        }
        self.instances.iter().map(|i| (i.placed(), i.pod.as_ref())).collect()
    }
}

impl MigInstance {
    /// In use: assigned to a pod or running processes. Never destroyed while in use.
    pub fn in_use(&self) -> bool {
        self.pod.is_some() || !self.shared_with.is_empty() || self.processes > 0
    }

    /// Every pod the kubelet assigned this device to.
    pub fn pods(&self) -> impl Iterator<Item = &String> {
        self.pod.iter().chain(&self.shared_with)
    }

    pub fn placed(&self) -> PlacedInstance {
        PlacedInstance::new(self.profile.clone(), self.start)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Where the catalog and NVML disagree about a GPU model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogDisagreement {
    /// GPU index on this node.
    pub gpu: u32,
    /// Profile concerned, when the disagreement is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// What differs, e.g. `placements`, `memoryMib`, `maxInstances`, `profile missing`.
    pub field: String,
    pub catalog: String,
    pub nvml: String,
}

/// Stage of the agent's work on the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MigNodePhase {
    /// The GPUs match the spec.
    Ready,
    /// Reading the GPUs and comparing with the spec.
    #[default]
    Observing,
    /// Cordoning the node so that nothing lands on slices about to change.
    Cordoning,
    /// Evicting the pods on instances that go.
    Draining,
    /// Destroying and creating GPU and compute instances.
    Repartitioning,
    /// Waiting for the device plugin to advertise the new slices.
    Advertising,
    /// Lifting the cordon the agent set.
    Uncordoning,
    /// The last attempt failed; the conditions say why, and the agent retries with backoff.
    Failed,
}

/// The step being taken: written to status before the agent takes it, so that a restarted agent
/// resumes (every step is safe to repeat).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentStep {
    pub action: StepAction,
    /// Spec generation the step works towards.
    pub generation: i64,
    /// GPU index, for GPU steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// Instance created or destroyed, for instance steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<PlacedInstance>,
    /// `namespace/name` of the pod, for evictions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// 1 for the first try; grows with each retry of the same step.
    #[schemars(range(min = 1))]
    pub attempt: u32,
    pub started_at: Time,
}

/// Kinds of step the agent takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum StepAction {
    Cordon,
    Evict,
    EnableMigMode,
    /// Turn MIG mode off on a GPU whose instances are gone: it becomes one whole GPU.
    DisableMigMode,
    DestroyComputeInstance,
    DestroyGpuInstance,
    CreateGpuInstance,
    CreateComputeInstance,
    /// Pause the GPU Operator's operands (their deploy labels) and wait until their pods have
    /// left the node, before the first GPU change.
    PauseOperands,
    Verify,
    /// Re-run the GPU Operator's validator and give each paused deploy label its value back.
    RestoreOperands,
    RestartDevicePlugin,
    WaitForAllocatable,
    Uncordon,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::from_stored;
    use serde_json::json;

    /// A MigNode as an older agent wrote it: no `spec`, and instances without `size`.
    fn older_mignode(instance: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode",
            "metadata": {"name": "gpu-1"},
            "status": {"gpus": [{
                "index": 0, "uuid": "GPU-0", "model": "A100-40GB", "pciDeviceId": "0x20B010DE",
                "migMode": {"current": true, "pending": true},
                "instances": [instance],
            }]},
        })
    }

    #[test]
    fn free_placements_are_the_units_no_instance_covers() {
        // NVIDIA's driver issue tracker's H100: 1g.10gb at 0, 1 and 5.
        let runs = PlacementRun::free(8, [(0, 1), (1, 1), (5, 1)].into_iter());
        assert_eq!(runs, [PlacementRun { start: 2, size: 3 }, PlacementRun { start: 6, size: 2 }]);
        assert_eq!(PlacementRun::free(8, [(0, 8)].into_iter()), []);
        assert_eq!(PlacementRun::free(8, std::iter::empty()), [PlacementRun { start: 0, size: 8 }]);
    }

    #[test]
    fn an_older_mignode_reads_with_its_instance_size_from_the_profile() {
        let value = older_mignode(json!({"profile": "3g.20gb", "start": 4, "gpuInstanceId": 2}));
        let node: MigNode = from_stored(&value).unwrap();
        assert!(node.spec.gpus.is_empty(), "no spec reads as no desired geometry");
        let instance = &node.status.unwrap().gpus[0].instances[0];
        assert_eq!((instance.profile.as_str(), instance.start, instance.size), ("3g.20gb", 4, 4));
    }

    #[test]
    fn a_field_that_cannot_be_derived_is_named() {
        let value = older_mignode(json!({"profile": "3g.20gb", "start": 4}));
        let error = from_stored::<MigNode>(&value).unwrap_err().to_string();
        assert!(error.contains("gpuInstanceId"), "{error}");
        let unknown_profile = older_mignode(json!({"profile": "9g.99gb", "start": 0, "gpuInstanceId": 1}));
        let error = from_stored::<MigNode>(&unknown_profile).unwrap_err().to_string();
        assert!(error.contains("size"), "{error}");
    }
}
