//! Geometer's solver: MIG hardware catalog, geometries and the planner.
//!
//! Pure: no Kubernetes, no async, no I/O beyond parsing text handed to it.

mod candidates;
pub mod catalog;
pub mod dynamic_mig;
pub mod geometry;
pub mod greedy;
pub(crate) mod ilp;
pub mod plan;
pub mod snapshot;
pub mod words;
pub mod yaml;

pub use geometry::GeometryCache;
pub use ilp::{plan, plan_cached};
pub use snapshot::PodKey;
