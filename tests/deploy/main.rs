//! The manifests in deploy/: rendering, CRDs, RBAC against what the code calls.

mod crds;
mod rbac;
mod rbac_controller;
mod render;
