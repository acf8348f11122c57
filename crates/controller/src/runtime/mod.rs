//! The controller process: caches, leader election, the loop and its passes, the execution of
//! decided actions, health and metrics.

pub(crate) mod actions;
pub(crate) mod cache;
pub(crate) mod execute;
pub(crate) mod exposition;
pub(crate) mod fleet;
pub(crate) mod health;
pub(crate) mod leader;
pub(crate) mod main_loop;
pub(crate) mod metrics;
pub(crate) mod quarantine;
pub(crate) mod reconcile;
pub(crate) mod settings;
