//! The controller: from pending demand to published plans to rollout.
//!
//! The folders follow the pipeline:
//! - [`adapter`]: Kubernetes objects -> a solver snapshot (also used by the offline
//!   `geometer plan`).
//! - [`planning`]: when a round starts ([`planning::batching`]), whether anything changed
//!   ([`planning::fingerprint`]), one policy's round from demand to a plan
//!   ([`planning::propose`]), the plan as a `MigPlan` ([`planning::plan_spec`]).
//! - [`rollout`]: a published plan's life ([`rollout::lifecycle`]), supersession, approval and
//!   which nodes are written next ([`rollout::sequence`]).
//! - [`policy`]: validation a CRD schema cannot do, selectors, and the policies' status.
//! - [`rightsizing`]: measured whole-GPU use -> a MIG profile per workload.
//! - [`runtime`]: the loop, its caches, leader election, health and metrics, and the
//!   execution of decided actions against the API server.
//!
//! Decisions are pure functions of plain values ([`world`] converts the cached objects), so
//! they are tested without a cluster.

pub mod adapter;
pub mod agent_evictions;
pub(crate) mod conditions;
pub mod dra;
pub(crate) mod planning;
pub(crate) mod policy;
pub mod rightsizing;
pub(crate) mod rollout;
pub(crate) mod runtime;
pub(crate) mod world;

#[cfg(test)]
mod fixtures;

pub use geometer_api::decoded::{Decoded, Unreadable};
pub use rollout::approval::{approve, ApprovalError, Approved};
pub use runtime::actions::{Action, EventSpec};
pub use runtime::cache::{list_dra, list_pod_groups, pod_group_kinds, Caches, OptionalKinds};
pub use runtime::execute::Executor;
pub use runtime::health::{serve as serve_health, Health, MetricsText};
pub use runtime::leader::{Leadership, LeaseSettings};
pub use runtime::main_loop::{run, RunError, Settings};
pub use runtime::metrics::Metrics;

/// What `geometer plan --live` runs: one policy's round and the policies' validation, exactly
/// as the controller does them.
pub mod round {
    pub use crate::planning::propose::{options, prepare, Prepared, RoundInput};
    pub use crate::policy::status::{known_profiles, node_facts, validate};
}
