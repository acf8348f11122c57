//! Planning input: a cluster snapshot.
//!
//! Everything at this boundary is named (node names, model keys, profile names, `namespace/name`
//! pod references), never an internal id, so that a snapshot can be written by hand, produced by
//! the Kubernetes adapter or by the simulator, and read back in a bug report.

mod feasibility;
mod node_kinds;
mod pod_key;
mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use feasibility::{eligibility, eligibility_after_evictions, Freeable, Ineligible};
pub(crate) use node_kinds::NodeKinds;
pub use pod_key::{PodKey, PodKeyError};
pub use validate::{SnapshotError, MAX_GANG_MEMBERS};

/// A cluster as the planner sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Snapshot {
    /// Managed nodes and their GPUs.
    #[serde(default)]
    pub nodes: Vec<Node>,
    /// Pods waiting for MIG slices: the demand.
    #[serde(default)]
    pub pending: Vec<Pod>,
    /// Pods bound to managed nodes that use MIG instances (`node` set). Only these can be
    /// evicted, and only when the policy allows it.
    #[serde(default)]
    pub running: Vec<Pod>,
    /// Without a policy: standard profiles, no headroom, nothing is ever evicted, no limits.
    #[serde(default)]
    pub policy: Option<Policy>,
    /// Pods expected to arrive soon (a forecast, e.g. copies of recent arrivals), with the
    /// same fields as pending pods; their names need not be unique. The planner prepares
    /// slices for them where they could land, after the pending pods and never by eviction,
    /// so that the pods that come next start without waiting for a reconfiguration. They are
    /// not in the plan's pod list. Empty: plan for the pending pods only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected: Vec<Pod>,
    /// True when instance placements were guessed (from labels and counts, not from the agent's
    /// inventory); the plan repeats it so a reader knows the starts are a guess.
    #[serde(default)]
    pub placements_inferred: bool,
    /// Groups of pods that run all together or not at all (a PodGroup's `minMember`, a Kueue pod
    /// group's total count). A pending pod names its gang in `gang`; a pod in none is a gang of
    /// one. The planner gives a gang's pending members slices only when enough of them get
    /// slices in the same plan to reach its minimum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gangs: Vec<Gang>,
}

/// A gang: pods that must all start together, at least `min_members` of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gang {
    /// `namespace/name` of the group, as its pods name it.
    pub name: String,
    /// Members that must run at once.
    pub min_members: u32,
    /// Members that count towards the minimum without slices from this plan: running ones, and
    /// pending ones that ask for no MIG slice or whole GPU.
    #[serde(default)]
    pub members_counted: u32,
}

/// A managed node: the facts that decide which pods may land on it, and its GPUs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Node {
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned). Acts like the scheduler's
    /// `node.kubernetes.io/unschedulable:NoSchedule` taint.
    #[serde(default)]
    pub unschedulable: bool,
    /// Allocatable CPU minus what bound pods request, in millicores; absent: not limiting.
    #[serde(default)]
    pub free_cpu_millis: Option<u64>,
    /// Allocatable memory minus what bound pods request, in bytes; absent: not limiting.
    #[serde(default)]
    pub free_memory_bytes: Option<u64>,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
}

/// One GPU and its current geometry: MIG instances, or with MIG mode off the one instance
/// `whole` (start 0) that stands for the whole GPU (`pod` the pod using it, if any).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gpu {
    pub index: u32,
    /// Catalog key, PCI device id, NVML name or `nvidia.com/gpu.product` label value.
    pub model: String,
    #[serde(default)]
    pub instances: Vec<Instance>,
}

/// A GPU instance as it exists now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Instance {
    pub profile: String,
    pub start: u8,
    /// `namespace/name` of the pod using it; absent when free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodKey>,
}

/// A pod: pending demand, or (with `node`) a running pod that uses MIG instances.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub priority: i32,
    /// Effective MIG requests per profile name, as the scheduler computes them:
    /// max(largest init container, sum of containers) + pod overhead. Whole GPUs
    /// (`nvidia.com/gpu`) are the profile `whole`.
    #[serde(default)]
    pub requests: BTreeMap<String, u32>,
    #[serde(default)]
    pub cpu_millis: u64,
    #[serde(default)]
    pub memory_bytes: u64,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: the node must match at least one term.
    #[serde(default)]
    pub affinity: Vec<NodeSelectorTerm>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Running pods only: the node it is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Running pods only: carries a do-not-disrupt annotation; never evicted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub do_not_disrupt: bool,
    /// Pending pods only: the gang ([`Snapshot::gangs`]) it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
    /// Pending pods only: whether its MIG devices must share one GPU or each have their own
    /// (a DRA claim's `matchAttribute`/`distinctAttribute` on the parent GPU).
    #[serde(default, skip_serializing_if = "GpuSpread::is_any")]
    pub gpu_spread: GpuSpread,
}

/// How a pod's MIG devices may lie over its node's GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GpuSpread {
    /// Any GPUs of the node, as the device plugin hands them out.
    #[default]
    Any,
    /// All on one GPU (`matchAttribute: gpu.nvidia.com/parentUUID`).
    OneGpu,
    /// Each on a GPU of its own (`distinctAttribute: gpu.nvidia.com/parentUUID`).
    DistinctGpus,
}

impl GpuSpread {
    pub fn is_any(&self) -> bool {
        *self == GpuSpread::Any
    }

    /// How the plan says it: `on one GPU`, `each on its own GPU`, or nothing.
    pub fn words(&self) -> &'static str {
        match self {
            GpuSpread::Any => "",
            GpuSpread::OneGpu => " on one GPU",
            GpuSpread::DistinctGpus => " each on its own GPU",
        }
    }
}

impl Pod {
    /// `namespace/name`, the reference instances use.
    pub fn key(&self) -> PodKey {
        PodKey::new(&self.namespace, &self.name)
    }
}

/// One term of a required node affinity: all its requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorTerm {
    #[serde(default)]
    pub match_expressions: Vec<Requirement>,
    /// Only `metadata.name` is a supported field, as in Kubernetes.
    #[serde(default)]
    pub match_fields: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TolerationOperator {
    #[default]
    Equal,
    Exists,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    /// Empty with `Exists`: tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default)]
    pub operator: TolerationOperator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Empty: every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

/// What the planner may do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Profiles the planner may create (names or aliases). Empty: every standard profile
    /// (no `+me`, `-me`, `+gfx` variants). Instances that exist are kept whatever their profile.
    #[serde(default)]
    pub allowed_profiles: Vec<String>,
    /// Spare (unused) slices to keep per profile, cluster-wide, when a GPU changes anyway.
    #[serde(default)]
    pub headroom: BTreeMap<String, u32>,
    /// Whether pods using instances may be evicted to make room (never do-not-disrupt pods).
    #[serde(default)]
    pub eviction_allowed: bool,
    #[serde(default)]
    pub max_gpus_changed: Option<u32>,
    #[serde(default)]
    pub max_nodes_changed: Option<u32>,
    /// Solver time limit; the best plan found by then is used.
    #[serde(default)]
    pub time_limit_ms: Option<u64>,
    /// The modes the planner may put a GPU in. Empty: both. A GPU already in a mode left out
    /// may stay in it; only a change to it is ruled out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_modes: Vec<GpuMode>,
    /// Never turn MIG on for whole GPUs when that leaves fewer than this many whole GPUs (or
    /// fewer than there are, where there are fewer already). Whole GPUs for pending demand
    /// are made whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_whole_gpus: Option<u32>,
    /// Seconds a node this plan changes stays as planned (`MigPolicy.spec.stabilisationSeconds`,
    /// given as 0 where the policy's `shapeEmptyGpus` is false). Above 0, the plan also shapes
    /// the empty GPUs of the nodes it changes, which no pod could use until the window ends (see
    /// [`crate::plan`]'s `window`). 0: they stay empty.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stabilisation_seconds: u32,
    /// The agent may reset a GPU to change its MIG mode (`MigPolicy.spec.disruption.allowGpuReset`):
    /// an Ampere GPU, which changes mode only through a reset, may then be planned into the
    /// other mode. Off: such a GPU keeps its mode.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpu_reset_allowed: bool,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// A GPU's mode: partitioned into MIG instances, or whole (MIG off, `nvidia.com/gpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum GpuMode {
    #[serde(rename = "MIG")]
    Mig,
    Whole,
}

impl Policy {
    /// Whether the planner may put a GPU in `mode`.
    pub fn allows_mode(&self, mode: GpuMode) -> bool {
        self.allowed_modes.is_empty() || self.allowed_modes.contains(&mode)
    }
}
