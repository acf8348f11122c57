//! The CRD types: round trips, schemas, the generated YAML, mig-parted interop.

mod crds_drift;
mod migparted;
mod roundtrip;
mod schema;
