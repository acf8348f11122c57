//! The node agent's hardware layer: NVML backends, the kubelet PodResources client, the
//! inventory published in `MigNode.status`, and the catalog check against NVML.

pub mod catalog_check;
pub mod inventory;
pub mod nvml;
pub mod pod_resources;
pub mod probe;
pub mod reconcile;
