//! `MigPolicy`: which nodes Geometer manages and how far it may go.
// kube's `CustomResource` derive makes rustc report the spec types as unreachable `pub`
// (a false positive: they are re-exported from the crate root).
#![allow(unreachable_pub)]
// kube-derive's repeated `printcolumn(...)` entries look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::PROFILE_NAME_PATTERN;

/// Pod annotations that forbid eviction when the policy names none.
pub const DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS: [&str; 2] =
    [crate::DO_NOT_DISRUPT_ANNOTATION, "karpenter.sh/do-not-disrupt"];

// CEL regexes are RE2 inside a single-quoted CEL string, where a backslash must be doubled.
const HEADROOM_KEYS_RULE: &str =
    r"self.all(p, p.matches('^([0-9]+g\\.[0-9]+gb(\\+me|\\+me\\.all|-me|\\+gfx)?|whole)$'))";

/// Which nodes Geometer manages and how: the mode, the profiles it may create, the spare capacity
/// to keep, when to plan, how much disruption is allowed, and how long the solver may run.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "geometer.dev",
    version = "v1alpha1",
    kind = "MigPolicy",
    plural = "migpolicies",
    shortname = "mpol",
    category = "geometer",
    status = "MigPolicyStatus",
    derive = "PartialEq",
    doc = "Which nodes Geometer manages and how it may change their MIG geometry.",
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.mode",
        description = "DryRun, Approve or Auto"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "integer",
        json_path = ".status.managedNodes",
        description = "Nodes this policy manages"
    ),
    printcolumn(
        name = "GPUs",
        type_ = "integer",
        json_path = ".status.managedGpus",
        description = "MIG-capable GPUs on those nodes"
    ),
    printcolumn(
        name = "Last-Plan",
        type_ = "string",
        json_path = ".status.lastPlan",
        description = "Most recent MigPlan of this policy"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MigPolicySpec {
    /// Nodes this policy manages. An empty selector selects every node; two policies must not
    /// select the same node.
    #[serde(default)]
    pub node_selector: LabelSelector,

    /// DryRun publishes plans only; Approve publishes and applies a plan once `spec.approved` is
    /// set on it; Auto applies at once.
    #[serde(default)]
    pub mode: PolicyMode,

    /// Profiles Geometer may create (e.g. `1g.10gb`). Empty means every standard profile of each
    /// GPU model; instances of other profiles that exist already are left alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = PROFILE_NAME_PATTERN)))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub allowed_profiles: Vec<String>,

    /// Spare free instances to keep per profile across the managed nodes, so that new pods of
    /// that profile start without waiting for a plan. Keyed by profile name; `whole` keeps
    /// spare whole GPUs (MIG off).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new(HEADROOM_KEYS_RULE).message("headroom keys must be MIG profile names such as 1g.10gb, or whole"))]
    pub headroom: BTreeMap<String, u32>,

    /// The modes Geometer may put a GPU in: `MIG` (partitioned, advertised as
    /// `nvidia.com/mig-*`) and `Whole` (MIG off, advertised as `nvidia.com/gpu`). Empty: both.
    /// A GPU already in a mode left out may stay in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub allowed_modes: Vec<GpuMode>,

    /// Whole GPUs to keep for whole-GPU work: Geometer never turns MIG on where that leaves
    /// fewer whole GPUs among the policy's nodes (or fewer than there are, where there are
    /// fewer already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_whole_gpus: Option<u32>,

    /// Forecast: when a round plans, the slices that pods created in the last this many seconds
    /// asked for are prepared too, on free capacity (after the pending pods, never by
    /// eviction), so that the pods that come next find them ready instead of waiting for a
    /// batch and a reconfiguration. A batch plus a reconfiguration is a good window; with a
    /// long stabilisationSeconds, up to half of it (a changed node stays as planned that long).
    /// 0: off.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forecast_window_seconds: u32,

    /// When a planning round starts after demand changes.
    #[serde(default)]
    pub batching: Batching,

    /// A node changed by a plan is not planned or changed again within this many seconds (none
    /// of its GPUs, changed or not), so that plans do not undo each other while demand flaps.
    #[serde(default = "default_stabilisation_seconds")]
    pub stabilisation_seconds: u32,

    /// Under a stabilisation window, a plan also gives the GPUs of a node it changes that are in
    /// MIG mode with no instance the geometry it gives most of that node's changed GPUs of their
    /// model (slices only where the GPU could not turn whole): until the window ends they would
    /// serve no pod. No pod is touched. false: they stay empty until a plan needs them.
    #[serde(default = "default_true")]
    pub shape_empty_gpus: bool,

    /// How much disruption a plan may cause.
    #[serde(default)]
    pub disruption: Disruption,

    /// Limits on the solver and on the size of one plan.
    #[serde(default)]
    pub solver: SolverLimits,

    /// Right-sizing at admission: a new pod that opted in (label `geometer.dev/rightsizing:
    /// enabled` on the pod or on its namespace) and asks for one whole GPU gets the MIG slice its
    /// workload was measured to need. Unset: off. Where several policies set it, the first by
    /// name is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rightsizing: Option<Rightsizing>,

    /// What Geometer may do on DynamicMIG nodes (NVIDIA's DRA driver makes each instance as a
    /// claim is prepared; Geometer never changes one there). Unset: it reports which claims
    /// fragmentation blocks, and moves nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_mig: Option<DynamicMig>,
}

/// What Geometer may do on DynamicMIG nodes beyond reporting fragmentation.
#[derive(KubeSchema, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicMig {
    /// Open room for a claim that fragmentation blocks by moving the cheapest set of pods on
    /// one GPU (a pod's cost: its `geometer.dev/move-cost` annotation, else 1 plus a minute's
    /// worth of its readiness delay; do-not-disrupt pods never move): DeviceTaintRules
    /// (NoSchedule) first keep other claims off the placement being opened, the node's agent
    /// then evicts the pods through the Eviction API under `disruption`'s rules (which must
    /// allow evictions), and the rules go once the claim is allocated, the claim is gone, or the
    /// drain timeout passes. Needs `mode: Auto` and a cluster that serves DeviceTaintRules;
    /// otherwise the plan only says what it would move.
    #[serde(default)]
    pub compact: bool,
}

/// A GPU's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum GpuMode {
    /// Partitioned into MIG instances.
    #[serde(rename = "MIG")]
    Mig,
    /// MIG mode off: one whole GPU.
    Whole,
}

/// What Geometer does with a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PolicyMode {
    /// Publish plans for review; never apply them.
    #[default]
    DryRun,
    /// Publish plans; apply one only after a person sets `spec.approved: true` on it.
    Approve,
    /// Apply plans as soon as they are published.
    Auto,
}

/// How right-sizing treats new pods that opted in.
#[derive(KubeSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rightsizing {
    /// DryRun only annotates a pod with the request it would get
    /// (`geometer.dev/would-rightsize`); Enforce replaces its `nvidia.com/gpu: 1` by the slice
    /// and records the change in `geometer.dev/rightsized`.
    #[serde(default)]
    pub mode: RightsizingMode,
    /// Room added on top of the measured peak memory and mean utilisation, percent.
    #[serde(default = "default_rightsizing_headroom_percent")]
    #[schemars(range(max = 100))]
    pub headroom_percent: u32,
    /// Samples each measured pod needs before its workload is right-sized.
    #[serde(default = "default_rightsizing_min_samples")]
    #[schemars(range(min = 1))]
    pub min_samples: u32,
}

impl crate::decode::Stored for MigPolicy {}

impl Default for Rightsizing {
    fn default() -> Self {
        Rightsizing {
            mode: RightsizingMode::default(),
            headroom_percent: default_rightsizing_headroom_percent(),
            min_samples: default_rightsizing_min_samples(),
        }
    }
}

/// What right-sizing does to a pod that opted in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RightsizingMode {
    /// Annotate the pod with the request it would get; change nothing else.
    #[default]
    DryRun,
    /// Replace the pod's `nvidia.com/gpu: 1` by the recommended slice, and annotate it.
    Enforce,
}

/// A round starts when demand has been quiet for `idleSeconds`, or `maxSeconds` after the first
/// change, whichever comes first.
#[derive(KubeSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.idleSeconds <= self.maxSeconds").message("batching.idleSeconds must not exceed batching.maxSeconds"))]
pub struct Batching {
    /// Quiet time after the last demand change before planning.
    #[serde(default = "default_idle_seconds")]
    pub idle_seconds: u32,
    /// Longest wait after the first demand change before planning anyway.
    #[serde(default = "default_max_seconds")]
    pub max_seconds: u32,
}

impl Default for Batching {
    fn default() -> Self {
        Batching { idle_seconds: default_idle_seconds(), max_seconds: default_max_seconds() }
    }
}

/// How much disruption a plan may cause.
#[derive(KubeSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Whether pods on instances that a plan removes may be evicted (through the Eviction API,
    /// honouring PodDisruptionBudgets). When false, only free instances are ever changed.
    #[serde(default)]
    pub eviction_allowed: bool,
    /// Pod annotation keys that forbid evicting the pod (value `"true"` or a duration since the
    /// pod started).
    #[serde(default = "default_do_not_disrupt_annotations")]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub do_not_disrupt_annotations: Vec<String>,
    /// Nodes being reconfigured at the same time, at most.
    #[serde(default = "default_max_nodes_reconfiguring")]
    #[schemars(range(min = 1))]
    pub max_nodes_reconfiguring: u32,
    /// How long a drain may wait for pods to leave before the node's change fails.
    #[serde(default = "default_drain_timeout_seconds")]
    pub drain_timeout_seconds: u32,
    /// Whether a GPU whose MIG mode changes only through a GPU reset (Ampere: A100, A30) may be
    /// reset by the agent, idle and alone, so that plans may change its mode. The agent must
    /// be started with `--allow-gpu-reset` too. Off: such a GPU keeps its mode.
    #[serde(default)]
    pub allow_gpu_reset: bool,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            eviction_allowed: false,
            do_not_disrupt_annotations: default_do_not_disrupt_annotations(),
            max_nodes_reconfiguring: default_max_nodes_reconfiguring(),
            drain_timeout_seconds: default_drain_timeout_seconds(),
            allow_gpu_reset: false,
        }
    }
}

/// Limits on the solver and on the size of one plan.
#[derive(KubeSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SolverLimits {
    /// Solver time limit; the best plan found so far is used when it runs out.
    #[serde(default = "default_time_limit_ms")]
    #[schemars(range(min = 1))]
    pub time_limit_ms: u32,
    /// GPUs one plan may change, at most (unset: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_gpus_changed: Option<u32>,
    /// Nodes one plan may change, at most (unset: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_nodes_changed: Option<u32>,
}

impl Default for SolverLimits {
    fn default() -> Self {
        SolverLimits {
            time_limit_ms: default_time_limit_ms(),
            max_gpus_changed: None,
            max_nodes_changed: None,
        }
    }
}

/// What the controller observed about the policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigPolicyStatus {
    /// `Ready`, `Invalid` (with the setting and what to do), `Planning`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Nodes the selector matches that have a MigNode.
    #[serde(default)]
    pub managed_nodes: u32,
    /// MIG-capable GPUs on the managed nodes.
    #[serde(default)]
    pub managed_gpus: u32,
    /// Name of the most recent MigPlan for this policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_plan: Option<String>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}
fn default_true() -> bool {
    true
}
fn default_stabilisation_seconds() -> u32 {
    600
}
fn default_idle_seconds() -> u32 {
    30
}
fn default_max_seconds() -> u32 {
    300
}
fn default_do_not_disrupt_annotations() -> Vec<String> {
    DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS.iter().map(|s| s.to_string()).collect()
}
fn default_max_nodes_reconfiguring() -> u32 {
    1
}
fn default_drain_timeout_seconds() -> u32 {
    600
}
fn default_rightsizing_headroom_percent() -> u32 {
    20
}
fn default_rightsizing_min_samples() -> u32 {
    30
}
fn default_time_limit_ms() -> u32 {
    5000
}
