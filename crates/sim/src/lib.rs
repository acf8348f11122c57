//! `geometer simulate`: a trace-driven discrete-event simulator of a GPU cluster that compares
//! allocation strategies (whole GPUs, static MIG layouts, the greedy baseline, Geometer's ILP)
//! on the same workload.
//!
//! Data flows one way: a trace (`trace`) and a cluster (`cluster`) become a `workload`; the
//! `engine` runs each `strategy` over it and records `metrics`; `report` renders the summaries.

pub mod bound;
pub mod cluster;
pub mod dynamic_mig;
pub mod engine;
pub mod mapping;
pub mod metrics;
pub mod models;
pub mod report;
pub mod strategy;
pub mod trace;
pub mod usable;
pub mod workload;

use cluster::Cluster;
use engine::{Engine, SimError, Timings};
use metrics::Summary;
use strategy::Strategy;
use workload::Workload;

/// Runs every strategy over the same workload, one after another.
pub fn simulate(
    cluster: &Cluster,
    workload: &Workload,
    timings: Timings,
    strategies: &mut [Box<dyn Strategy>],
) -> Result<Vec<Summary>, SimError> {
    strategies
        .iter_mut()
        .map(|strategy| Engine::new(cluster, workload, timings, strategy.as_mut()).run())
        .collect()
}
