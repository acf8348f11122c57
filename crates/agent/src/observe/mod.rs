//! What is there now: the inventory (NVML and the kubelet's PodResources), the catalog check,
//! the read-only probe, what pods use of the whole GPUs they hold (right-sizing), and everything
//! one round reads before it decides.

pub mod catalog_check;
pub(crate) mod device_holders;
pub(crate) mod dra;
pub(crate) mod inventory;
pub(crate) mod observation;
pub mod pod_resources;
pub(crate) mod probe;
pub(crate) mod sources;
pub(crate) mod usage;
pub(crate) mod watch;
