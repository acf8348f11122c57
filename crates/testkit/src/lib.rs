//! What Geometer's integration tests share: harnesses per area, builders and fixtures.

pub mod agent;
pub mod controller;
pub mod deploy;
pub mod e2e;
pub mod simcluster;
pub mod trace;
