//! One simulated GPU: its reported profiles, instances and processes.

use std::collections::{BTreeMap, BTreeSet};

use geometer_solver::catalog::{GpuModel, ProfileId};
use geometer_solver::geometry::{validate, Geometry, Placed};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::nvml::sim::{MigModeSwitch, SimGpuOptions};
use crate::nvml::{
    ComputeInstanceInfo, DeviceInfo, GpuIndex, GpuInstanceInfo, GpuInstanceProfileInfo, MigDeviceInfo,
    MigMode, MigModeChange, NvmlProfileId, NvmlProfileIndex, Placement, ProcessInfo, Reason,
};
use geometer_api::PlacedInstance;

/// Driver ids for profiles whose `nvidia-smi` id the catalog does not know: this base plus the
/// NVML profile index, so they never collide with real ids (which are below 64).
const SIM_PROFILE_ID_BASE: u32 = 1000;

/// UUID namespace of simulated devices (a v5 UUID of the name "geometer.dev/sim").
fn sim_namespace() -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_DNS, b"sim.geometer.dev")
}

/// What the simulated NVML reports for one profile; tests may change it to model a driver that
/// disagrees with the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedProfile {
    pub info: GpuInstanceProfileInfo,
    pub placements: Vec<Placement>,
    /// Hidden profiles are not offered (as on a driver that lacks them).
    pub hidden: bool,
}

/// What a simulated process uses of its device: what NVML's process list and utilisation
/// report for it (a simulated workload's footprint, for right-sizing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessUsage {
    pub memory_mib: u64,
    /// Percent of the time its kernels keep the GPU busy.
    pub utilization_percent: u32,
}

impl Default for ProcessUsage {
    /// 1 GiB and idle: what every simulated process reported before usage was modelled.
    fn default() -> ProcessUsage {
        ProcessUsage { memory_mib: 1024, utilization_percent: 0 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ProcessTarget {
    Gpu,
    GpuInstance(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SimInstance {
    profile: ProfileId,
    start: u8,
    size: u8,
    profile_id: NvmlProfileId,
    compute: Option<(u32, String)>,
    /// One-slice compute instances a test made by hand instead of the full one (a GPU
    /// instance split into several compute instances, or one smaller than it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    small: Vec<(u32, String)>,
}

/// What a GPU changes while it runs (MIG mode, instances, processes), as a state file keeps it
/// between processes: what it reports and allows comes from its model again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedGpu {
    uuid: String,
    model: String,
    mig: Option<MigMode>,
    instances: BTreeMap<u32, SimInstance>,
    processes: BTreeMap<u32, ProcessTarget>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    usage: BTreeMap<u32, ProcessUsage>,
    /// Other NVML clients (a simulated kubelet's DCGM or device plugin pods, seen by an agent
    /// in another process).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    clients: BTreeSet<String>,
    serial: u64,
}

pub(crate) struct SimGpu {
    node: String,
    index: GpuIndex,
    uuid: String,
    name: String,
    pci_device_id: u32,
    /// `None`: the GPU cannot do MIG.
    model: Option<GpuModel>,
    mig: Option<MigMode>,
    mig_mode_switch: MigModeSwitch,
    /// Other NVML clients with the GPU open (kept in the state file, so that the processes
    /// sharing it see them).
    clients: BTreeSet<String>,
    /// Parallel to `model.profiles`.
    reported: Vec<ReportedProfile>,
    instances: BTreeMap<u32, SimInstance>,
    processes: BTreeMap<u32, ProcessTarget>,
    /// What processes use, by pid (absent: [`ProcessUsage::default`]).
    usage: BTreeMap<u32, ProcessUsage>,
    /// Counts compute-instance creations so that a re-created device gets a new UUID, as on
    /// real hardware, while runs stay reproducible.
    serial: u64,
}

impl SimGpu {
    pub(crate) fn new(node: &str, index: GpuIndex, model: GpuModel, options: SimGpuOptions) -> SimGpu {
        let reported = model.profiles.iter().map(reported_from_catalog).collect();
        let name = model.nvml_names.first().cloned().unwrap_or_else(|| format!("NVIDIA {}", model.key));
        let pci_device_id = model.device_ids.first().copied().unwrap_or(0);
        SimGpu {
            node: node.to_string(),
            index,
            uuid: format!("GPU-{}", Uuid::new_v5(&sim_namespace(), format!("{node}/{index}").as_bytes())),
            name,
            pci_device_id,
            model: Some(model),
            mig: Some(MigMode { current: options.mig_enabled, pending: options.mig_enabled }),
            mig_mode_switch: options.mig_mode_switch,
            clients: BTreeSet::new(),
            reported,
            instances: BTreeMap::new(),
            processes: BTreeMap::new(),
            usage: BTreeMap::new(),
            serial: 0,
        }
    }

    pub(crate) fn without_mig(node: &str, index: GpuIndex, name: &str, pci_device_id: u32) -> SimGpu {
        SimGpu {
            node: node.to_string(),
            index,
            uuid: format!("GPU-{}", Uuid::new_v5(&sim_namespace(), format!("{node}/{index}").as_bytes())),
            name: name.to_string(),
            pci_device_id,
            model: None,
            mig: None,
            mig_mode_switch: MigModeSwitch::AsTheArchitecture,
            clients: BTreeSet::new(),
            reported: Vec::new(),
            instances: BTreeMap::new(),
            processes: BTreeMap::new(),
            usage: BTreeMap::new(),
            serial: 0,
        }
    }

    pub(crate) fn saved(&self) -> SavedGpu {
        SavedGpu {
            uuid: self.uuid.clone(),
            model: self.model_key().to_string(),
            mig: self.mig,
            instances: self.instances.clone(),
            processes: self.processes.clone(),
            usage: self.usage.clone(),
            clients: self.clients.clone(),
            serial: self.serial,
        }
    }

    /// Takes back what [`SimGpu::saved`] wrote; false (nothing changed) when it was written for
    /// another GPU.
    pub(crate) fn restore(&mut self, saved: &SavedGpu) -> bool {
        if saved.uuid != self.uuid || saved.model != self.model_key() {
            return false;
        }
        self.mig = saved.mig;
        self.instances = saved.instances.clone();
        self.processes = saved.processes.clone();
        self.usage = saved.usage.clone();
        self.clients = saved.clients.clone();
        self.serial = saved.serial;
        true
    }

    pub(crate) fn model_key(&self) -> &str {
        self.model.as_ref().map_or(self.name.as_str(), |m| m.key.as_str())
    }

    pub(crate) fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            index: self.index,
            uuid: self.uuid.clone(),
            name: self.name.clone(),
            pci_device_id: self.pci_device_id,
            mig_mode: self.mig,
            memory_total_bytes: self.model.as_ref().and_then(|m| m.memory_mib).map(|mib| mib << 20),
        }
    }

    fn mig_on(&self) -> Result<&GpuModel, Reason> {
        match (&self.model, self.mig) {
            (Some(model), Some(mode)) if mode.current => Ok(model),
            _ => Err(Reason::NotSupported),
        }
    }

    pub(crate) fn profile_infos(&self) -> Vec<GpuInstanceProfileInfo> {
        if self.mig_on().is_err() {
            return Vec::new();
        }
        let mut infos: Vec<_> = self.reported.iter().filter(|r| !r.hidden).map(|r| r.info.clone()).collect();
        infos.sort_by_key(|i| i.profile_index);
        infos
    }

    fn reported_by_id(&self, profile_id: NvmlProfileId) -> Option<(ProfileId, &ReportedProfile)> {
        self.reported.iter().enumerate().find(|(_, r)| !r.hidden && r.info.id == profile_id)
    }

    pub(crate) fn profile_id_by_name(&self, name: &str) -> Option<(NvmlProfileId, u32)> {
        let model = self.model.as_ref()?;
        let id = model.profile(name)?;
        let r = &self.reported[id];
        Some((r.info.id, r.placements.first().map_or(model.profiles[id].size as u32, |p| p.size)))
    }

    pub(crate) fn possible_placements(&self, profile_id: NvmlProfileId) -> Result<Vec<Placement>, Reason> {
        self.mig_on()?;
        let (_, r) = self.reported_by_id(profile_id).ok_or(Reason::InvalidArgument)?;
        Ok(r.placements.clone())
    }

    pub(crate) fn gpu_instances(&self) -> Result<Vec<GpuInstanceInfo>, Reason> {
        self.mig_on()?;
        let mut out: Vec<_> = self.instances.iter().map(|(&id, i)| gi_info(id, i)).collect();
        out.sort_by_key(|gi| (gi.placement.start, gi.id));
        Ok(out)
    }

    /// The catalog model with NVML's reported placements and caps in place of the catalog's:
    /// the rules the simulated driver enforces (NVML wins).
    fn effective_model(&self) -> Result<GpuModel, Reason> {
        let mut model = self.mig_on()?.clone();
        for (profile, r) in model.profiles.iter_mut().zip(&self.reported) {
            profile.starts =
                if r.hidden { Vec::new() } else { r.placements.iter().map(|p| p.start as u8).collect() };
            profile.max_instances =
                if r.hidden { 0 } else { r.info.instance_count.min(u8::MAX as u32) as u8 };
        }
        Ok(model)
    }

    pub(crate) fn create_gpu_instance(
        &mut self,
        profile_id: NvmlProfileId,
        placement: Placement,
    ) -> Result<GpuInstanceInfo, Reason> {
        let model = self.effective_model()?;
        let (profile, reported) = self.reported_by_id(profile_id).ok_or(Reason::InvalidArgument)?;
        if !reported.placements.contains(&placement) {
            return Err(Reason::InvalidArgument);
        }
        let start = placement.start as u8;
        let current: Geometry = self.instances.values().map(|i| Placed::new(i.profile, i.start)).collect();
        let proposed = current.with(Placed::new(profile, start));
        if let Err(rule) = validate(&model, &proposed) {
            tracing::debug!(gpu = self.index, %rule, "simulated NVML refuses the GPU instance");
            return Err(Reason::InsufficientResources);
        }
        let id = (1..).find(|id| !self.instances.contains_key(id)).expect("ids are unbounded");
        let instance = SimInstance {
            profile,
            start,
            size: placement.size as u8,
            profile_id,
            compute: None,
            small: Vec::new(),
        };
        let info = gi_info(id, &instance);
        self.instances.insert(id, instance);
        Ok(info)
    }

    pub(crate) fn destroy_gpu_instance(&mut self, id: u32) -> Result<(), Reason> {
        self.mig_on()?;
        let instance = self.instances.get(&id).ok_or(Reason::NotFound)?;
        // Another client's handle refuses the destroy with no process showing.
        let busy = self.processes.values().any(|t| *t == ProcessTarget::GpuInstance(id));
        if instance.compute.is_some() || !instance.small.is_empty() || busy || !self.clients.is_empty() {
            return Err(Reason::InUse);
        }
        self.instances.remove(&id);
        Ok(())
    }

    pub(crate) fn compute_instances(&self, gi: u32) -> Result<Vec<ComputeInstanceInfo>, Reason> {
        self.mig_on()?;
        let instance = self.instances.get(&gi).ok_or(Reason::NotFound)?;
        let full = instance.compute.iter().map(|(id, _)| ComputeInstanceInfo {
            id: *id,
            gpu_instance_id: gi,
            // The simulation gives a full compute instance its GPU instance's profile id.
            profile_id: instance.profile_id.0,
            slice_count: self.gi_slices(instance),
        });
        let small = instance.small.iter().map(|(id, _)| ComputeInstanceInfo {
            id: *id,
            gpu_instance_id: gi,
            profile_id: 0,
            slice_count: 1,
        });
        Ok(full.chain(small).collect())
    }

    pub(crate) fn create_compute_instance(&mut self, gi: u32) -> Result<ComputeInstanceInfo, Reason> {
        self.mig_on()?;
        self.serial += 1;
        let name = format!("{}/{}/{}/{}", self.node, self.index, gi, self.serial);
        let instance = self.instances.get_mut(&gi).ok_or(Reason::NotFound)?;
        if instance.compute.is_some() || !instance.small.is_empty() {
            // The full compute instance takes every slice of the GPU instance.
            return Err(Reason::InsufficientResources);
        }
        let uuid = format!("MIG-{}", Uuid::new_v5(&sim_namespace(), name.as_bytes()));
        instance.compute = Some((0, uuid));
        let profile_id = instance.profile_id.0;
        let slice_count = self.gi_slices(&self.instances[&gi]);
        Ok(ComputeInstanceInfo { id: 0, gpu_instance_id: gi, profile_id, slice_count })
    }

    /// A one-slice compute instance in a GPU instance without its full one (the test's hand).
    pub(crate) fn create_small_compute_instance(&mut self, gi: u32) -> Result<MigDeviceInfo, Reason> {
        self.mig_on()?;
        self.serial += 1;
        let name = format!("{}/{}/{}/{}", self.node, self.index, gi, self.serial);
        let instance = self.instances.get(&gi).ok_or(Reason::NotFound)?;
        if instance.compute.is_some() || instance.small.len() as u32 >= self.gi_slices(instance) {
            return Err(Reason::InsufficientResources);
        }
        let id = (1..).find(|id| !instance.small.iter().any(|(c, _)| c == id)).expect("ids are unbounded");
        let uuid = format!("MIG-{}", Uuid::new_v5(&sim_namespace(), name.as_bytes()));
        self.instances.get_mut(&gi).ok_or(Reason::NotFound)?.small.push((id, uuid.clone()));
        Ok(self.mig_devices().into_iter().find(|d| d.uuid == uuid).expect("just created"))
    }

    fn gi_slices(&self, instance: &SimInstance) -> u32 {
        self.model.as_ref().map_or(1, |m| m.profiles[instance.profile].compute_slices as u32)
    }

    pub(crate) fn destroy_compute_instance(&mut self, gi: u32, ci: u32) -> Result<(), Reason> {
        self.mig_on()?;
        let busy =
            self.processes.values().any(|t| *t == ProcessTarget::GpuInstance(gi)) || !self.clients.is_empty();
        let instance = self.instances.get_mut(&gi).ok_or(Reason::NotFound)?;
        let small = instance.small.iter().position(|(id, _)| *id == ci);
        match (&instance.compute, small) {
            (Some((id, _)), _) if *id == ci => {
                if busy {
                    return Err(Reason::InUse);
                }
                instance.compute = None;
                Ok(())
            }
            (_, Some(at)) => {
                if busy {
                    return Err(Reason::InUse);
                }
                instance.small.remove(at);
                Ok(())
            }
            _ => Err(Reason::NotFound),
        }
    }

    pub(crate) fn mig_devices(&self) -> Vec<MigDeviceInfo> {
        if self.mig_on().is_err() {
            return Vec::new();
        }
        self.instances
            .iter()
            .flat_map(|(&gi, i)| {
                i.compute.iter().chain(&i.small).map(move |(ci, uuid)| (gi, *ci, uuid.clone()))
            })
            .enumerate()
            .map(|(index, (gi, ci, uuid))| MigDeviceInfo {
                index: index as u32,
                uuid,
                gpu_instance_id: gi,
                compute_instance_id: ci,
            })
            .collect()
    }

    pub(crate) fn gpu_instance_of_uuid(&self, uuid: &str) -> Option<u32> {
        self.instances
            .iter()
            .find(|(_, i)| i.compute.iter().chain(&i.small).any(|(_, u)| u == uuid))
            .map(|(&gi, _)| gi)
    }

    pub(crate) fn processes(&self, uuid: &str) -> Result<Vec<ProcessInfo>, Reason> {
        let gi = self.gpu_instance_of_uuid(uuid).ok_or(Reason::NotFound)?;
        Ok(self
            .processes
            .iter()
            .filter(|(_, t)| **t == ProcessTarget::GpuInstance(gi))
            .map(|(&pid, _)| self.process_info(pid))
            .collect())
    }

    fn usage_of(&self, pid: u32) -> ProcessUsage {
        self.usage.get(&pid).copied().unwrap_or_default()
    }

    fn process_info(&self, pid: u32) -> ProcessInfo {
        ProcessInfo { pid, used_memory_bytes: Some(self.usage_of(pid).memory_mib << 20) }
    }

    pub(crate) fn add_process(&mut self, pid: u32, target: ProcessTarget, usage: ProcessUsage) {
        self.processes.insert(pid, target);
        if usage != ProcessUsage::default() {
            self.usage.insert(pid, usage);
        }
    }

    pub(crate) fn remove_process(&mut self, pid: u32) -> bool {
        self.usage.remove(&pid);
        self.processes.remove(&pid).is_some()
    }

    /// The processes' utilisation added up, at most 100%.
    pub(crate) fn utilization(&self) -> u32 {
        self.processes.keys().map(|&pid| self.usage_of(pid).utilization_percent).sum::<u32>().min(100)
    }

    /// As `nvmlDeviceSetMigMode`: MIG cannot be turned off under existing instances (refused);
    /// otherwise the request is accepted and the activation status says whether it took
    /// effect (see [`MigModeSwitch`]).
    pub(crate) fn set_mig_mode(&mut self, enabled: bool) -> Result<MigModeChange, Reason> {
        let ampere = self.model.as_ref().is_some_and(|m| m.architecture.starts_with("Ampere"));
        let held = !self.processes.is_empty() || !self.clients.is_empty();
        if !enabled && !self.instances.is_empty() {
            return Err(Reason::InUse);
        }
        let mode = self.mig.as_mut().ok_or(Reason::NotSupported)?;
        mode.pending = enabled;
        let activation = match self.mig_mode_switch {
            MigModeSwitch::ResetRequired => Some(Reason::ResetRequired),
            MigModeSwitch::AfterReset => Some(Reason::InUse),
            MigModeSwitch::AsTheArchitecture if ampere || held => Some(Reason::InUse),
            MigModeSwitch::AsTheArchitecture => None,
        };
        if activation.is_none() || mode.current == enabled {
            mode.current = enabled;
        }
        Ok(MigModeChange {
            mode: *mode,
            activation: (mode.current != enabled).then_some(activation).flatten(),
        })
    }

    pub(crate) fn open_client(&mut self, client: &str) {
        self.clients.insert(client.to_string());
    }

    pub(crate) fn close_client(&mut self, client: &str) {
        self.clients.remove(client);
    }

    /// A process or another NVML client has the GPU open.
    pub(crate) fn held(&self) -> bool {
        !self.processes.is_empty() || !self.clients.is_empty()
    }

    /// Processes on the whole GPU (outside any MIG device) and, as NVML reports them on the
    /// parent device, on its MIG devices.
    pub(crate) fn gpu_processes(&self) -> Vec<ProcessInfo> {
        self.processes.keys().map(|&pid| self.process_info(pid)).collect()
    }

    pub(crate) fn reset(&mut self) {
        if let Some(mode) = self.mig.as_mut() {
            mode.current = mode.pending;
        }
        self.processes.clear();
        self.usage.clear();
    }

    pub(crate) fn geometry(&self) -> Vec<PlacedInstance> {
        let Some(model) = &self.model else { return Vec::new() };
        let mut out: Vec<_> = self
            .instances
            .values()
            .map(|i| PlacedInstance::new(model.profiles[i.profile].name.clone(), i.start))
            .collect();
        out.sort();
        out
    }

    pub(crate) fn bare_gpu_instances(&self) -> Vec<u32> {
        self.instances
            .iter()
            .filter(|(_, i)| i.compute.is_none() && i.small.is_empty())
            .map(|(&id, _)| id)
            .collect()
    }

    pub(crate) fn override_profile(
        &mut self,
        name: &str,
        change: impl FnOnce(&mut ReportedProfile),
    ) -> Option<()> {
        let id = self.model.as_ref()?.profile(name)?;
        change(&mut self.reported[id]);
        Some(())
    }

    pub(crate) fn hide_profile(&mut self, name: &str) -> Option<()> {
        self.override_profile(name, |r| r.hidden = true)
    }
}

fn gi_info(id: u32, i: &SimInstance) -> GpuInstanceInfo {
    GpuInstanceInfo {
        id,
        profile_id: i.profile_id,
        placement: Placement { start: i.start as u32, size: i.size as u32 },
    }
}

/// What NVML reports of a catalog profile; the whole GPU is no NVML profile, so NVML hides it.
fn reported_from_catalog(p: &geometer_solver::catalog::Profile) -> ReportedProfile {
    let id = NvmlProfileId(
        p.nvidia_smi_profile_id.unwrap_or(SIM_PROFILE_ID_BASE.wrapping_add(p.nvml_profile_index)),
    );
    ReportedProfile {
        info: GpuInstanceProfileInfo {
            profile_index: NvmlProfileIndex(p.nvml_profile_index),
            id,
            name: Some(p.name.clone()),
            slice_count: p.compute_slices as u32,
            instance_count: p.max_instances as u32,
            memory_mib: p.memory_mib,
            multiprocessor_count: 0,
            copy_engine_count: 0,
            decoder_count: p.engines.dec as u32,
            encoder_count: p.engines.enc as u32,
            jpeg_count: p.engines.jpeg as u32,
            ofa_count: p.engines.ofa as u32,
        },
        placements: p.starts.iter().map(|&s| Placement { start: s as u32, size: p.size as u32 }).collect(),
        hidden: p.kind == geometer_solver::catalog::ProfileKind::Whole,
    }
}
