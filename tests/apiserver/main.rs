//! The in-memory API server, driven by the real kube client and kubectl.

mod api;
mod crd_types;
mod kubectl;
mod watch;
