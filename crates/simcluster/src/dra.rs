//! NVIDIA's DRA driver (`gpu.nvidia.com`), simulated: its kubelet plugin pod, and the
//! ResourceSlices the plugin publishes when it starts.
//!
//! - Static MIG mode: one slice per node listing the MIG devices that exist then (and each GPU
//!   with MIG mode off whole). The real plugin never re-scans, so a new geometry is published
//!   only when its pod is restarted.
//! - DynamicMIG mode: one slice holding a counter set per GPU (`gpu-<minor>-counter-set`, a
//!   `memory-slice-<i>` counter for each memory slice), then one slice per GPU with an abstract
//!   device for every profile at every legal placement, without `uuid`, consuming the memory
//!   slices it covers; the kubelet creates the instance when it prepares a claim for one and
//!   destroys it when the pod stops (`crate::node`). The layout is the driver's on Kubernetes
//!   1.35 and later (`cmd/gpu-kubelet-plugin/driver.go`, `shouldUseSplitResourceSlices`; the
//!   counters and consumption in `pkg/.../partitions.go`). The driver also counts
//!   multiprocessors, engines and memory; the simulation counts memory slices only, which is
//!   what decides where an instance can go (the simulated NVML still refuses an illegal one),
//!   and publishes no whole-GPU device beside the MIG ones (as the driver on a GPU that cannot
//!   leave MIG mode without a reset).
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
use geometer_solver::dynamic_mig::{memory_draw, memory_slice_counter, mig_device_name};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use super::node::Device;
use super::spec::DeviceStack;

/// The driver's name, the domain of its device attributes and capacities.
pub const DRA_DRIVER: &str = "gpu.nvidia.com";
/// Namespace of the driver's kubelet plugin pods (its Helm chart's default).
pub const DRA_PLUGIN_NAMESPACE: &str = "dra-driver-nvidia-gpu";
/// Label of the driver's kubelet plugin pods (its Helm chart's `_helpers.tpl`).
pub const DRA_PLUGIN_LABEL: (&str, &str) = ("dra-driver-nvidia-gpu-component", "kubelet-plugin");

/// The name the driver gives a device: `gpu-<minor>` for a whole GPU,
/// [`mig_device_name`] for a MIG device (`mig.go`).
pub fn device_name(model: Option<&GpuModel>, device: &Device) -> String {
    if device.profile == WHOLE {
        return format!("gpu-{}", device.gpu);
    }
    let profile_id = model
        .and_then(|m| m.profile(&device.profile).map(|id| m.profile_info(id)))
        .and_then(|p| p.nvidia_smi_profile_id);
    mig_device_name(device.gpu, &device.profile, profile_id, device.start)
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

/// The name of a node's one ResourceSlice (static MIG mode).
pub fn slice_name(node: &str) -> String {
    format!("{node}-{DRA_DRIVER}")
}

/// DynamicMIG: the name of the slice holding the node's counter sets.
pub fn counters_slice_name(node: &str) -> String {
    format!("{node}-{DRA_DRIVER}-counters")
}

/// DynamicMIG: the name of the slice listing GPU `gpu`'s devices.
pub fn gpu_slice_name(node: &str, gpu: u32) -> String {
    format!("{node}-{DRA_DRIVER}-gpu-{gpu}")
}

/// The counter set of GPU `gpu` (`partitions.go`).
pub fn counter_set(gpu: u32) -> String {
    format!("gpu-{gpu}-counter-set")
}

/// DynamicMIG: every device the driver publishes for the MIG GPUs of `gpus`, by name: one per
/// profile and legal placement (`nvlib.go`, `inspectMigProfilesAndPlacements`), none with a
/// `uuid` (the instance is made when a claim for it is prepared).
pub(crate) fn abstract_devices(gpus: &[GpuInventory], catalog: &Catalog) -> BTreeMap<String, Device> {
    let mut out = BTreeMap::new();
    for gpu in gpus.iter().filter(|g| g.mig_mode.current) {
        let Some(model) = catalog.find(&gpu.model) else { continue };
        for id in model.mig_profiles() {
            let profile = model.profile_info(id);
            for &start in &profile.starts {
                let device =
                    Device { gpu: gpu.index, start, profile: profile.name.clone(), uuid: String::new() };
                out.insert(device_name(Some(model), &device), device);
            }
        }
    }
    out
}

/// What the plugin publishes from: its node (and the Node's uid, which owns the slices so that
/// they go with it), the GPUs as NVML reported them and the devices by name.
pub(crate) struct Publication<'a> {
    pub node: &'a str,
    pub node_uid: &'a str,
    pub gpus: &'a [GpuInventory],
    pub devices: &'a BTreeMap<String, Device>,
    pub catalog: &'a Catalog,
}

impl Publication<'_> {
    /// Slice `name` of pool `<node>` (its generation set on publishing) with `spec`'s devices or
    /// counters.
    fn slice(&self, name: String, slices: usize, mut spec: Value) -> Value {
        spec["driver"] = json!(DRA_DRIVER);
        spec["nodeName"] = json!(self.node);
        spec["pool"] = json!({"name": self.node, "generation": 0, "resourceSliceCount": slices});
        json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": name,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node_uid, "controller": true}],
            },
            "spec": spec,
        })
    }

    /// Static MIG mode: the node's one slice, listing `devices`.
    pub(crate) fn static_slice(&self) -> Value {
        let listed: Vec<Value> = self
            .devices
            .iter()
            .filter_map(|(name, d)| {
                let gpu = self.gpus.iter().find(|g| g.index == d.gpu)?;
                Some(device_entry(name, d, gpu, self.catalog.find(&gpu.model)))
            })
            .collect();
        self.slice(slice_name(self.node), 1, json!({"devices": listed}))
    }

    /// DynamicMIG: the counters slice, then one slice per MIG GPU with its devices (sorted by
    /// name, which is the order the scheduler's allocator tries them in).
    pub(crate) fn dynamic_slices(&self) -> Vec<Value> {
        let mig_gpus: Vec<&GpuInventory> = self.gpus.iter().filter(|g| g.mig_mode.current).collect();
        let count = 1 + mig_gpus.len();
        let sets: Vec<Value> = mig_gpus
            .iter()
            .map(|g| {
                let slices = self.catalog.find(&g.model).map_or(0, |m| m.placement_units);
                let counters: serde_json::Map<String, Value> =
                    (0..slices).map(|i| (memory_slice_counter(i), json!({"value": "1"}))).collect();
                json!({"name": counter_set(g.index), "counters": counters})
            })
            .collect();
        let mut out =
            vec![self.slice(counters_slice_name(self.node), count, json!({"sharedCounters": sets}))];
        for gpu in mig_gpus {
            let model = self.catalog.find(&gpu.model);
            let listed: Vec<Value> = self
                .devices
                .iter()
                .filter(|(_, d)| d.gpu == gpu.index)
                .map(|(name, d)| abstract_entry(name, d, gpu, model))
                .collect();
            out.push(self.slice(gpu_slice_name(self.node, gpu.index), count, json!({"devices": listed})));
        }
        out
    }
}

/// A DynamicMIG device: the static entry's attributes and capacities without `uuid`, drawing
/// the memory slices it covers from its GPU's counter set (`partitions.go`).
fn abstract_entry(name: &str, d: &Device, gpu: &GpuInventory, model: Option<&GpuModel>) -> Value {
    let mut entry = device_entry(name, d, gpu, model);
    if let Some(capacity) = entry["capacity"].as_object_mut() {
        capacity.retain(|key, _| !key.starts_with("memorySlice"));
    }
    let size = model.and_then(|m| m.profile(&d.profile).map(|id| m.profile_info(id).size)).unwrap_or(0);
    let counters: serde_json::Map<String, Value> =
        memory_draw(d.start, size).into_keys().map(|counter| (counter, json!({"value": "1"}))).collect();
    entry["consumesCounters"] = json!([{"counterSet": counter_set(d.gpu), "counters": counters}]);
    entry
}

/// Publishes the node's ResourceSlices for `devices` as the plugin in `stack` mode lays them
/// out: each created, or replaced, with the pool generation one past the last, as the plugin's
/// slice controller bumps it on every change.
pub(crate) async fn publish(
    client: &kube::Client,
    stack: DeviceStack,
    node: &str,
    gpus: &[GpuInventory],
    devices: &BTreeMap<String, Device>,
    catalog: &Catalog,
) -> Result<(), kube::Error> {
    let node_uid = Api::<Node>::all(client.clone()).get(node).await?.uid().unwrap_or_default();
    let publication = Publication { node, node_uid: &node_uid, gpus, devices, catalog };
    let built = match stack {
        DeviceStack::DraDynamicMig => publication.dynamic_slices(),
        _ => vec![publication.static_slice()],
    };
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let mut old = BTreeMap::new();
    for value in &built {
        let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let existing = slices.get_opt(&name).await?;
        old.insert(name, existing);
    }
    let generation = old.values().flatten().map(|s| s.spec.pool.generation).max().unwrap_or(0) + 1;
    for value in built {
        let mut slice: ResourceSlice = serde_json::from_value(value).expect("a ResourceSlice");
        slice.spec.pool.generation = generation;
        let name = slice.name_any();
        match old.remove(&name).flatten() {
            Some(old) => {
                slice.metadata.resource_version = old.metadata.resource_version;
                slices.replace(&name, &PostParams::default(), &slice).await?;
            }
            None => {
                slices.create(&PostParams::default(), &slice).await?;
            }
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
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": architecture},
    });
    if !d.uuid.is_empty() {
        attributes["uuid"] = json!({"string": d.uuid});
    }
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

    /// A DynamicMIG node with one H100, its plugin started (stale instances destroyed).
    fn dynamic_node() -> crate::node::SimNode {
        use geometer_agent::nvml::sim::SimNvml;
        let nvml = SimNvml::new("dyn-1");
        let gpu = nvml.add_gpu("H100-80GB").unwrap();
        nvml.set_geometry(gpu, &[("2g.20gb", 2)]).unwrap();
        let units = crate::node::SliceUnits::of(Catalog::builtin(), &["H100-80GB"]);
        let node = crate::node::SimNode::new("dyn-1", "10.0.0.1", nvml, units)
            .with_stack(DeviceStack::DraDynamicMig);
        node.start_dra_plugin(Catalog::builtin()).unwrap();
        node
    }

    fn claimed(device: &str) -> crate::node::ClaimedDevice {
        crate::node::ClaimedDevice { claim: format!("ml/{device}"), device: device.into() }
    }

    fn geometry(node: &crate::node::SimNode) -> Vec<String> {
        node.nvml.geometry(0).unwrap().iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn a_dynamic_mig_node_publishes_a_counter_set_and_a_device_per_profile_and_placement() {
        let catalog = Catalog::builtin();
        let node = dynamic_node();
        let gpus = geometer_agent::read_inventory(&node.nvml, catalog, &[]).unwrap().gpus;
        let devices = abstract_devices(&gpus, catalog);
        let publication =
            Publication { node: "dyn-1", node_uid: "uid", gpus: &gpus, devices: &devices, catalog };
        let slices = publication.dynamic_slices();
        let slices: Vec<ResourceSlice> =
            slices.into_iter().map(|s| serde_json::from_value(s).expect("a ResourceSlice")).collect();
        let names: Vec<String> = slices.iter().map(|s| s.name_any()).collect();
        assert_eq!(names, ["dyn-1-gpu.nvidia.com-counters", "dyn-1-gpu.nvidia.com-gpu-0"]);
        assert!(slices.iter().all(|s| s.spec.pool.resource_slice_count == 2));
        let sets = slices[0].spec.shared_counters.clone().unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].name, "gpu-0-counter-set");
        assert_eq!(sets[0].counters.len(), 8, "one counter per memory slice of an H100");
        assert!(slices[0].spec.devices.is_none(), "a slice holds counters or devices, not both");

        let listed = slices[1].spec.devices.clone().unwrap();
        let h100 = catalog.find("H100-80GB").unwrap();
        let placements: usize = h100.mig_profiles().map(|id| h100.profile_info(id).starts.len()).sum();
        assert_eq!(listed.len(), placements, "every profile at every legal placement");
        let three_g = listed.iter().find(|d| d.name == "gpu-0-mig-3g40gb-9-4").expect("3g.40gb at 4");
        let attributes = three_g.attributes.clone().unwrap();
        assert!(!attributes.contains_key("uuid"), "an abstract device has no instance yet");
        assert_eq!(attributes["profile"].string.as_deref(), Some("3g.40gb"));
        let drawn = &three_g.consumes_counters.as_ref().unwrap()[0];
        assert_eq!(drawn.counter_set, "gpu-0-counter-set");
        let slices_drawn: Vec<&String> = drawn.counters.keys().collect();
        assert_eq!(slices_drawn, ["memory-slice-4", "memory-slice-5", "memory-slice-6", "memory-slice-7"]);
    }

    #[test]
    fn the_dynamic_mig_plugin_destroys_stale_instances_and_a_pod_makes_and_frees_its_own() {
        let node = dynamic_node();
        assert!(geometry(&node).is_empty(), "the instance no claim held is gone: {:?}", geometry(&node));
        let key = geometer_solver::PodKey::new("ml", "chat");
        let usage = geometer_agent::nvml::sim::ProcessUsage::default();
        let devices = node
            .admit_claimed(key.clone(), "uid-1", "main", &[claimed("gpu-0-mig-1g10gb-19-5")], usage)
            .unwrap();
        assert_eq!(geometry(&node), ["1g.10gb@5"]);
        assert!(devices[0].uuid.starts_with("MIG-"), "{devices:?}");
        // A device whose placement overlaps an instance is refused, and nothing is left made.
        let refused = node.admit_claimed(
            geometer_solver::PodKey::new("ml", "train"),
            "uid-2",
            "main",
            &[claimed("gpu-0-mig-1g10gb-19-0"), claimed("gpu-0-mig-3g40gb-9-4")],
            usage,
        );
        assert!(matches!(refused, Err(crate::node::AdmitError::NotPrepared { .. })), "{refused:?}");
        assert_eq!(geometry(&node), ["1g.10gb@5"]);
        node.release("ml", "chat");
        assert!(geometry(&node).is_empty(), "the pod's instance goes with it");
    }
}
