//! The controller process: caches, leader election, the loop and its passes, the execution of
//! decided actions, health and metrics.

pub mod actions;
pub mod cache;
pub mod execute;
pub mod health;
pub mod leader;
pub mod main_loop;
pub mod metrics;
pub mod reconcile;
pub mod settings;
