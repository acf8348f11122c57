//! One simulated node's hardware and kubelet state: its NVML (simulated GPUs), the devices the
//! device plugin advertised when it last started, and which pod holds which device (what the
//! kubelet's PodResources API answers).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use geometer_solver::catalog::Catalog;
use geometer_solver::PodKey;
use thiserror::Error;

use geometer_agent::nvml::sim::{ProcessUsage, SimNvml};
use geometer_agent::nvml::{GpuIndex, NvmlBackend, NvmlError};
use geometer_agent::pod_resources::DeviceAssignment;
use geometer_agent::read_inventory;
use geometer_agent::SharedAssignments;
use geometer_api::resources::device_resource;
use geometer_api::GpuInventory;
use geometer_solver::catalog::WHOLE;

use crate::spec::DeviceStack;

/// A MIG device, or a whole GPU with MIG off (profile `whole`, the GPU's UUID), as the device
/// plugin lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Device {
    pub gpu: GpuIndex,
    pub start: u8,
    pub profile: String,
    /// `MIG-...`: the device id the plugin advertises and PodResources reports.
    pub uuid: String,
}

impl Device {
    pub fn resource(&self) -> String {
        device_resource(&self.profile)
    }

    fn is_whole(&self) -> bool {
        self.profile == WHOLE
    }
}

impl NodeState {
    /// The devices of the pod `key` with `uid` when the kubelet runs it already.
    fn devices_of(&self, key: &PodKey, uid: &str) -> Option<Vec<Device>> {
        self.running.get(key).filter(|r| r.uid == uid).map(|r| r.devices.clone())
    }

    /// Whether a running pod holds the device `uuid`.
    fn is_held(&self, uuid: &str) -> bool {
        self.running.values().any(|r| r.devices.iter().any(|d| d.uuid == uuid))
    }

    /// Free advertised devices for each container's MIG requests, lowest GPU and placement
    /// first.
    fn choose_requested(
        &self,
        requests: &[(String, BTreeMap<String, u32>)],
    ) -> Result<Vec<Chosen>, AdmitError> {
        let mut chosen: Vec<Chosen> = Vec::new();
        for (container, wants) in requests {
            for (profile, &wanted) in wants {
                let resource = device_resource(profile);
                let mut free: Vec<&Device> = self
                    .advertised
                    .get(&resource)
                    .map(|v| {
                        v.iter()
                            .filter(|d| {
                                !self.is_held(&d.uuid) && !chosen.iter().any(|c| c.device.uuid == d.uuid)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                free.sort();
                if free.len() < wanted as usize {
                    return Err(AdmitError::Unavailable { resource, wanted, free: free.len() });
                }
                chosen.extend(free.into_iter().take(wanted as usize).map(|d| Chosen {
                    container: container.clone(),
                    device: d.clone(),
                    claim: None,
                }));
            }
        }
        Ok(chosen)
    }

    /// The devices the DRA plugin published under the names `claimed` gives, for `container`;
    /// one it no longer lists, or one another pod holds, refuses the pod.
    fn choose_claimed(&self, container: &str, claimed: &[ClaimedDevice]) -> Result<Vec<Chosen>, AdmitError> {
        claimed
            .iter()
            .map(|c| match self.dra_devices.get(&c.device) {
                Some(d) if !self.is_held(&d.uuid) => {
                    Ok(Chosen { container: container.to_string(), device: d.clone(), claim: Some(c.clone()) })
                }
                Some(d) => Err(AdmitError::Held { device: c.device.clone(), uuid: d.uuid.clone() }),
                None => Err(AdmitError::NotPublished { device: c.device.clone() }),
            })
            .collect()
    }
}

/// A device the DRA plugin published, allocated to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedDevice {
    /// The claim, `namespace/name`.
    pub claim: String,
    /// The device's name in the plugin's ResourceSlice.
    pub device: String,
}

/// A device chosen for a container: one the device plugin advertised, or (with `claim`) one
/// the DRA plugin published and the scheduler allocated.
struct Chosen {
    container: String,
    device: Device,
    claim: Option<ClaimedDevice>,
}

impl Chosen {
    /// What the kubelet's PodResources reports for it: a device plugin's device by its id, a
    /// DRA device by the claim and its published name.
    fn assignment(&self, key: &PodKey) -> DeviceAssignment {
        let (resource, device_id) = match &self.claim {
            Some(c) => (crate::dra::DRA_DRIVER.to_string(), c.device.clone()),
            None => (self.device.resource(), self.device.uuid.clone()),
        };
        DeviceAssignment {
            namespace: key.namespace().to_string(),
            pod: key.name().to_string(),
            container: self.container.clone(),
            resource,
            device_id,
            claim: self.claim.as_ref().map(|c| c.claim.clone()),
        }
    }
}

/// Devices by the resource name the device plugin advertises them under.
type ByResource = BTreeMap<String, Vec<Device>>;

/// What the DRA plugin read and published at one start.
pub struct DraPublication {
    /// The GPUs as NVML reported them.
    pub gpus: Vec<GpuInventory>,
    /// The devices, by the name the driver gives each.
    pub devices: BTreeMap<String, Device>,
    /// The plugin's start number (from 1).
    pub start: u32,
}

/// A pod the kubelet runs on this node.
#[derive(Debug, Clone)]
pub struct RunningPod {
    pub uid: String,
    pub devices: Vec<Device>,
    pub pids: Vec<(GpuIndex, u32)>,
}

/// Why the kubelet refused a pod (the pod ends `Failed` with reason `UnexpectedAdmissionError`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AdmitError {
    #[error("Allocate failed due to requested number of devices unavailable for {resource}. Requested: {wanted}, Available: {free}")]
    Unavailable { resource: String, wanted: u32, free: usize },
    #[error("device {uuid} of {resource} no longer exists on the node")]
    Vanished { resource: String, uuid: String },
    #[error("DRA device {device} is not among the devices the DRA plugin published on this node")]
    NotPublished { device: String },
    #[error("DRA device {device} ({uuid}) is in use by another pod on this node")]
    Held { device: String, uuid: String },
    #[error("DRA device {device} cannot be prepared: {reason}")]
    NotPrepared { device: String, reason: String },
}

#[derive(Default)]
struct NodeState {
    /// By resource name, as the plugin listed them at its last start.
    advertised: BTreeMap<String, Vec<Device>>,
    /// By DRA device name, as the DRA plugin published them at its last start.
    dra_devices: BTreeMap<String, Device>,
    /// By `namespace/name`.
    running: BTreeMap<PodKey, RunningPod>,
    plugin_starts: u32,
}

/// Placement units of the node's GPUs: per profile name, and in all.
#[derive(Debug, Clone, Default)]
pub struct SliceUnits {
    pub sizes: BTreeMap<String, u64>,
    pub total: u64,
}

impl SliceUnits {
    /// From the catalog models of the node's GPUs (unknown models count nothing).
    pub fn of(catalog: &Catalog, models: &[&str]) -> SliceUnits {
        let mut units = SliceUnits::default();
        for m in models.iter().filter_map(|m| catalog.find(m)) {
            units.total += m.placement_units as u64;
            for p in &m.profiles {
                units.sizes.entry(p.name.clone()).or_insert(p.size as u64);
            }
        }
        units
    }
}

pub struct SimNode {
    pub name: String,
    /// The node's address, for pod statuses.
    pub ip: String,
    pub nvml: SimNvml,
    pub assignments: SharedAssignments,
    /// What advertises the node's GPUs.
    pub stack: DeviceStack,
    units: SliceUnits,
    state: Mutex<NodeState>,
}

impl SimNode {
    pub fn new(name: &str, ip: &str, nvml: SimNvml, units: SliceUnits) -> SimNode {
        SimNode {
            name: name.to_string(),
            ip: ip.to_string(),
            nvml,
            units,
            assignments: SharedAssignments::default(),
            stack: DeviceStack::DevicePlugin,
            state: Mutex::new(NodeState::default()),
        }
    }

    /// The node with its GPUs advertised by `stack`.
    pub fn with_stack(mut self, stack: DeviceStack) -> SimNode {
        self.stack = stack;
        self
    }

    fn lock(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device plugin starts: it lists every MIG device NVML reports (a GPU instance without
    /// its compute instance is no device) and the kubelet takes that list. Returns the counts
    /// per resource, and the plugin's start number (from 1).
    pub fn start_plugin(&self, catalog: &Catalog) -> Result<(BTreeMap<String, u64>, u32), NvmlError> {
        let (_, advertised) = self.list_devices(catalog)?;
        let counts = advertised.iter().map(|(k, v)| (k.clone(), v.len() as u64)).collect();
        let mut st = self.lock();
        st.advertised = advertised;
        st.plugin_starts += 1;
        Ok((counts, st.plugin_starts))
    }

    /// NVIDIA's DRA kubelet plugin starts. In static MIG mode it lists the same devices as the
    /// device plugin, each under the name the driver gives it. In DynamicMIG mode it first
    /// destroys every instance no running pod's claim holds (the driver's `driver.go` ->
    /// `obliterateStaleMIGDevices`), then lists a device for every profile and placement.
    pub fn start_dra_plugin(&self, catalog: &Catalog) -> Result<DraPublication, NvmlError> {
        if self.stack == DeviceStack::DraDynamicMig {
            self.remove_unprepared();
        }
        let (gpus, advertised) = self.list_devices(catalog)?;
        let named: BTreeMap<String, Device> = match self.stack {
            DeviceStack::DraDynamicMig => crate::dra::abstract_devices(&gpus, catalog),
            _ => advertised
                .values()
                .flatten()
                .map(|d| {
                    let model = gpus.iter().find(|g| g.index == d.gpu).and_then(|g| catalog.find(&g.model));
                    (crate::dra::device_name(model, d), d.clone())
                })
                .collect(),
        };
        let mut st = self.lock();
        st.advertised = advertised;
        st.dra_devices = named.clone();
        st.plugin_starts += 1;
        Ok(DraPublication { gpus, devices: named, start: st.plugin_starts })
    }

    /// DynamicMIG: destroys the instances no running pod holds.
    fn remove_unprepared(&self) {
        let st = self.lock();
        for gpu in self.nvml.devices().unwrap_or_default() {
            for device in self.nvml.mig_devices(gpu.index).unwrap_or_default() {
                if st.is_held(&device.uuid) {
                    continue;
                }
                if let Err(e) = self.nvml.remove_instance(gpu.index, &device.uuid) {
                    tracing::warn!(node = %self.name, gpu = gpu.index, uuid = %device.uuid, error = %e, "simulated DRA plugin cannot destroy a stale instance");
                }
            }
        }
    }

    /// DynamicMIG: prepares the devices `claimed` for `container` by creating each one's
    /// instance at its profile and placement; on a failure the ones made are destroyed again.
    fn prepare(
        &self,
        st: &NodeState,
        container: &str,
        claimed: &[ClaimedDevice],
    ) -> Result<Vec<Chosen>, AdmitError> {
        let mut chosen: Vec<Chosen> = Vec::new();
        for c in claimed {
            let made = match st.dra_devices.get(&c.device) {
                None => Err(AdmitError::NotPublished { device: c.device.clone() }),
                Some(d) => self
                    .nvml
                    .set_geometry(d.gpu, &[(d.profile.as_str(), d.start)])
                    .map(|made| Device { uuid: made[0].uuid.clone(), ..d.clone() })
                    .map_err(|e| AdmitError::NotPrepared { device: c.device.clone(), reason: e.to_string() }),
            };
            match made {
                Ok(device) => {
                    chosen.push(Chosen { container: container.to_string(), device, claim: Some(c.clone()) })
                }
                Err(e) => {
                    self.unprepare(chosen.iter().map(|c| &c.device));
                    return Err(e);
                }
            }
        }
        Ok(chosen)
    }

    /// DynamicMIG: destroys the instances of `devices` (their pod has stopped).
    fn unprepare<'a>(&self, devices: impl Iterator<Item = &'a Device>) {
        for d in devices {
            if let Err(e) = self.nvml.remove_instance(d.gpu, &d.uuid) {
                tracing::warn!(node = %self.name, gpu = d.gpu, uuid = %d.uuid, error = %e, "simulated DRA plugin cannot destroy an instance it made");
            }
        }
    }

    /// Every MIG device NVML reports, and each GPU with MIG off whole, by resource name.
    fn list_devices(&self, catalog: &Catalog) -> Result<(Vec<GpuInventory>, ByResource), NvmlError> {
        let inventory = read_inventory(&self.nvml, catalog, &[])?;
        let mut advertised: BTreeMap<String, Vec<Device>> = BTreeMap::new();
        for gpu in &inventory.gpus {
            // With the mixed strategy a GPU with MIG off is advertised whole, as `nvidia.com/gpu`
            // (NVIDIA/k8s-device-plugin, `internal/rm/rm.go`).
            if !gpu.mig_mode.current {
                let d =
                    Device { gpu: gpu.index, start: 0, profile: WHOLE.to_string(), uuid: gpu.uuid.clone() };
                advertised.entry(d.resource()).or_default().push(d);
            }
            for i in &gpu.instances {
                if let Some(uuid) = &i.uuid {
                    let d = Device {
                        gpu: gpu.index,
                        start: i.start,
                        profile: i.profile.clone(),
                        uuid: uuid.clone(),
                    };
                    advertised.entry(d.resource()).or_default().push(d);
                }
            }
        }
        Ok((inventory.gpus, advertised))
    }

    /// Admits a pod: takes free advertised devices for each container's MIG requests (lowest
    /// GPU and placement first), starts a process on each, and records the assignment for
    /// PodResources. Nothing is taken when any request cannot be met.
    pub fn admit(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        requests: &[(String, BTreeMap<String, u32>)],
        usage: ProcessUsage,
    ) -> Result<Vec<Device>, AdmitError> {
        self.admit_with(PodKey::new(namespace, pod), uid, usage, |st| st.choose_requested(requests))
    }

    /// Admits a pod whose DRA claims were allocated the devices `claimed` (as the DRA plugin
    /// published them), for `container`: the kubelet prepares exactly those devices (in
    /// DynamicMIG mode, creating their instances). A device the plugin no longer lists, or one
    /// another pod holds, refuses the pod.
    pub fn admit_claimed(
        &self,
        key: PodKey,
        uid: &str,
        container: &str,
        claimed: &[ClaimedDevice],
        usage: ProcessUsage,
    ) -> Result<Vec<Device>, AdmitError> {
        match self.stack {
            DeviceStack::DraDynamicMig => {
                self.admit_with(key, uid, usage, |st| self.prepare(st, container, claimed))
            }
            _ => self.admit_with(key, uid, usage, |st| st.choose_claimed(container, claimed)),
        }
    }

    /// The pod's devices when it runs already; otherwise the devices `choose` picks, started.
    fn admit_with(
        &self,
        key: PodKey,
        uid: &str,
        usage: ProcessUsage,
        choose: impl FnOnce(&NodeState) -> Result<Vec<Chosen>, AdmitError>,
    ) -> Result<Vec<Device>, AdmitError> {
        let mut st = self.lock();
        if let Some(devices) = st.devices_of(&key, uid) {
            return Ok(devices);
        }
        let chosen = choose(&st)?;
        self.run_on(&mut st, key, uid, chosen, usage)
    }

    /// Starts a process on each chosen device and records the assignment for PodResources;
    /// nothing is kept when a device vanished meanwhile.
    fn run_on(
        &self,
        st: &mut NodeState,
        key: PodKey,
        uid: &str,
        chosen: Vec<Chosen>,
        usage: ProcessUsage,
    ) -> Result<Vec<Device>, AdmitError> {
        let mut pids = Vec::new();
        for d in chosen.iter().map(|c| &c.device) {
            let started = match d.is_whole() {
                true => self.nvml.start_gpu_process_using(d.gpu, usage),
                false => self.nvml.start_process_using(d.gpu, &d.uuid, usage),
            };
            match started {
                Ok(pid) => pids.push((d.gpu, pid)),
                Err(_) => {
                    for (_, pid) in pids {
                        self.nvml.stop_process(pid);
                    }
                    if self.stack == DeviceStack::DraDynamicMig {
                        self.unprepare(chosen.iter().map(|c| &c.device));
                    }
                    return Err(AdmitError::Vanished { resource: d.resource(), uuid: d.uuid.clone() });
                }
            }
        }
        self.assignments.update(|list| list.extend(chosen.iter().map(|c| c.assignment(&key))));
        let devices: Vec<Device> = chosen.into_iter().map(|c| c.device).collect();
        st.running.insert(key, RunningPod { uid: uid.to_string(), devices: devices.clone(), pids });
        Ok(devices)
    }

    /// The pod ended or was deleted: its processes stop and its devices are free again (in
    /// DynamicMIG mode, their instances are destroyed).
    pub fn release(&self, namespace: &str, pod: &str) -> Option<RunningPod> {
        let key = PodKey::new(namespace, pod);
        let gone = self.lock().running.remove(&key)?;
        for (_, pid) in &gone.pids {
            self.nvml.stop_process(*pid);
        }
        if self.stack == DeviceStack::DraDynamicMig {
            self.unprepare(gone.devices.iter());
        }
        self.assignments.update(|list| list.retain(|a| !(a.namespace == namespace && a.pod == pod)));
        Some(gone)
    }

    pub fn is_running(&self, namespace: &str, pod: &str, uid: &str) -> bool {
        self.lock().running.get(&PodKey::new(namespace, pod)).is_some_and(|r| r.uid == uid)
    }

    pub fn uid_of(&self, namespace: &str, pod: &str) -> Option<String> {
        self.lock().running.get(&PodKey::new(namespace, pod)).map(|r| r.uid.clone())
    }

    /// `namespace/name` of every pod the kubelet runs here.
    pub fn running(&self) -> Vec<PodKey> {
        self.lock().running.keys().cloned().collect()
    }

    /// Devices per resource as the plugin last advertised them.
    pub fn advertised(&self) -> BTreeMap<String, Vec<Device>> {
        self.lock().advertised.clone()
    }

    /// Memory slices (placement units) held by running pods, and on all this node's MIG GPUs.
    pub fn slice_usage(&self) -> (u64, u64) {
        let used = self
            .lock()
            .running
            .values()
            .flat_map(|r| &r.devices)
            .map(|d| self.units.sizes.get(&d.profile).copied().unwrap_or(0))
            .sum();
        (used, self.units.total)
    }

    /// `namespace/name` of pods running here that lost a device: its instance no longer
    /// exists on the GPU, or its whole GPU went into MIG mode (either must never happen).
    pub fn pods_without_devices(&self) -> Vec<PodKey> {
        let devices = self.nvml.devices().unwrap_or_default();
        let mut present: Vec<String> = devices
            .iter()
            .flat_map(|d| self.nvml.mig_devices(d.index).unwrap_or_default())
            .map(|d| d.uuid)
            .collect();
        present.extend(devices.into_iter().filter(|d| d.mig_mode.is_none_or(|m| !m.current)).map(|d| d.uuid));
        let st = self.lock();
        st.running
            .iter()
            .filter(|(_, r)| r.devices.iter().any(|d| !present.contains(&d.uuid)))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// How often the device plugin has started on this node.
    pub fn plugin_starts(&self) -> u32 {
        self.lock().plugin_starts
    }
}
