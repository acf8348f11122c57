//! The node's GPUs as `MigNode.status` shows them: built from NVML and the kubelet's
//! PodResources (which pod holds which device).

use std::collections::BTreeMap;

use geometer_api::resources::mig_resource;
use geometer_solver::catalog::{device_plugin_name_from_bytes, nvlib_gpu_instance_profile, Catalog};

use crate::nvml::{
    format_pci_device_id, ComputeInstanceInfo, DeviceInfo, GpuInstanceProfileInfo, MigDeviceInfo,
    NvmlBackend, NvmlError, NvmlProfileId,
};
use crate::observe::catalog_check::{self, match_profile};
use crate::observe::pod_resources::DeviceAssignment;
use geometer_api::{CatalogDisagreement, GpuInventory, MigInstance, MigModeStatus};

/// What the agent publishes about its GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    pub gpus: Vec<GpuInventory>,
    /// NVIDIA devices the kubelet assigned that match no GPU or MIG device NVML reports (stale
    /// kubelet state, or a device plugin naming devices in a way not understood here).
    pub unmatched: Vec<DeviceAssignment>,
}

impl Inventory {
    /// Whether any instance or whole GPU is held by a pod or runs processes.
    pub fn in_use(&self) -> bool {
        self.gpus.iter().any(|g| g.pods().next().is_some() || g.instances.iter().any(MigInstance::in_use))
    }
}

/// Reads every GPU, its instances and their users. `assignments` come from
/// [`crate::observe::pod_resources::PodResourcesClient::nvidia_assignments`].
///
/// A MIG device the kubelet assigned matches by its `MIG-...` UUID (the device plugin's default
/// id strategy), by the legacy `MIG-<gpu uuid>/<gi>/<ci>` form, or by `<gpu index>:<mig index>`
/// (the `index` strategy); a whole GPU by its UUID or index.
pub fn read_inventory(
    nvml: &dyn NvmlBackend,
    catalog: &Catalog,
    assignments: &[DeviceAssignment],
) -> Result<Inventory, NvmlError> {
    let mut used = vec![false; assignments.len()];
    let mut gpus = Vec::new();
    for device in nvml.devices()? {
        gpus.push(read_gpu(nvml, catalog, &device, assignments, &mut used)?);
    }
    let unmatched = assignments.iter().zip(used).filter(|(_, used)| !used).map(|(a, _)| a.clone()).collect();
    Ok(Inventory { gpus, unmatched })
}

/// Compares the catalog with NVML for every MIG-enabled GPU (see [`catalog_check::compare`]).
/// GPUs the catalog does not know are reported as one disagreement each.
pub fn check_catalog(
    nvml: &dyn NvmlBackend,
    catalog: &Catalog,
) -> Result<Vec<CatalogDisagreement>, NvmlError> {
    let mut out = Vec::new();
    for device in nvml.devices()? {
        if !device.mig_mode.is_some_and(|m| m.current) {
            continue;
        }
        let reported = catalog_check::read_profiles(nvml, device.index)?;
        match find_model(catalog, &device) {
            Some(model) => out.extend(catalog_check::compare(model, device.index, &reported)),
            None => out.push(CatalogDisagreement {
                gpu: device.index,
                profile: None,
                field: "model".to_string(),
                catalog: "unknown GPU".to_string(),
                nvml: format!("{} ({})", device.name, format_pci_device_id(device.pci_device_id)),
            }),
        }
    }
    Ok(out)
}

/// The catalog model of a device: by PCI device id, else by NVML name.
pub(crate) fn find_model<'c>(
    catalog: &'c Catalog,
    device: &DeviceInfo,
) -> Option<&'c geometer_solver::catalog::GpuModel> {
    catalog.by_device_id(device.pci_device_id).or_else(|| catalog.find(&device.name))
}

fn read_gpu(
    nvml: &dyn NvmlBackend,
    catalog: &Catalog,
    device: &DeviceInfo,
    assignments: &[DeviceAssignment],
    used: &mut [bool],
) -> Result<GpuInventory, NvmlError> {
    let model = find_model(catalog, device);
    let mig = device.mig_mode.unwrap_or_default();
    let mut gpu = GpuInventory {
        index: device.index,
        uuid: device.uuid.clone(),
        model: model.map_or_else(|| device.name.clone(), |m| m.key.clone()),
        pci_device_id: format_pci_device_id(device.pci_device_id),
        mig_mode: MigModeStatus { current: mig.current, pending: mig.pending },
        instances: Vec::new(),
        pod: None,
        shared_with: Vec::new(),
        advertised_as: Default::default(),
        free_placements: Vec::new(),
    };
    let index_id = device.index.to_string();
    let mut pods = holders(assignments, used, |id| id == device.uuid || id == index_id).into_iter();
    gpu.pod = pods.next();
    gpu.shared_with = pods.collect();
    if !mig.current {
        return Ok(gpu);
    }
    let profiles = nvml.gpu_instance_profiles(device.index)?;
    gpu.advertised_as = advertised_as(model, device, &profiles);
    let mig_devices = nvml.mig_devices(device.index)?;
    for gi in nvml.gpu_instances(device.index)? {
        let info =
            profiles.iter().find(|p| p.id == gi.profile_id).ok_or(NvmlError::UnknownGpuInstanceProfile {
                gpu: device.index,
                gpu_instance: gi.id,
                profile: gi.profile_id,
            })?;
        let profile = profile_name(model, Some(info), gi.profile_id);
        let computes = nvml.compute_instances(device.index, gi.id)?;
        // Every MIG device of the GPU instance (one per compute instance) counts for its
        // processes and pods; a device is matched by (GPU instance, compute instance).
        let devices: Vec<&MigDeviceInfo> =
            mig_devices.iter().filter(|d| d.gpu_instance_id == gi.id).collect();
        let mig_device =
            devices.iter().find(|d| computes.first().is_some_and(|c| c.id == d.compute_instance_id));
        let mig_device = mig_device.or(devices.first()).copied();
        let mut instance = MigInstance {
            profile,
            start: gi.placement.start as u8,
            size: gi.placement.size as u8,
            gpu_instance_id: gi.id,
            compute_instance_id: computes.first().map(|c| c.id),
            uuid: mig_device.map(|d| d.uuid.clone()),
            pod: None,
            processes: 0,
            shared_with: Vec::new(),
            rebuild: None,
        };
        instance.rebuild = rebuild_reason(info.slice_count, &computes);
        let mut pods = Vec::new();
        let mut pids = std::collections::BTreeSet::new();
        for d in &devices {
            // A process on several of its compute instances counts once.
            pids.extend(nvml.processes(device.index, &d.uuid)?.into_iter().map(|p| p.pid));
            for pod in holders(assignments, used, |id| matches_mig_device(id, device, d)) {
                if !pods.contains(&pod) {
                    pods.push(pod);
                }
            }
        }
        instance.processes = pids.len() as u32;
        let mut pods = pods.into_iter();
        instance.pod = pods.next();
        instance.shared_with = pods.collect();
        gpu.instances.push(instance);
    }
    gpu.instances.sort_by_key(|i| (i.start, i.gpu_instance_id));
    if let Some(model) = model {
        let taken = gpu.instances.iter().map(|i| (i.start, i.size));
        gpu.free_placements = geometer_api::PlacementRun::free(model.placement_units, taken);
    }
    Ok(gpu)
}

/// Why a GPU instance of `slices` slices is not one full-size compute instance; `None` when it
/// is (or has none yet: half-built, which the agent completes).
fn rebuild_reason(slices: u32, computes: &[ComputeInstanceInfo]) -> Option<String> {
    match computes {
        [] => None,
        [one] if one.slice_count >= slices => None,
        [one] => Some(format!("its compute instance has {} of its {slices} slices", one.slice_count)),
        many => Some(format!("it is split into {} compute instances", many.len())),
    }
}

/// Marks every assignment of the device (a replica `<id>::<n>` of a shared device included)
/// and returns the pods holding it, each once, in order.
fn holders(
    assignments: &[DeviceAssignment],
    used: &mut [bool],
    matches: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut pods: Vec<String> = Vec::new();
    for (i, a) in assignments.iter().enumerate() {
        if matches(a.device()) {
            used[i] = true;
            let pod = a.pod_ref().to_string();
            if !pods.contains(&pod) {
                pods.push(pod);
            }
        }
    }
    pods
}

fn matches_mig_device(id: &str, gpu: &DeviceInfo, d: &MigDeviceInfo) -> bool {
    id == d.uuid
        || id == format!("MIG-{}/{}/{}", gpu.uuid, d.gpu_instance_id, d.compute_instance_id)
        || id == format!("{}:{}", gpu.index, d.index)
}

/// Per profile, the resource the NVIDIA device plugin will advertise: computed from NVML's
/// total memory and the profile's memory as go-nvlib's `MigProfile.String()` does (see
/// [`geometer_solver::catalog::device_plugin_name_from_bytes`]), with the catalog's recorded
/// name where NVML gives no total memory.
pub(crate) fn advertised_as(
    model: Option<&geometer_solver::catalog::GpuModel>,
    device: &DeviceInfo,
    profiles: &[GpuInstanceProfileInfo],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for info in profiles {
        let profile = profile_name(model, Some(info), info.id);
        let recorded =
            model.and_then(|m| match_profile(m, info).map(|id| m.profiles[id].device_plugin_name.clone()));
        let computed = match (device.memory_total_bytes, nvlib_gpu_instance_profile(info.profile_index.0)) {
            (Some(total), Some((slices, kind))) => {
                Some(device_plugin_name_from_bytes(total, info.memory_mib, slices, slices, kind))
            }
            _ => None,
        };
        if let Some(name) = computed.or(recorded) {
            out.insert(profile, mig_resource(&name));
        }
    }
    out
}

/// The catalog's name for a GPU instance's profile; NVML's name when the catalog has none.
fn profile_name(
    model: Option<&geometer_solver::catalog::GpuModel>,
    info: Option<&GpuInstanceProfileInfo>,
    profile_id: NvmlProfileId,
) -> String {
    if let (Some(model), Some(info)) = (model, info) {
        if let Some(id) = match_profile(model, info) {
            return model.profiles[id].name.clone();
        }
    }
    info.and_then(|i| i.name.clone()).unwrap_or_else(|| format!("profile-id-{profile_id}"))
}
