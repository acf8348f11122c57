//! What Geometer's integration tests share: harnesses per area, builders and fixtures.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

pub mod agent;
pub mod control_plane;
pub mod controller;
pub mod crd_bounds;
pub mod deploy;
pub mod e2e;
pub mod kubectl_snapshot;
pub mod real_cluster;
pub mod simcluster;
pub mod trace;
pub mod wait;
