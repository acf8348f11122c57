//! `MigPlan`: one planning round, published for review.
//!
//! The controller writes the whole spec once; afterwards only `spec.approved` may change (from
//! false to true), which the schema enforces with CEL transition rules. Lists carry `maxItems`
//! so that those rules stay within the API server's CEL cost budget; the summary counts
//! everything, also what a capped list had to leave out.
// kube's `CustomResource` derive makes rustc report the spec types as unreachable `pub`
// (a false positive: they are re-exported from the crate root).
#![allow(unreachable_pub)]
// kube-derive's repeated `printcolumn(...)` entries look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{PlacedInstance, GEOMETRY_PROFILE_PATTERN};

pub use crate::limits::{
    MAX_GPUS_PER_NODE, MAX_INSTANCES_PER_GPU, MAX_PLAN_DEMAND_ENTRIES, MAX_PLAN_EVICTIONS, MAX_PLAN_NODES,
};

/// One planning round: per node and GPU the current and target geometry with the operations
/// between them, the pods to evict, and which demand it meets and which it cannot.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "geometer.dev",
    version = "v1alpha1",
    kind = "MigPlan",
    plural = "migplans",
    shortname = "mplan",
    category = "geometer",
    status = "MigPlanStatus",
    derive = "PartialEq",
    doc = "One planning round of a MigPolicy, published for review. Immutable except spec.approved.",
    printcolumn(
        name = "Policy",
        type_ = "string",
        json_path = ".spec.policy",
        description = "MigPolicy that made the plan"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Proposed, Approved, Applying, Succeeded, Failed or Superseded"
    ),
    printcolumn(
        name = "Pods-Helped",
        type_ = "integer",
        json_path = ".spec.summary.podsHelped",
        description = "Pending pods the plan makes room for"
    ),
    printcolumn(
        name = "GPUs-Changed",
        type_ = "integer",
        json_path = ".spec.summary.gpusChanged",
        description = "GPUs whose geometry changes"
    ),
    printcolumn(
        name = "Evictions",
        type_ = "integer",
        json_path = ".spec.summary.evictions",
        description = "Pods the plan evicts"
    ),
    printcolumn(
        name = "Unmet",
        type_ = "integer",
        json_path = ".spec.summary.podsUnmet",
        description = "Pending pods the plan cannot help",
        priority = 1
    ),
    printcolumn(name = "Approved", type_ = "boolean", json_path = ".spec.approved", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
// `bound` is optional, and a field's own rule runs only when the old and new objects both have
// it: this one keeps a published plan from gaining or losing one.
#[x_kube(validation = Rule::new("has(self.bound) == has(oldSelf.bound)").field_path(".bound").message("spec.bound cannot be added to or removed from a published plan"))]
pub struct MigPlanSpec {
    /// The MigPolicy this plan belongs to.
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.policy is immutable"))]
    pub policy: String,

    /// Set to true to apply the plan under a policy in Approve mode. Cannot be withdrawn.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self || !oldSelf").message("spec.approved cannot go back to false; let a newer plan supersede this one instead"))]
    pub approved: bool,

    /// Per node, the GPUs whose geometry changes.
    #[serde(default)]
    #[schemars(length(max = MAX_PLAN_NODES))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.nodes is immutable"))]
    pub nodes: Vec<NodeChange>,

    /// Pods evicted because they use instances that go.
    #[serde(default)]
    #[schemars(length(max = MAX_PLAN_EVICTIONS))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.evictions is immutable"))]
    pub evictions: Vec<Eviction>,

    /// Which pending pods the plan helps and which it cannot.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.demand is immutable"))]
    pub demand: Demand,

    /// Objective value of the plan (higher is better).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.objective is immutable"))]
    pub objective: f64,

    /// Best objective any plan could reach (the LP relaxation); unset when the solver gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.bound is immutable"))]
    pub bound: Option<f64>,

    /// How long the solver ran.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.solveMs is immutable"))]
    pub solve_ms: u64,

    /// Counts for `kubectl get migplans`; [`MigPlanSpec::summarize`] computes them.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.summary is immutable"))]
    pub summary: PlanSummary,
}

impl crate::decode::Stored for MigPlan {}

impl MigPlanSpec {
    /// Counts from the lists. Call after filling them; a capped list may count fewer than the
    /// planner saw, so a caller that truncates should add what it left out.
    pub fn summarize(&self) -> PlanSummary {
        let changed_gpus = |n: &NodeChange| n.gpus.iter().filter(|g| g.changes()).count();
        PlanSummary {
            pods_helped: self.demand.met.len() as u32,
            pods_unmet: self.demand.unmet.len() as u32,
            gpus_changed: self.nodes.iter().map(|n| changed_gpus(n) as u32).sum(),
            nodes_changed: self.nodes.iter().filter(|n| changed_gpus(n) > 0).count() as u32,
            evictions: self.evictions.len() as u32,
        }
    }
}

impl MigPlan {
    /// The phase in the status; a plan without status yet is `Proposed`.
    pub fn phase(&self) -> MigPlanPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }
}

/// Counts shown by `kubectl get migplans`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanSummary {
    pub pods_helped: u32,
    pub pods_unmet: u32,
    pub gpus_changed: u32,
    pub nodes_changed: u32,
    pub evictions: u32,
}

/// The GPUs of one node that the plan changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeChange {
    pub node: String,
    #[schemars(length(max = MAX_GPUS_PER_NODE))]
    pub gpus: Vec<GpuChange>,
}

/// One GPU's change: from the current geometry to the target, and the operations in between.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuChange {
    /// NVML index of the GPU on its node.
    pub index: u32,
    /// Catalog key of the GPU model, e.g. `H100-80GB`.
    pub model: String,
    /// Geometry on the GPU when the plan was made.
    #[schemars(length(max = MAX_INSTANCES_PER_GPU))]
    pub from: Vec<PlacedInstance>,
    /// Target geometry.
    #[schemars(length(max = MAX_INSTANCES_PER_GPU))]
    pub to: Vec<PlacedInstance>,
    pub operations: GpuOperations,
}

impl GpuChange {
    /// Whether anything on the GPU is destroyed or created.
    pub fn changes(&self) -> bool {
        !self.operations.destroy.is_empty() || !self.operations.create.is_empty()
    }
}

/// Instances to destroy and to create; instances in both `from` and `to` are never touched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuOperations {
    #[serde(default)]
    #[schemars(length(max = MAX_INSTANCES_PER_GPU))]
    pub destroy: Vec<PlacedInstance>,
    #[serde(default)]
    #[schemars(length(max = MAX_INSTANCES_PER_GPU))]
    pub create: Vec<PlacedInstance>,
}

/// A pod the plan evicts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Eviction {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// Why, e.g. `uses 1g.10gb@3 on GPU 0, which the plan replaces`.
    pub reason: String,
}

/// Pending pods the plan helps and those it cannot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Demand {
    #[serde(default)]
    #[schemars(length(max = MAX_PLAN_DEMAND_ENTRIES))]
    pub met: Vec<DemandMet>,
    #[serde(default)]
    #[schemars(length(max = MAX_PLAN_DEMAND_ENTRIES))]
    pub unmet: Vec<DemandUnmet>,
    /// Gangs with pending members (PodGroups, Kueue pod groups): planned all or nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PLAN_DEMAND_ENTRIES))]
    pub gangs: Vec<DemandGang>,
}

/// A gang in a plan: how many members it places, and why one is left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DemandGang {
    /// `namespace/name` of the group.
    pub gang: String,
    pub min_members: u32,
    /// Members running already or placed by this plan.
    pub members: u32,
    /// E.g. `7 of 8 placeable on eligible nodes; needs 8`; absent when the gang is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A pending pod and the node where the plan makes a slice for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DemandMet {
    /// `namespace/name`.
    pub pod: String,
    #[schemars(regex(pattern = GEOMETRY_PROFILE_PATTERN))]
    pub profile: String,
    pub node: String,
}

/// A pending pod the plan cannot help, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DemandUnmet {
    /// `namespace/name`.
    pub pod: String,
    #[schemars(regex(pattern = GEOMETRY_PROFILE_PATTERN))]
    pub profile: String,
    /// E.g. `no node with a GPU that offers 7g.80gb matches the pod's node selector`.
    pub reason: String,
}

/// Lifecycle of a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MigPlanPhase {
    /// Published; waiting for approval (Approve mode) or for review only (DryRun).
    #[default]
    Proposed,
    /// Approved; waiting for its turn within the disruption limits.
    Approved,
    /// MigNode specs are being written and agents are working.
    Applying,
    /// Every node reached its target.
    Succeeded,
    /// A node could not reach its target; the message says which and why.
    Failed,
    /// The world changed before the plan was applied; a newer plan replaces it.
    Superseded,
}

impl MigPlanPhase {
    /// Whether the plan can no longer change phase.
    pub fn is_final(self) -> bool {
        matches!(self, MigPlanPhase::Succeeded | MigPlanPhase::Failed | MigPlanPhase::Superseded)
    }
}

/// Progress of a plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigPlanStatus {
    #[serde(default)]
    pub phase: MigPlanPhase,
    /// Per node of the plan, how far it got.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PLAN_NODES))]
    pub nodes: Vec<NodeProgress>,
    /// What a person should know about the current phase (e.g. why it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// How far one node of a plan got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeProgress {
    pub node: String,
    pub phase: NodeProgressPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the controller wrote the node's MigNode spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// Where one node of a plan stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum NodeProgressPhase {
    /// Not started (waiting for the disruption limits).
    #[default]
    Pending,
    /// MigNode spec written; the agent is working.
    Applying,
    Succeeded,
    Failed,
}
