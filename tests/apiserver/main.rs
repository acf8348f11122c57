//! The in-memory API server, driven by the real kube client and kubectl.
#![allow(clippy::type_complexity)] // shared watch contexts in tests are spelled out
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod crd_types;
mod crud;
mod faults_crds_events;
mod kubectl;
mod lifecycle;
mod objects;
mod patches;
mod pod_termination;
mod watch;
