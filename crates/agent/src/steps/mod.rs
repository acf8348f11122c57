//! Taking a step: record it in status first, then cordon, drain, repartition or re-advertise.

pub mod advertise;
pub mod cordon;
pub(crate) mod drain;
pub mod eviction;
pub(crate) mod take;
