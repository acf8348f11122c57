//! Which nodes NVIDIA's DRA driver advertises, and how, read from its ResourceSlices.
//!
//! In static MIG mode the driver lists the MIG devices that exist, each with its `uuid`; in
//! DynamicMIG mode it lists a device for every profile and placement, each consuming counters
//! of its GPU's counter set (`spec.sharedCounters`, `devices[].consumesCounters`), and creates
//! the instance only when a claim is prepared (repository `kubernetes-sigs/dra-driver-nvidia-gpu`,
//! `cmd/gpu-kubelet-plugin/deviceinfo.go` and `cmd/gpu-kubelet-plugin/driver.go`).

use std::fmt;

/// The driver's name: the `spec.driver` of its ResourceSlices.
pub const NVIDIA_DRIVER: &str = "gpu.nvidia.com";

/// How the DRA driver advertises a node's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DraMode {
    /// The MIG devices that exist (an administrator's geometry).
    StaticMig,
    /// Every profile at every placement; the driver makes instances as claims need them.
    DynamicMig,
}

impl fmt::Display for DraMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DraMode::StaticMig => "static MIG",
            DraMode::DynamicMig => "DynamicMIG",
        })
    }
}

impl DraMode {
    /// The mode a slice shows: a counter set (`spec.sharedCounters`) or a device consuming
    /// counters is DynamicMIG.
    pub fn shown_by(shared_counters: bool, device_consumes_counters: bool) -> DraMode {
        if shared_counters || device_consumes_counters {
            DraMode::DynamicMig
        } else {
            DraMode::StaticMig
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::published::PublishedSlice;
    use serde_json::json;

    fn node_of_slice(slice: &serde_json::Value) -> Option<(String, DraMode)> {
        let slice: PublishedSlice = serde_json::from_value(slice.clone()).unwrap();
        Some((slice.node?, slice.mode))
    }

    #[test]
    fn a_slice_says_its_node_and_mode() {
        let static_slice = json!({"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n1",
            "devices": [{"name": "gpu-0-mig-1g10gb-19-0", "attributes": {"uuid": {"string": "MIG-1"}}}]}});
        assert_eq!(node_of_slice(&static_slice), Some(("n1".into(), DraMode::StaticMig)));
        let counters = json!({"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n2",
            "sharedCounters": [{"name": "gpu-0-counter-set", "counters": {"memory-slice-0": {"value": "1"}}}]}});
        assert_eq!(node_of_slice(&counters), Some(("n2".into(), DraMode::DynamicMig)));
        let consuming = json!({"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n3",
            "devices": [{"name": "gpu-0-mig-1g10gb-19-0", "consumesCounters": [{"counterSet": "gpu-0-counter-set"}]}]}});
        assert_eq!(node_of_slice(&consuming), Some(("n3".into(), DraMode::DynamicMig)));
        let no_node = json!({"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "allNodes": true}});
        assert_eq!(node_of_slice(&no_node), None);
    }
}
