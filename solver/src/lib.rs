//! Geometer's solver: MIG hardware catalog, geometries and the planner.
//!
//! Pure: no Kubernetes, no async, no I/O beyond parsing text handed to it.

pub mod catalog;
pub mod geometry;
pub mod snapshot;
pub mod plan;
mod candidates;
pub mod ilp;
pub mod greedy;

pub use ilp::plan;
