//! From pending demand to a plan: batching, change detection, one policy's round, the MigPlan.

pub mod batching;
pub mod fingerprint;
pub mod naming;
pub mod plan_spec;
pub mod propose;
