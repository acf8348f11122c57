//! Taking a step: record it in status first, then cordon, drain, repartition or re-advertise.

pub(crate) mod advertise;
pub(crate) mod compaction;
pub(crate) mod cordon;
pub(crate) mod drain;
pub(crate) mod eviction;
pub(crate) mod operands;
pub(crate) mod take;
