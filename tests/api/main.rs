//! The CRD types: round trips, schemas, the generated YAML, mig-parted interop.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod crd_bounds;
mod crds_drift;
mod migparted;
mod roundtrip;
mod schema;
