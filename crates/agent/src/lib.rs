//! The node agent. The folders follow its pipeline:
//! - [`observe`]: what is there now: NVML ([`nvml`]), the kubelet's PodResources, the
//!   inventory published in `MigNode.status`, the catalog check, and one round's observation.
//! - [`decide`]: what has to change on each GPU ([`decide::gpu_diff`]), the next step
//!   ([`decide::next_step`]), and the disruption rules a drain follows.
//! - [`steps`]: taking a step: cordon, drain (evictions through the Eviction API), pause
//!   and restore the GPU Operator's operands, repartition, re-advertise.
//! - [`runtime`]: the agent's loop, status and conditions, backoff.
//!
//! Crash safety: every step is written to `MigNode.status` before it is taken, and each round
//! starts from a fresh observation, so a restarted agent decides the same step again (every
//! step is idempotent: a destroy that finds nothing is done, a create is only decided when the
//! instance is missing, cordon and uncordon patches carry the node's resourceVersion).

pub(crate) mod decide;
pub mod nvml;
pub(crate) mod observe;
pub(crate) mod runtime;
pub(crate) mod steps;

pub use observe::dra::DEFAULT_DRA_PLUGIN_SELECTOR;
pub use observe::inventory::{check_catalog, read_inventory};
pub use observe::probe::{probe, ProbeGpu, ProbeReport};
pub use observe::sources::{
    Clock, DeviceAssignments, KubeletPodResources, SharedAssignments, StepHook, StepPoint,
};
pub use observe::{catalog_check, pod_resources};
pub use runtime::agent_loop::{Agent, AgentConfig, StepError};
pub use runtime::backoff::Backoff;
pub use runtime::metrics::AgentMetrics;
pub use runtime::status::half_built_summary;
pub use steps::advertise::{plugin_ready, DEFAULT_DEVICE_PLUGIN_SELECTOR};
pub use steps::cordon::{cordon, uncordon, Applied};
pub use steps::eviction::{evict, EvictionOutcome};
pub use steps::operands::OperandMode;

/// The agent's name in `managedFields` of what it writes (MigNode, Node cordons), so that
/// `kubectl get -o yaml --show-managed-fields` says who set a field.
pub const FIELD_MANAGER: &str = "geometer-agent";

/// Patch parameters naming the agent as field manager.
pub(crate) fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}
