//! Geometer: the operator, the node agent and the CLI.
//!
//! Data flows one way: `api` (CRD types) and the solver crate are leaves; the adapter turns
//! Kubernetes objects into solver snapshots; controller and agent use both.

pub mod adapter;
pub mod agent;
pub mod api;
pub mod apiserver;
pub mod cli;
pub mod controller;
pub mod interop;
pub mod sim;
pub mod demo;
pub mod simcluster;
