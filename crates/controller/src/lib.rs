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
//! - [`runtime`]: the loop, its caches, leader election, health and metrics, and the
//!   execution of decided actions against the API server.
//!
//! Decisions are pure functions of plain values ([`world`] converts the cached objects), so
//! they are tested without a cluster.

pub mod adapter;
pub mod conditions;
pub mod planning;
pub mod policy;
pub mod rollout;
pub mod runtime;
pub mod world;

#[cfg(test)]
mod fixtures;

pub use runtime::health::Health;
pub use runtime::leader::LeaseSettings;
pub use runtime::main_loop::{run, RunError, Settings};
pub use runtime::metrics::Metrics;
