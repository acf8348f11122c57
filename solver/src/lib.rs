//! Geometer's solver: MIG hardware catalog, geometries and the planner.
//!
//! Pure: no Kubernetes, no async, no I/O beyond parsing text handed to it.

pub mod catalog;
pub mod geometry;
