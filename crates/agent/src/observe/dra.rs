//! NVIDIA's DRA driver on the agent's node: whether it (or the device plugin, or both)
//! advertises the GPUs, which devices its newest complete pool publishes, and which of them an
//! allocated ResourceClaim holds.
//!
//! In static MIG mode the driver's kubelet plugin lists the MIG devices that exist when it
//! starts and never looks again, so after a change the agent restarts it and waits until its
//! pool lists exactly the UUIDs NVML has (repository `kubernetes-sigs/dra-driver-nvidia-gpu`,
//! `site/content/docs/concepts/gpu-allocation.md`: "The GPU kubelet plugin does not re-scan
//! hardware"). A claim holds its device from the moment kube-scheduler allocates it, before
//! any pod runs with it, so an instance an allocated claim names is never destroyed. In
//! DynamicMIG mode the driver makes and removes instances itself: the agent changes nothing.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{Device, ResourceClaim, ResourceSlice};
use kube::api::ListParams;
use kube::Api;

use geometer_api::resources::{is_mig_resource, GPU_RESOURCE};
use geometer_api::{DeviceStack, GpuInventory};

use crate::runtime::agent_loop::{Agent, StepError};

/// The driver's name: its ResourceSlices' `spec.driver`, and the driver PodResources names.
pub(crate) const DRA_DRIVER: &str = "gpu.nvidia.com";
/// Label selector of the driver's kubelet plugin pods (its Helm chart's `_helpers.tpl`).
pub const DEFAULT_DRA_PLUGIN_SELECTOR: &str = "dra-driver-nvidia-gpu-component=kubelet-plugin";

/// What the agent read of the DRA driver in a round.
#[derive(Debug, Clone)]
pub(crate) struct DraView {
    pub stack: DeviceStack,
    /// Device UUIDs the newest generation of the node's pool lists, once all its slices are
    /// there; `None` while it is incomplete or absent.
    pub published: Option<BTreeSet<String>>,
    /// Device UUID -> the allocated claim naming it (`namespace/name`), read only when an
    /// instance is to go.
    pub claimed: BTreeMap<String, String>,
}

impl DraView {
    /// A cluster without DRA: the device plugin's node.
    fn device_plugin() -> DraView {
        DraView { stack: DeviceStack::DevicePlugin, published: None, claimed: BTreeMap::new() }
    }

    pub(crate) fn is_static_dra(&self) -> bool {
        self.stack == DeviceStack::DraStaticMig
    }
}

/// The device UUIDs the driver publishes when it agrees with NVML: each MIG device (a GPU
/// instance with its compute instance) and each GPU with MIG mode off, whole. A GPU with MIG
/// mode on and no instance is published as nothing.
pub(crate) fn expected_uuids(gpus: &[GpuInventory]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for gpu in gpus {
        if !gpu.mig_mode.current {
            out.insert(gpu.uuid.clone());
        }
        out.extend(gpu.instances.iter().filter_map(|i| i.uuid.clone()));
    }
    out
}

/// How the published devices differ from NVML's, one entry per side; empty when they agree.
pub(crate) fn mismatches(expected: &BTreeSet<String>, published: Option<&BTreeSet<String>>) -> Vec<String> {
    let Some(published) = published else {
        return vec!["NVIDIA's DRA driver has not published a complete pool for the node".into()];
    };
    let missing: Vec<&String> = expected.difference(published).collect();
    let stale: Vec<&String> = published.difference(expected).collect();
    let mut out = Vec::new();
    if !missing.is_empty() {
        out.push(format!("{} device(s) on the GPUs not published yet (e.g. {})", missing.len(), missing[0]));
    }
    if !stale.is_empty() {
        out.push(format!("{} published device(s) no longer on the GPUs (e.g. {})", stale.len(), stale[0]));
    }
    out
}

/// Whether a Node's allocatable shows the device plugin's resources.
fn device_plugin_advertises(node: &Node) -> bool {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    allocatable
        .into_iter()
        .flatten()
        .any(|(k, q)| (is_mig_resource(k) || k == GPU_RESOURCE) && q.0.trim() != "0")
}

/// The newest generation of the NVIDIA pools among `slices`, with its devices (name -> uuid)
/// and whether DynamicMIG shows (counters); `None` devices while the pool is incomplete.
fn newest_pool(slices: &[ResourceSlice]) -> (Option<BTreeMap<String, String>>, bool) {
    let nvidia: Vec<&ResourceSlice> = slices.iter().filter(|s| s.spec.driver == DRA_DRIVER).collect();
    let dynamic = nvidia.iter().any(|s| {
        s.spec.shared_counters.as_ref().is_some_and(|c| !c.is_empty())
            || s.spec
                .devices
                .iter()
                .flatten()
                .any(|d| d.consumes_counters.as_ref().is_some_and(|c| !c.is_empty()))
    });
    let Some(generation) = nvidia.iter().map(|s| s.spec.pool.generation).max() else {
        return (None, dynamic);
    };
    let newest: Vec<&&ResourceSlice> =
        nvidia.iter().filter(|s| s.spec.pool.generation == generation).collect();
    let expected = newest.iter().map(|s| s.spec.pool.resource_slice_count).max().unwrap_or(1);
    if (newest.len() as i64) < expected {
        return (None, dynamic);
    }
    let devices =
        newest.iter().flat_map(|s| s.spec.devices.iter().flatten()).filter_map(named_uuid).collect();
    (Some(devices), dynamic)
}

/// A device's name and its `uuid` attribute, if it has one.
fn named_uuid(device: &Device) -> Option<(String, String)> {
    Some((device.name.clone(), device.attributes.as_ref()?.get("uuid")?.string.clone()?))
}

/// Device name -> `uuid` of NVIDIA's devices among `slices` (any generation, the newest
/// first): how a DRA device the kubelet reports by name is found in NVML.
pub(crate) fn device_uuids(slices: &[ResourceSlice]) -> BTreeMap<String, String> {
    let mut nvidia: Vec<&ResourceSlice> = slices.iter().filter(|s| s.spec.driver == DRA_DRIVER).collect();
    nvidia.sort_by_key(|s| s.spec.pool.generation);
    nvidia.into_iter().flat_map(|s| s.spec.devices.iter().flatten()).filter_map(named_uuid).collect()
}

/// Device UUID -> the allocated claim naming a device of `pool`.
fn claimed(
    claims: &[ResourceClaim],
    pool: &str,
    devices: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for claim in claims {
        let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else { continue };
        let name = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        for result in allocation.devices.iter().flat_map(|d| d.results.iter().flatten()) {
            if result.driver == DRA_DRIVER && result.pool == pool {
                if let Some(uuid) = devices.get(&result.device) {
                    out.insert(uuid.clone(), name.clone());
                }
            }
        }
    }
    out
}

impl Agent {
    /// The ResourceSlices published for this node, read once a round; `None` where the
    /// cluster does not serve `resource.k8s.io/v1`.
    pub(crate) async fn node_slices(&mut self) -> Result<Option<Vec<ResourceSlice>>, StepError> {
        if !self.serves_dra().await {
            return Ok(None);
        }
        let params = ListParams::default().fields(&format!("spec.nodeName={}", self.cfg.node));
        Ok(Some(Api::<ResourceSlice>::all(self.client.clone()).list(&params).await?.items))
    }

    /// Reads the DRA driver's view of the node from its `slices` ([`Agent::node_slices`]);
    /// `with_claims` also reads which devices allocated claims hold (every claim in the
    /// cluster: claims cannot be selected by node).
    pub(crate) async fn read_dra(
        &mut self,
        node: &Node,
        slices: Option<&[ResourceSlice]>,
        with_claims: bool,
    ) -> Result<DraView, StepError> {
        let Some(slices) = slices else {
            return Ok(DraView::device_plugin());
        };
        let (devices, dynamic) = newest_pool(slices);
        let dra =
            !slices.iter().all(|s| s.spec.driver != DRA_DRIVER) || !self.dra_plugin_pods().await?.is_empty();
        let stack = match (dra, device_plugin_advertises(node), dynamic) {
            (false, ..) => DeviceStack::DevicePlugin,
            (true, true, _) => DeviceStack::Both,
            (true, false, true) => DeviceStack::DraDynamicMig,
            (true, false, false) => DeviceStack::DraStaticMig,
        };
        let mut view = DraView {
            stack,
            published: devices.as_ref().map(|d| d.values().cloned().collect()),
            claimed: BTreeMap::new(),
        };
        if with_claims && stack == DeviceStack::DraStaticMig {
            let claims =
                Api::<ResourceClaim>::all(self.client.clone()).list(&ListParams::default()).await?.items;
            // The driver names its pool after the node (`cmd/gpu-kubelet-plugin/driver.go`).
            view.claimed = claimed(&claims, &self.cfg.node, &devices.unwrap_or_default());
        }
        self.mem.stack = Some(stack);
        Ok(view)
    }

    /// Whether the cluster serves `resource.k8s.io/v1` ResourceSlices; asked once.
    async fn serves_dra(&mut self) -> bool {
        if let Some(served) = self.mem.dra_served {
            return served;
        }
        match kube::discovery::group(&self.client, "resource.k8s.io").await {
            Ok(group) => {
                let served = group.versioned_resources("v1").iter().any(|(ar, _)| ar.kind == "ResourceSlice");
                self.mem.dra_served = Some(served);
                served
            }
            // The group is not served: a cluster before Kubernetes 1.34, asked no more.
            Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingApiGroup(_))) => {
                tracing::debug!("resource.k8s.io is not served: the device plugin's node");
                self.mem.dra_served = Some(false);
                false
            }
            // Discovery failed: asked again next round.
            Err(e) => {
                tracing::debug!(error = %e, "cannot tell whether resource.k8s.io/v1 is served; asked again");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_devices_agree_with_nvml_only_when_both_sides_match() {
        let expected: BTreeSet<String> = ["MIG-1", "MIG-2"].map(String::from).into();
        assert!(mismatches(&expected, Some(&expected)).is_empty());
        let old: BTreeSet<String> = ["MIG-1", "MIG-0"].map(String::from).into();
        let said = mismatches(&expected, Some(&old));
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].contains("MIG-2") && said[1].contains("MIG-0"), "{said:?}");
        assert_eq!(mismatches(&expected, None).len(), 1);
    }

    #[test]
    fn a_claim_allocated_on_this_nodes_pool_holds_its_device_by_uuid() {
        let claim = |name: &str, pool: &str, device: &str| -> ResourceClaim {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": DRA_DRIVER, "pool": pool, "device": device}]}}},
            }))
            .unwrap()
        };
        let devices = BTreeMap::from([("gpu-0-mig-1g10gb-19-5".to_string(), "MIG-5".to_string())]);
        let claims = [
            claim("mine", "node-a", "gpu-0-mig-1g10gb-19-5"),
            claim("elsewhere", "node-b", "gpu-0-mig-1g10gb-19-5"),
            ResourceClaim {
                metadata: kube::api::ObjectMeta { name: Some("pending".into()), ..Default::default() },
                ..Default::default()
            },
        ];
        assert_eq!(
            claimed(&claims, "node-a", &devices),
            BTreeMap::from([("MIG-5".to_string(), "ml/mine".to_string())])
        );
    }
}
