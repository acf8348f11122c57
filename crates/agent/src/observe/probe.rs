//! A read-only look at what NVML reports, compared with the catalog (`geometer agent probe`).
//! Nothing here changes MIG mode or geometry.

use std::collections::BTreeMap;

use geometer_solver::catalog::Catalog;
use serde::Serialize;

use crate::nvml::{ComputeInstanceInfo, DeviceInfo, GpuInstanceInfo, MigDeviceInfo, NvmlBackend, NvmlError};
use crate::observe::catalog_check::{self, NvmlProfile};
use crate::observe::inventory::{advertised_as, find_model};
use geometer_api::CatalogDisagreement;

/// Everything the probe saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    pub driver_version: String,
    pub gpus: Vec<ProbeGpu>,
}

impl ProbeReport {
    pub fn disagreements(&self) -> impl Iterator<Item = &CatalogDisagreement> {
        self.gpus.iter().flat_map(|g| &g.disagreements)
    }
}

/// One GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeGpu {
    pub device: DeviceInfo,
    /// Catalog key, when the catalog knows the GPU.
    pub model: Option<String>,
    /// Every GPU-instance profile with its possible placements (MIG mode on only).
    pub profiles: Vec<NvmlProfile>,
    /// Per profile, the resource the NVIDIA device plugin will advertise it as, computed from
    /// NVML's memory figures (see [`crate::observe::inventory`]).
    pub advertised_names: BTreeMap<String, String>,
    pub instances: Vec<ProbeInstance>,
    pub disagreements: Vec<CatalogDisagreement>,
    /// What could not be read, and why (e.g. "MIG mode is off: NVML reports no profiles").
    pub notes: Vec<String>,
}

/// A GPU instance with its compute instances, MIG device and process count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeInstance {
    pub gpu_instance: GpuInstanceInfo,
    pub compute_instances: Vec<ComputeInstanceInfo>,
    pub mig_device: Option<MigDeviceInfo>,
    /// `None` when NVML would not say.
    pub processes: Option<usize>,
}

/// Reads everything. Fails only when NVML cannot list the GPUs at all; per-GPU failures become
/// notes so that one GPU's problem does not hide the others.
pub fn probe(nvml: &dyn NvmlBackend, catalog: &Catalog) -> Result<ProbeReport, NvmlError> {
    let driver_version = nvml.driver_version()?;
    let mut gpus = Vec::new();
    for device in nvml.devices()? {
        gpus.push(probe_gpu(nvml, catalog, device));
    }
    Ok(ProbeReport { driver_version, gpus })
}

fn probe_gpu(nvml: &dyn NvmlBackend, catalog: &Catalog, device: DeviceInfo) -> ProbeGpu {
    let model = find_model(catalog, &device);
    let mut gpu = ProbeGpu {
        model: model.map(|m| m.key.clone()),
        device,
        profiles: Vec::new(),
        advertised_names: BTreeMap::new(),
        instances: Vec::new(),
        disagreements: Vec::new(),
        notes: Vec::new(),
    };
    let index = gpu.device.index;
    match gpu.device.mig_mode {
        None => {
            gpu.notes.push("the GPU does not support MIG".to_string());
            return gpu;
        }
        Some(mode) if !mode.current => {
            gpu.notes.push(format!(
                "MIG mode is off{}: NVML reports profiles and placements only in MIG mode; the probe never changes it",
                if mode.pending { " (on after the next GPU reset)" } else { "" }
            ));
            return gpu;
        }
        Some(_) => {}
    }
    if model.is_none() {
        gpu.notes.push("the catalog does not know this GPU (by PCI device id or name)".to_string());
    }
    match catalog_check::read_profiles(nvml, index) {
        Ok(profiles) => {
            let infos: Vec<_> = profiles.iter().map(|p| p.info.clone()).collect();
            gpu.advertised_names = advertised_as(model, &gpu.device, &infos);
            gpu.profiles = profiles;
        }
        Err(e) => gpu.notes.push(format!("cannot read profiles: {e}")),
    }
    if let Some(model) = model {
        gpu.disagreements = catalog_check::compare(model, index, &gpu.profiles);
    }
    let mig_devices = match nvml.mig_devices(index) {
        Ok(devices) => devices,
        Err(e) => {
            gpu.notes.push(format!("cannot list MIG devices: {e}"));
            Vec::new()
        }
    };
    match nvml.gpu_instances(index) {
        Ok(instances) => {
            for gi in instances {
                let compute_instances = nvml.compute_instances(index, gi.id).unwrap_or_else(|e| {
                    gpu.notes.push(format!("cannot list compute instances of GPU instance {}: {e}", gi.id));
                    Vec::new()
                });
                let mig_device = mig_devices.iter().find(|d| d.gpu_instance_id == gi.id).cloned();
                let processes = mig_device.as_ref().and_then(|d| match nvml.processes(index, &d.uuid) {
                    Ok(p) => Some(p.len()),
                    Err(e) => {
                        gpu.notes.push(format!("cannot list processes on {}: {e}", d.uuid));
                        None
                    }
                });
                gpu.instances.push(ProbeInstance {
                    gpu_instance: gi,
                    compute_instances,
                    mig_device,
                    processes,
                });
            }
        }
        Err(e) => gpu.notes.push(format!("cannot list GPU instances: {e}")),
    }
    gpu
}
