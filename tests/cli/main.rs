//! The offline CLI: catalog, geometry and plan.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod catalog_geometry;
mod device_check;
mod hostile;
mod plan;
mod recommend;
