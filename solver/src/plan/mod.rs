//! Planning output, and the steps shared by every planner: preparing a snapshot into a
//! [`Problem`](prepare::Problem), assigning pods to the slices a decision leaves, and turning a
//! decision into a [`Plan`] with reasons and an objective that both planners score alike.

pub(crate) mod assign;
mod gang_capacity;
pub(crate) mod gangs;
pub(crate) mod prepare;
pub(crate) mod realize;
mod render;
pub mod slots;
mod window;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::snapshot::{PodKey, SnapshotError};

/// Knobs that are not part of the cluster's policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanOptions {
    /// Overrides `policy.timeLimitMs`; default 10 s.
    pub time_limit: Option<Duration>,
    /// Plan every pod on its own, as if none were in a gang (for comparisons: the simulator's
    /// gang-unaware baseline).
    pub ignore_gangs: bool,
}

pub use gangs::GangOutcome;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// Which planner produced the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SolverUsed {
    Ilp,
    /// The ILP failed, ran out of time without a plan, or found a worse one than greedy.
    GreedyFallback,
    /// The greedy baseline was asked for directly.
    Greedy,
}

/// An instance in a plan: profile name and start.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PlacedName {
    pub profile: String,
    pub start: u8,
}

/// One GPU: where it is, what it has, what it gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuPlan {
    pub node: String,
    pub index: u32,
    /// Catalog key.
    pub model: String,
    pub from: Vec<PlacedName>,
    pub to: Vec<PlacedName>,
    /// Instances destroyed, then created (largest first); instances that stay are not listed.
    pub destroy: Vec<PlacedName>,
    pub create: Vec<PlacedName>,
    pub changed: bool,
}

/// A pod the plan evicts, and where its slices are made again.
impl GpuPlan {
    /// `MIG off` (the GPU becomes whole), `MIG on` (a whole GPU is partitioned), or `None`
    /// where the mode stays.
    pub fn mode_change(&self) -> Option<&'static str> {
        let whole = |list: &[PlacedName]| list.iter().any(|p| p.profile == crate::catalog::WHOLE);
        match (whole(&self.from), whole(&self.to)) {
            (false, true) => Some("MIG off: a whole GPU"),
            (true, false) => Some("MIG on"),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eviction {
    pub pod: PodKey,
    pub node: String,
    pub gpu: u32,
    /// Node the pod is expected to land on again.
    pub rescheduled_to: String,
}

/// How a pending pod is expected to get its slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SliceSource {
    /// Free slices of its profiles already exist on an eligible node: not demand for new ones.
    ExistingSlices,
    /// The plan creates the slices it needs.
    NewSlices,
    /// Left out; see `reason`.
    Unmet,
}

/// Why a pending pod is left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum UnmetReason {
    /// No managed GPU model has this profile.
    UnknownProfile { profile: String },
    /// The profile exists but the policy does not allow creating it.
    ProfileNotAllowed { profile: String },
    /// No managed node passes the pod's constraints; `detail` says which constraint excluded
    /// how many nodes.
    NoEligibleNode { detail: String },
    /// Eligible nodes exist but not enough slices could be made there (hardware limits, or
    /// higher-priority demand took them).
    Capacity { detail: String },
    /// Room could have been made but a policy limit stopped it.
    PolicyLimit { limit: String },
    /// Its gang cannot reach its minimum in this plan, so none of its members gets slices.
    Gang { detail: String },
}

impl UnmetReason {
    pub fn summary(&self) -> String {
        match self {
            UnmetReason::UnknownProfile { profile } if profile == crate::catalog::WHOLE => {
                "no managed GPU can be planned now to be a whole GPU".to_string()
            }
            UnmetReason::UnknownProfile { profile } => format!("no managed GPU offers profile {profile}"),
            UnmetReason::ProfileNotAllowed { profile } if profile == crate::catalog::WHOLE => {
                "the policy's allowedModes leave whole GPUs out".to_string()
            }
            UnmetReason::ProfileNotAllowed { profile } => {
                format!("profile {profile} is not in the policy's allowedProfiles")
            }
            UnmetReason::NoEligibleNode { detail } => format!("no eligible node: {detail}"),
            UnmetReason::Capacity { detail } => format!("capacity: {detail}"),
            UnmetReason::PolicyLimit { limit } => format!("policy limit reached: {limit}"),
            UnmetReason::Gang { detail } => detail.clone(),
        }
    }
}

/// The fate of one pending pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodOutcome {
    pub pod: PodKey,
    pub priority: i32,
    /// Requested slices, `profile: count`.
    pub requests: std::collections::BTreeMap<String, u32>,
    /// Node the pod is expected to land on; null when unmet.
    pub node: Option<String>,
    pub placement: SliceSource,
    /// Present exactly when `node` is null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<UnmetReason>,
}

/// The plan's score, compared lexicographically in field order (`evictions` and
/// `gpus_changed` count against it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Objective {
    /// Pending pods given new slices, each weighted by its priority rank (1 for the lowest
    /// priority present, +1 per higher priority value).
    pub demand_met: u64,
    /// The same pods, counted.
    pub pods_met: u32,
    pub evictions: u32,
    /// Expected pods ([`crate::snapshot::Snapshot::expected`]) given new slices.
    #[serde(default)]
    pub expected: u32,
    /// GPUs the planner changes. The empty GPUs a stabilisation window has the plan shape
    /// as well are not counted (a note says how many; `plan::window`).
    pub gpus_changed: u32,
    /// Spare slices kept, counted up to each profile's headroom.
    pub headroom: u32,
    /// Sum of squared sizes (placement units) of the instances left free: larger free
    /// instances can be split later without touching a pod.
    pub free_ranges: u64,
}

impl Objective {
    /// Lexicographic order of the planner's goals: `Greater` means better.
    pub fn better(&self, other: &Objective) -> std::cmp::Ordering {
        self.levels()
            .iter()
            .zip(other.levels())
            .map(|(a, b)| a.1.cmp(&b.1))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    }

    /// The first level, in the objective's order, where two plans differ: its name and both
    /// values (this plan's first).
    pub fn first_difference(&self, other: &Objective) -> Option<(&'static str, i64, i64)> {
        self.levels()
            .iter()
            .zip(other.levels())
            .find(|(a, b)| a.1 != b.1)
            .map(|(a, b)| (a.0, a.1.abs(), b.1.abs()))
    }

    /// The levels in order, each as a number to maximise (minimised ones negated).
    fn levels(&self) -> [(&'static str, i64); 6] {
        [
            ("demand met", self.demand_met as i64),
            ("evictions", -(self.evictions as i64)),
            ("expected pods given room", self.expected as i64),
            ("GPUs changed", -(self.gpus_changed as i64)),
            ("headroom", self.headroom as i64),
            ("free ranges", self.free_ranges as i64),
        ]
    }
}

/// A complete plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub solver: SolverUsed,
    /// The current placements were guessed from labels and counts.
    pub placements_inferred: bool,
    /// Every managed GPU, by node name then index.
    pub gpus: Vec<GpuPlan>,
    pub evictions: Vec<Eviction>,
    /// Every pending pod, by descending priority then name.
    pub pods: Vec<PodOutcome>,
    pub objective: Objective,
    /// Upper bound on `objective.demand_met` (the LP relaxation, or all plannable demand when
    /// no LP was solved).
    pub bound: f64,
    /// `(bound - demand_met) / bound`, 0 when the bound is 0.
    pub gap: f64,
    pub solve_ms: u64,
    /// Anything a reviewer should know: time limit hit, fallback reasons, approximations.
    pub notes: Vec<String>,
    /// Every gang with pending members: how many the plan places, and why one is left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gangs: Vec<GangOutcome>,
}

impl Plan {
    pub fn changed_gpus(&self) -> impl Iterator<Item = &GpuPlan> {
        self.gpus.iter().filter(|g| g.changed)
    }

    /// A terraform-plan-like text for people to review, each changed GPU drawn before and
    /// after as a row of its placement units (models of the built-in catalog; see
    /// [`Plan::render_table_with`]).
    pub fn render_table(&self) -> String {
        render::table(self, crate::catalog::Catalog::builtin())
    }

    /// [`Plan::render_table`] with the GPU models of `catalog` (the one the plan was made with).
    pub fn render_table_with(&self, catalog: &crate::catalog::Catalog) -> String {
        render::table(self, catalog)
    }
}
