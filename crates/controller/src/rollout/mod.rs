//! A published plan's life: approval, supersession, and the node-by-node rollout.

pub(crate) mod approval;
pub(crate) mod lifecycle;
pub(crate) mod sequence;
pub(crate) mod supersede;
