//! The manifests in deploy/: rendering, CRDs, the Helm chart, the operator image (RBAC against what the code calls is tests/k8s/rbac.rs, on the real API server).
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod crds;
mod helm;
mod krew;
mod monitoring;
mod operator_image;
mod render;
