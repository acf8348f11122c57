//! From pending demand to a plan: batching, change detection, one policy's round, the MigPlan.

pub(crate) mod batching;
pub(crate) mod fingerprint;
pub(crate) mod naming;
pub(crate) mod plan_spec;
pub(crate) mod propose;
pub(crate) mod review;
