//! NVIDIA's DRA driver (`gpu.nvidia.com`) in its static MIG mode, simulated: its kubelet plugin
//! pod, and the one ResourceSlice per node the plugin publishes when it starts, listing the MIG
//! devices that exist then (and each GPU with MIG mode off whole). The real plugin never
//! re-scans, so a new geometry is published only when its pod is restarted.
//!
//! The shapes follow the driver's code, repository `kubernetes-sigs/dra-driver-nvidia-gpu`:
//! device names and the MIG attributes in `cmd/gpu-kubelet-plugin/mig.go`, the attributes and
//! capacities of both kinds of device in `cmd/gpu-kubelet-plugin/deviceinfo.go`, one slice of
//! pool `<node>` owned by the Node in `cmd/gpu-kubelet-plugin/driver.go`. Nobody should read a
//! device's name for its geometry (its format changed between releases): the `uuid` attribute
//! joins a device to NVML's instance, `profile` says its profile.

use std::collections::BTreeMap;

use geometer_api::GpuInventory;
use geometer_solver::catalog::{Catalog, GpuModel, WHOLE};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use super::node::Device;

/// The driver's name, the domain of its device attributes and capacities.
pub const DRA_DRIVER: &str = "gpu.nvidia.com";
/// Namespace of the driver's kubelet plugin pods (its Helm chart's default).
pub const DRA_PLUGIN_NAMESPACE: &str = "dra-driver-nvidia-gpu";
/// Label of the driver's kubelet plugin pods (its Helm chart's `_helpers.tpl`).
pub const DRA_PLUGIN_LABEL: (&str, &str) = ("dra-driver-nvidia-gpu-component", "kubelet-plugin");

/// The name the driver gives a device: `gpu-<minor>` for a whole GPU,
/// `gpu-<minor>-mig-<profile without dots, + as ->-<GPU instance profile id>-<start>` for a
/// MIG device (`mig.go`).
pub fn device_name(model: Option<&GpuModel>, device: &Device) -> String {
    if device.profile == WHOLE {
        return format!("gpu-{}", device.gpu);
    }
    let profile_id = model
        .and_then(|m| m.profile(&device.profile).map(|id| m.profile_info(id)))
        .and_then(|p| p.nvidia_smi_profile_id)
        .map_or_else(|| "x".to_string(), |id| id.to_string());
    let profile = device.profile.replace('.', "").replace('+', "-");
    format!("gpu-{}-mig-{profile}-{profile_id}-{}", device.gpu, device.start)
}

/// A kubelet plugin pod on a node, as the driver's DaemonSet creates it (pending; the kubelet
/// runs it).
pub(crate) fn plugin_pod(node: &str, serial: u32) -> Pod {
    let container = json!({"name": "gpus", "image": "registry.k8s.io/dra-driver-nvidia-gpu/dra-driver-nvidia-gpu:v0.5.0"});
    let name = format!("dra-kubelet-plugin-{node}-{serial}");
    crate::objects::node_daemon_pod(&name, DRA_PLUGIN_NAMESPACE, DRA_PLUGIN_LABEL, node, container)
}

pub fn is_plugin(pod: &Pod) -> bool {
    pod.metadata.namespace.as_deref() == Some(DRA_PLUGIN_NAMESPACE)
        && pod.metadata.labels.as_ref().and_then(|l| l.get(DRA_PLUGIN_LABEL.0)).map(String::as_str)
            == Some(DRA_PLUGIN_LABEL.1)
}

/// The name of a node's one ResourceSlice.
pub fn slice_name(node: &str) -> String {
    format!("{node}-{DRA_DRIVER}")
}

/// The ResourceSlice the plugin publishes for `devices` (by device name), pool generation
/// `generation`, owned by the Node so that it goes with it.
pub(crate) fn resource_slice(
    node: &str,
    node_uid: &str,
    generation: i64,
    gpus: &[GpuInventory],
    devices: &BTreeMap<String, Device>,
    catalog: &Catalog,
) -> Value {
    let listed: Vec<Value> = devices
        .iter()
        .filter_map(|(name, d)| {
            let gpu = gpus.iter().find(|g| g.index == d.gpu)?;
            Some(device_entry(name, d, gpu, catalog.find(&gpu.model)))
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": true}],
        },
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": listed,
        },
    })
}

/// Publishes the node's one ResourceSlice for `devices`: created, or replaced with its pool
/// generation one past the last, as the plugin's slice controller bumps it on every change.
pub(crate) async fn publish(
    client: &kube::Client,
    node: &str,
    gpus: &[GpuInventory],
    devices: &BTreeMap<String, Device>,
    catalog: &Catalog,
) -> Result<(), kube::Error> {
    let node_uid = Api::<Node>::all(client.clone()).get(node).await?.uid().unwrap_or_default();
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let name = slice_name(node);
    let old = slices.get_opt(&name).await?;
    let generation = old.as_ref().map_or(0, |s| s.spec.pool.generation) + 1;
    let mut slice: ResourceSlice =
        serde_json::from_value(resource_slice(node, &node_uid, generation, gpus, devices, catalog))
            .expect("a ResourceSlice");
    match old {
        Some(old) => {
            slice.metadata.resource_version = old.metadata.resource_version;
            slices.replace(&name, &PostParams::default(), &slice).await?;
        }
        None => {
            slices.create(&PostParams::default(), &slice).await?;
        }
    }
    Ok(())
}

/// One device of the slice: attributes and capacities as `deviceinfo.go` writes them. The
/// multiprocessor and copy-engine counts the driver also lists are not in the catalog, so they
/// are left out.
fn device_entry(name: &str, d: &Device, gpu: &GpuInventory, model: Option<&GpuModel>) -> Value {
    let product = model.and_then(|m| m.nvml_names.first().cloned()).unwrap_or_else(|| gpu.model.clone());
    let architecture = model.map(|m| m.architecture.clone()).unwrap_or_default();
    let mut attributes = json!({
        "uuid": {"string": d.uuid},
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": architecture},
    });
    let mut capacity = serde_json::Map::new();
    let profile = model.and_then(|m| m.profile(&d.profile).map(|id| m.profile_info(id)));
    match profile.filter(|_| d.profile != WHOLE) {
        None => {
            attributes["type"] = json!({"string": "gpu"});
            if let Some(mib) = model.and_then(|m| m.memory_mib) {
                capacity.insert("memory".into(), json!({"value": format!("{mib}Mi")}));
            }
        }
        Some(p) => {
            attributes["type"] = json!({"string": "mig"});
            attributes["profile"] = json!({"string": p.device_plugin_name});
            attributes["parentUUID"] = json!({"string": gpu.uuid});
            capacity.insert("memory".into(), json!({"value": format!("{}Mi", p.memory_mib)}));
            if p.engines_known {
                for (key, count) in [
                    ("decoders", p.engines.dec),
                    ("encoders", p.engines.enc),
                    ("jpegEngines", p.engines.jpeg),
                    ("ofaEngines", p.engines.ofa),
                ] {
                    capacity.insert(key.into(), json!({"value": count.to_string()}));
                }
            }
            for slice in d.start..d.start + p.size {
                capacity.insert(format!("memorySlice{slice}"), json!({"value": "1"}));
            }
        }
    }
    json!({"name": name, "attributes": attributes, "capacity": capacity})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(gpu: u32, profile: &str, start: u8) -> Device {
        Device { gpu, start, profile: profile.into(), uuid: format!("MIG-{gpu}-{start}") }
    }

    #[test]
    fn devices_are_named_as_the_driver_names_them() {
        let catalog = Catalog::builtin();
        let h100 = catalog.find("H100-80GB");
        assert_eq!(device_name(h100, &device(0, "1g.10gb", 3)), "gpu-0-mig-1g10gb-19-3");
        assert_eq!(device_name(h100, &device(1, "3g.40gb", 4)), "gpu-1-mig-3g40gb-9-4");
        assert_eq!(device_name(h100, &device(2, WHOLE, 0)), "gpu-2");
    }
}
