//! The controller: from pending demand to published plans to rollout.
//!
//! Pure decisions live in small modules that take plain values and return decisions, so they
//! are tested without a cluster: [`batching`] (when a round starts), [`fingerprint`] (whether
//! anything changed), [`supersede`] (whether the world overtook a plan), [`rollout`] (which
//! nodes to write next and when a plan is done), [`policy_check`] (settings a person must fix).
//! The rest talks to the API server.

pub mod batching;
pub mod cache;
pub mod actions;
pub mod adapter;
pub mod approval;
pub mod conditions;
pub mod execute;
pub mod fingerprint;
pub mod health;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
pub mod naming;
pub mod pass;
pub mod policy_check;
pub mod plan_spec;
pub mod policy_status;
pub mod rollout;
pub mod round;
pub mod run;
pub mod selector;
pub mod supersede;
pub mod views;

#[cfg(test)]
pub(crate) mod fixtures;
