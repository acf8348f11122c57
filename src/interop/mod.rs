//! Interoperability with other tools' file formats.
//!
//! - [`migparted`]: NVIDIA's mig-parted configs (what the GPU Operator's mig-manager applies),
//!   read into a MigPolicy and written from MigNodes, MigPlans and snapshots.

pub mod migparted;
