//! The manifests in deploy/: rendering, CRDs, RBAC against what the code calls.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod crds;
mod helm;
mod krew;
mod monitoring;
mod operator_image;
mod rbac;
mod rbac_controller;
mod render;
