//! The Kubernetes API of Geometer: `geometer.dev/v1alpha1`, all cluster-scoped.
//!
//! - [`MigPolicy`]: which nodes are managed and how (mode, allowed profiles, headroom, batching,
//!   disruption limits, solver limits).
//! - [`MigPlan`]: one planning round, published for review; immutable except `spec.approved`.
//! - [`MigNode`]: one per managed node (same name); spec is the controller's desired geometry,
//!   status is the agent's inventory and progress.
//!
//! The CRD YAML in `crds/` is generated from these types (`geometer crds`); a test fails when
//! the two drift.

pub mod node;
pub mod plan;
pub mod policy;

pub mod decode;
pub mod decoded;
pub mod do_not_disrupt;
pub mod gpu_operator;
pub mod limits;
pub mod merge_patch;
pub mod metrics_text;
pub mod migparted;
pub mod names;
pub mod quantity;
pub mod resources;
pub mod schema_bounds;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use node::{
    AgentStep, CatalogDisagreement, Compaction, DeviceStack, GpuGeometry, GpuInventory, MigInstance,
    MigModeStatus, MigNode, MigNodePhase, MigNodeSpec, MigNodeStatus, PlacementRun, PodGpuUsage, PodRef,
    StepAction,
};
pub use plan::{
    Demand, DemandGang, DemandMet, DemandUnmet, Eviction, GpuChange, GpuOperations, MigPlan, MigPlanPhase,
    MigPlanSpec, MigPlanStatus, NodeChange, NodeProgress, NodeProgressPhase, PlanSummary,
};
pub use plan::{MAX_PLAN_DEMAND_ENTRIES, MAX_PLAN_EVICTIONS, MAX_PLAN_NODES};
pub use policy::{
    Batching, Disruption, DynamicMig, GpuMode, MigPolicy, MigPolicySpec, MigPolicyStatus, PolicyMode,
    Rightsizing, RightsizingMode, SolverLimits, DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS,
};

/// Re-exported so users of the API need not depend on k8s-openapi's path for conditions.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// API group of every Geometer resource.
pub const GROUP: &str = "geometer.dev";
/// API version of every Geometer resource.
pub const VERSION: &str = "v1alpha1";

/// Pod annotation that forbids evicting the pod (the policy may list more keys).
pub const DO_NOT_DISRUPT_ANNOTATION: &str = "geometer.dev/do-not-disrupt";
/// Node annotation the agent sets on a node it cordoned, so that it never uncordons a node a
/// person cordoned.
pub const CORDONED_BY_ANNOTATION: &str = "geometer.dev/cordoned-by";

/// MIG profile names as NVML's tools print them: `<compute>g.<memory>gb` with an optional
/// variant suffix (`+me`, `+me.all`, `-me`, `+gfx`). The same pattern is in the CRD schema.
pub const PROFILE_NAME_PATTERN: &str = r"^[0-9]+g\.[0-9]+gb(\+me|\+me\.all|-me|\+gfx)?$";

/// A profile in a geometry or a demand: a MIG profile name, or `whole` for the whole GPU (MIG
/// mode off, `nvidia.com/gpu`). The same pattern is in the CRD schema.
pub const GEOMETRY_PROFILE_PATTERN: &str = r"^([0-9]+g\.[0-9]+gb(\+me|\+me\.all|-me|\+gfx)?|whole)$";

/// Whether `name` matches [`PROFILE_NAME_PATTERN`], checked without a regex engine so callers
/// (policy validation, CLI) can reject bad names before the API server does.
pub fn is_profile_name(name: &str) -> bool {
    fn digits(s: &str) -> Option<&str> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        (end > 0).then(|| &s[end..])
    }
    let Some(rest) = digits(name) else { return false };
    let Some(rest) = rest.strip_prefix("g.") else { return false };
    let Some(rest) = digits(rest) else { return false };
    let Some(suffix) = rest.strip_prefix("gb") else { return false };
    matches!(suffix, "" | "+me" | "+me.all" | "-me" | "+gfx")
}

/// One GPU instance in a geometry: a profile at a start placement unit (NVML's memory slice).
/// The CRD form of the solver's `Placed`, with the profile by name so it reads in `kubectl`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacedInstance {
    /// MIG profile name, e.g. `1g.10gb`; `whole` (alone, at 0) for the GPU with MIG mode off.
    #[schemars(regex(pattern = GEOMETRY_PROFILE_PATTERN))]
    pub profile: String,
    /// First placement unit the instance covers.
    pub start: u8,
}

impl PlacedInstance {
    pub fn new(profile: impl Into<String>, start: u8) -> Self {
        PlacedInstance { profile: profile.into(), start }
    }
}

impl std::fmt::Display for PlacedInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.profile, self.start)
    }
}

/// Every Geometer CRD, in the order `geometer crds` prints them, every open field bounded
/// ([`schema_bounds`]).
pub fn crds() -> Vec<CustomResourceDefinition> {
    [MigPolicy::crd(), MigPlan::crd(), MigNode::crd()].into_iter().map(schema_bounds::bounded).collect()
}

/// The CRDs as one YAML multi-document stream, exactly what `crds/` holds.
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// File name under `crds/` for a CRD, e.g. `migpolicies.geometer.dev.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// One CRD as a YAML document (for the per-CRD files under `crds/`).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(crd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_follow_the_schema_pattern() {
        for ok in
            ["1g.10gb", "7g.80gb", "1g.12gb+me", "1g.24gb+me.all", "1g.24gb-me", "2g.24gb+gfx", "10g.100gb"]
        {
            assert!(is_profile_name(ok), "{ok} should be accepted");
        }
        for bad in [
            "",
            "1g",
            "g.10gb",
            "1g.gb",
            "1g.10GB",
            "1c.1g.10gb",
            "1g.10gb+foo",
            "1g.10gb ",
            "nvidia.com/mig-1g.10gb",
        ] {
            assert!(!is_profile_name(bad), "{bad} should be rejected");
        }
    }
}
