//! Re-advertising: after the GPUs change, the NVIDIA device plugin (mixed strategy) must
//! enumerate the new MIG devices, and the node's allocatable must show one
//! `nvidia.com/mig-<profile>` per device, and `nvidia.com/gpu` per GPU with MIG off, before
//! pods can use them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};

use geometer_api::GpuInventory;

/// Prefix of the device plugin's MIG resources.
use geometer_api::resources::{is_mig_resource, mig_resource, GPU_RESOURCE};

/// Label selector of the NVIDIA device plugin pods when none is configured (the GPU Operator's
/// and the plugin's own Helm chart both label its DaemonSet pods so).
pub const DEFAULT_DEVICE_PLUGIN_SELECTOR: &str = "app=nvidia-device-plugin-daemonset";

/// MIG devices per resource name, counted from the GPUs (every GPU, listed in the spec or
/// not: the device plugin advertises all of them). A GPU instance without its compute instance
/// is no device.
pub(crate) fn expected(gpus: &[GpuInventory]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for instance in gpus.iter().flat_map(|g| &g.instances).filter(|i| i.uuid.is_some()) {
        *out.entry(mig_resource(&instance.profile)).or_insert(0) += 1;
    }
    let whole = gpus.iter().filter(|g| !g.mig_mode.current).count() as u64;
    if whole > 0 {
        out.insert(GPU_RESOURCE.to_string(), whole);
    }
    out
}

/// MIG resources in the node's allocatable. A quantity that is not a whole number counts as 0
/// (the device plugin only ever advertises whole devices).
pub(crate) fn advertised(node: &Node) -> BTreeMap<String, u64> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|alloc| {
            alloc
                .iter()
                .filter(|(name, _)| is_mig_resource(name) || *name == GPU_RESOURCE)
                .map(|(name, q)| (name.clone(), q.0.trim().parse().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

/// Differences as `resource: N on the GPUs, M advertised`; empty when they agree. A resource
/// advertised as 0 equals one not advertised (the kubelet keeps stale names at 0).
pub(crate) fn mismatches(
    expected: &BTreeMap<String, u64>,
    advertised: &BTreeMap<String, u64>,
) -> Vec<String> {
    let mut names: Vec<&String> = expected.keys().chain(advertised.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let want = expected.get(name).copied().unwrap_or(0);
            let have = advertised.get(name).copied().unwrap_or(0);
            // A device plugin that time-slices whole GPUs advertises `replicas` per GPU
            // (NVIDIA/k8s-device-plugin, README "Shared Access to GPUs"): a multiple agrees.
            let replicated = *name == GPU_RESOURCE && want > 0 && have > want && have % want == 0;
            (want != have && !replicated).then(|| format!("{name}: {want} on the GPUs, {have} advertised"))
        })
        .collect()
}

/// Running, not being deleted, and every container ready: the plugin has registered with the
/// kubelet.
pub fn plugin_ready(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = &pod.status else { return false };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .as_ref()
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeStatus, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use geometer_api::{MigInstance, MigModeStatus};

    fn gpu(instances: &[(&str, bool)]) -> GpuInventory {
        GpuInventory {
            index: 0,
            uuid: "GPU-0".into(),
            model: "H100-80GB".into(),
            pci_device_id: "0x233010DE".into(),
            mig_mode: MigModeStatus { current: true, pending: true },
            instances: instances
                .iter()
                .enumerate()
                .map(|(i, &(profile, device))| MigInstance {
                    profile: profile.into(),
                    start: i as u8,
                    size: 1,
                    gpu_instance_id: i as u32 + 1,
                    compute_instance_id: device.then_some(0),
                    uuid: device.then(|| format!("MIG-{i}")),
                    pod: None,
                    processes: 0,
                    shared_with: Vec::new(),
                    rebuild: None,
                })
                .collect(),
            pod: None,
            shared_with: vec![],
            advertised_as: Default::default(),
            free_placements: Vec::new(),
        }
    }

    fn node(alloc: &[(&str, &str)]) -> Node {
        Node {
            status: Some(NodeStatus {
                allocatable: Some(
                    alloc.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn devices_are_counted_per_profile_and_bare_gpu_instances_are_not() {
        let e = expected(&[gpu(&[("1g.10gb", true), ("1g.10gb", true), ("2g.20gb", false)])]);
        assert_eq!(e, BTreeMap::from([("nvidia.com/mig-1g.10gb".to_string(), 2)]));
    }

    #[test]
    fn stale_profiles_at_zero_agree_and_any_other_difference_is_named() {
        let e = expected(&[gpu(&[("1g.10gb", true), ("3g.40gb", true)])]);
        let ok = node(&[
            ("nvidia.com/mig-1g.10gb", "1"),
            ("nvidia.com/mig-3g.40gb", "1"),
            ("nvidia.com/mig-7g.80gb", "0"),
            ("cpu", "64"),
        ]);
        assert!(mismatches(&e, &advertised(&ok)).is_empty());
        let stale = node(&[("nvidia.com/mig-7g.80gb", "1")]);
        let diff = mismatches(&e, &advertised(&stale));
        assert_eq!(
            diff,
            vec![
                "nvidia.com/mig-1g.10gb: 1 on the GPUs, 0 advertised".to_string(),
                "nvidia.com/mig-3g.40gb: 1 on the GPUs, 0 advertised".to_string(),
                "nvidia.com/mig-7g.80gb: 0 on the GPUs, 1 advertised".to_string(),
            ]
        );
    }

    #[test]
    fn gpus_with_mig_off_are_advertised_whole() {
        let mut off = gpu(&[]);
        off.mig_mode = MigModeStatus { current: false, pending: false };
        let e = expected(&[off.clone(), off, gpu(&[("1g.10gb", true)])]);
        assert_eq!(e.get(GPU_RESOURCE), Some(&2));
        let both = node(&[("nvidia.com/gpu", "2"), ("nvidia.com/mig-1g.10gb", "1")]);
        assert!(mismatches(&e, &advertised(&both)).is_empty());
        let time_sliced = node(&[("nvidia.com/gpu", "8"), ("nvidia.com/mig-1g.10gb", "1")]);
        assert!(mismatches(&e, &advertised(&time_sliced)).is_empty(), "4 replicas per GPU");
        let still_mig = node(&[("nvidia.com/mig-1g.10gb", "1"), ("nvidia.com/mig-7g.80gb", "2")]);
        assert_eq!(mismatches(&e, &advertised(&still_mig)).len(), 2);
    }

    #[test]
    fn a_plugin_pod_is_ready_when_running_with_ready_containers() {
        let mut pod = Pod::default();
        assert!(!plugin_ready(&pod));
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(plugin_ready(&pod));
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(!plugin_ready(&pod));
    }
}
