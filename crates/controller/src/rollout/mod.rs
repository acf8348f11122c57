//! A published plan's life: approval, supersession, and the node-by-node rollout.

pub mod approval;
pub mod lifecycle;
pub mod sequence;
pub mod supersede;
