//! The offline CLI: catalog, geometry and plan.

mod catalog_geometry;
mod plan;
