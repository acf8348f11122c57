//! The simulated backend: GPUs of any catalog model that follow the same placement rules as the
//! planner (`geometer_solver::geometry::validate`, with NVML's reported placements winning over
//! the catalog's), deterministic UUIDs, fake processes that make instances "in use", and fault
//! injection at any call.
//!
//! `SimNvml` is a cheap handle (clone it): the agent gets one as `Arc<dyn NvmlBackend>`, the
//! test keeps another to set up GPUs, start processes, inject faults and read the call log. The
//! GPUs outlive any agent, as real ones outlive an agent restart.

mod fault;
mod gpu;
mod reset;
mod state_file;

use std::fs::File;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use geometer_solver::catalog::Catalog;
use thiserror::Error;

pub use fault::{CallRecord, Fault, FaultEffect};
pub use gpu::{ProcessUsage, ReportedProfile};
pub use reset::SimReset;

use self::fault::FaultBook;
use self::gpu::{ProcessTarget, SimGpu};
use self::state_file::{SavedNode, StateFile};
use crate::nvml::{
    ComputeInstanceInfo, DeviceInfo, GpuIndex, GpuInstanceInfo, GpuInstanceProfileInfo, MigDeviceInfo,
    MigModeChange, NvmlBackend, NvmlCall, NvmlError, NvmlProfileId, Placement, ProcessInfo, Reason,
};
use geometer_api::PlacedInstance;

/// Driver version the simulator reports.
pub const SIM_DRIVER_VERSION: &str = "570.0-sim";

/// How a simulated GPU starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimGpuOptions {
    pub mig_enabled: bool,
    pub mig_mode_switch: MigModeSwitch,
}

impl Default for SimGpuOptions {
    fn default() -> Self {
        SimGpuOptions { mig_enabled: true, mig_mode_switch: MigModeSwitch::AsTheArchitecture }
    }
}

impl SimGpuOptions {
    /// A GPU with MIG mode off, switching as its architecture does.
    pub const MIG_OFF: SimGpuOptions =
        SimGpuOptions { mig_enabled: false, mig_mode_switch: MigModeSwitch::AsTheArchitecture };
}

/// How a MIG mode change takes effect (NVIDIA MIG user guide, "Enable MIG Mode": on Ampere the
/// driver resets the GPU, which fails while any NVML client (the device plugin, GPU feature
/// discovery, dcgm-exporter, DCGM, nvidia-persistenced, the agent itself) has it open, so the
/// change stays pending; from Hopper on no reset is needed and an idle GPU changes at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigModeSwitch {
    /// Ampere (the model's architecture starts with "Ampere") stays pending with activation
    /// status IN_USE (the caller's own NVML session holds the GPU) until [`SimNvml::reset_gpu`];
    /// later architectures change at once unless a process or another client holds the GPU.
    AsTheArchitecture,
    /// Pending until [`SimNvml::reset_gpu`], whatever the model (as on Ampere).
    AfterReset,
    /// The driver cannot reset the GPU (a pass-through VM): activation status RESET_REQUIRED.
    ResetRequired,
}

/// Mistakes in setting up the simulation (not NVML failures).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SimError {
    #[error("the catalog has no GPU model {query:?}; use a catalog key such as H100-80GB, a PCI id or an NVML name")]
    UnknownModel { query: String },
    #[error("simulated GPU {gpu} does not exist (there are {count})")]
    NoSuchGpu { gpu: GpuIndex, count: usize },
    #[error("{model} has no profile {profile:?}")]
    UnknownProfile { model: String, profile: String },
    #[error("no MIG device {uuid} on simulated GPU {gpu}")]
    UnknownMigDevice { gpu: GpuIndex, uuid: String },
    #[error("simulated GPU state file {path}: {reason}")]
    StateFile { path: String, reason: String },
    #[error(transparent)]
    Nvml(#[from] NvmlError),
}

/// A simulated node's NVML.
#[derive(Clone)]
pub struct SimNvml {
    inner: Arc<Mutex<State>>,
    /// Where the GPUs live between processes, when they do.
    file: Option<Arc<StateFile>>,
}

/// The state, held: with a state file, read from it when taken and written back when dropped
/// if it changed.
struct Locked<'a> {
    state: MutexGuard<'a, State>,
    /// The file, its lock, and what it held when taken (written back only if that changed).
    file: Option<(&'a StateFile, File, SavedNode)>,
}

impl Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some((file, _held, read)) = &self.file {
            let saved = self.state.saved();
            if saved == *read {
                return;
            }
            if let Err(e) = file.store(&saved) {
                panic!("simulated GPU state file {}: cannot write it: {e}", file.path().display());
            }
        }
    }
}

struct State {
    node: String,
    catalog: Arc<Catalog>,
    gpus: Vec<SimGpu>,
    faults: FaultBook,
    next_pid: u32,
}

impl SimNvml {
    /// A node without GPUs, using the built-in catalog. `node` seeds the UUIDs.
    pub fn new(node: impl Into<String>) -> SimNvml {
        SimNvml::with_catalog(node, Catalog::builtin().clone())
    }

    pub fn with_catalog(node: impl Into<String>, catalog: Catalog) -> SimNvml {
        let state = State {
            node: node.into(),
            catalog: Arc::new(catalog),
            gpus: Vec::new(),
            faults: FaultBook::default(),
            next_pid: 1000,
        };
        SimNvml { inner: Arc::new(Mutex::new(state)), file: None }
    }

    /// Keeps the GPUs in `path` from now on: when the file exists (an earlier process wrote
    /// it for the same node and models), its instances and processes replace the ones here;
    /// otherwise it is written with these. Add the GPUs first.
    pub fn with_state_file(mut self, path: &Path) -> Result<SimNvml, SimError> {
        let file = StateFile::new(path);
        let error = |reason: String| SimError::StateFile { path: path.display().to_string(), reason };
        let held = file.hold().map_err(|e| error(format!("cannot lock it: {e}")))?;
        let saved = file.load().map_err(|e| error(format!("cannot read it: {e}")))?;
        {
            let mut st = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(saved) = saved {
                st.restore(&saved).map_err(error)?;
            }
            file.store(&st.saved()).map_err(|e| error(format!("cannot write it: {e}")))?;
        }
        drop(held);
        self.file = Some(Arc::new(file));
        Ok(self)
    }

    fn lock(&self) -> Locked<'_> {
        // A panicking test thread must not hide the state from the others.
        let mut state = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let file = self.file.as_deref().map(|file| {
            let path = file.path().display();
            let held = file
                .hold()
                .unwrap_or_else(|e| panic!("simulated GPU state file {path}: cannot lock it: {e}"));
            match file.load() {
                Ok(Some(saved)) => {
                    if let Err(reason) = state.restore(&saved) {
                        panic!("simulated GPU state file {path}: {reason}");
                    }
                }
                Ok(None) => {}
                Err(e) => panic!("simulated GPU state file {path}: cannot read it: {e}"),
            }
            let read = state.saved();
            (file, held, read)
        });
        Locked { state, file }
    }

    /// Adds a MIG-enabled GPU of a catalog model (key, PCI id or NVML name) with no instances.
    pub fn add_gpu(&self, model: &str) -> Result<GpuIndex, SimError> {
        self.add_gpu_with(model, SimGpuOptions::default())
    }

    pub fn add_gpu_with(&self, model: &str, options: SimGpuOptions) -> Result<GpuIndex, SimError> {
        let mut st = self.lock();
        let found = st
            .catalog
            .find(model)
            .cloned()
            .ok_or_else(|| SimError::UnknownModel { query: model.to_string() })?;
        let index = st.gpus.len() as GpuIndex;
        let gpu = SimGpu::new(&st.node, index, found, options);
        st.gpus.push(gpu);
        Ok(index)
    }

    /// Adds a GPU that cannot do MIG (e.g. a T4), for inventories of mixed nodes.
    pub fn add_gpu_without_mig(&self, name: &str, pci_device_id: u32) -> GpuIndex {
        let mut st = self.lock();
        let index = st.gpus.len() as GpuIndex;
        let gpu = SimGpu::without_mig(&st.node, index, name, pci_device_id);
        st.gpus.push(gpu);
        index
    }

    /// Creates instances (each with its full compute instance) by profile name and start,
    /// following the same rules as [`NvmlBackend::create_gpu_instance`]. Not logged as calls and
    /// never faulted: this is the test's hand, not the agent's.
    pub fn set_geometry(
        &self,
        gpu: GpuIndex,
        instances: &[(&str, u8)],
    ) -> Result<Vec<MigDeviceInfo>, SimError> {
        let mut st = self.lock();
        let g = st.gpu_mut_setup(gpu)?;
        let mut created = Vec::new();
        for &(profile, start) in instances {
            let (id, size) = g.profile_id_by_name(profile).ok_or_else(|| SimError::UnknownProfile {
                model: g.model_key().to_string(),
                profile: profile.to_string(),
            })?;
            let placement = Placement { start: start as u32, size };
            let mk = |reason| NvmlError::CreateGpuInstance { gpu, profile: id, placement, reason };
            let gi = g.create_gpu_instance(id, placement).map_err(mk)?;
            g.create_compute_instance(gi.id).map_err(|reason| NvmlError::CreateComputeInstance {
                gpu,
                gpu_instance: gi.id,
                reason,
            })?;
            created.push(
                g.mig_devices().into_iter().find(|d| d.gpu_instance_id == gi.id).expect("just created"),
            );
        }
        Ok(created)
    }

    /// Destroys the instance behind MIG device `mig_uuid` (its compute instance, then its GPU
    /// instance) following NVML's rules: refused while a process or another client holds it.
    /// An instance that no longer exists is no error. Not logged as calls and never faulted:
    /// this is the DRA driver's hand (or the test's), not the agent's.
    pub fn remove_instance(&self, gpu: GpuIndex, mig_uuid: &str) -> Result<(), SimError> {
        let mut st = self.lock();
        let g = st.gpu_mut_setup(gpu)?;
        let Some(device) = g.mig_devices().into_iter().find(|d| d.uuid == mig_uuid) else { return Ok(()) };
        let (gi, ci) = (device.gpu_instance_id, device.compute_instance_id);
        g.destroy_compute_instance(gi, ci).map_err(|reason| {
            SimError::Nvml(NvmlError::DestroyComputeInstance {
                gpu,
                gpu_instance: gi,
                compute_instance: ci,
                reason,
            })
        })?;
        g.destroy_gpu_instance(gi)
            .map_err(|reason| SimError::Nvml(NvmlError::DestroyGpuInstance { gpu, gpu_instance: gi, reason }))
    }

    /// The instances on a GPU, by catalog profile name and start, sorted.
    pub fn geometry(&self, gpu: GpuIndex) -> Result<Vec<PlacedInstance>, SimError> {
        let mut st = self.lock();
        Ok(st.gpu_mut_setup(gpu)?.geometry())
    }

    /// Splits a GPU instance (by id, without its full compute instance) with one more one-slice
    /// compute instance, as `nvidia-smi mig -cci` with a smaller profile would: for tests of GPU
    /// instances that are not one full-size compute instance. Returns its MIG device.
    pub fn add_small_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<MigDeviceInfo, SimError> {
        let mut st = self.lock();
        let g = st.gpu_mut_setup(gpu)?;
        g.create_small_compute_instance(gpu_instance)
            .map_err(|reason| SimError::Nvml(NvmlError::CreateComputeInstance { gpu, gpu_instance, reason }))
    }

    /// GPU instances without a compute instance (half-built), by GPU-instance id.
    pub fn gpu_instances_without_compute(&self, gpu: GpuIndex) -> Result<Vec<u32>, SimError> {
        let mut st = self.lock();
        Ok(st.gpu_mut_setup(gpu)?.bare_gpu_instances())
    }

    /// Starts a fake process on a MIG device (by `MIG-...` UUID); the instance is then in use
    /// and NVML refuses to destroy it. Returns the pid.
    pub fn start_process(&self, gpu: GpuIndex, mig_uuid: &str) -> Result<u32, SimError> {
        self.start_process_using(gpu, mig_uuid, ProcessUsage::default())
    }

    /// [`SimNvml::start_process`] with what the process uses of the device.
    pub fn start_process_using(
        &self,
        gpu: GpuIndex,
        mig_uuid: &str,
        usage: ProcessUsage,
    ) -> Result<u32, SimError> {
        let mut st = self.lock();
        let pid = st.next_pid;
        let g = st.gpu_mut_setup(gpu)?;
        let gi = g
            .gpu_instance_of_uuid(mig_uuid)
            .ok_or_else(|| SimError::UnknownMigDevice { gpu, uuid: mig_uuid.to_string() })?;
        g.add_process(pid, ProcessTarget::GpuInstance(gi), usage);
        st.next_pid += 1;
        Ok(pid)
    }

    /// Starts a fake process on the whole GPU (outside any MIG device).
    pub fn start_gpu_process(&self, gpu: GpuIndex) -> Result<u32, SimError> {
        self.start_gpu_process_using(gpu, ProcessUsage::default())
    }

    /// [`SimNvml::start_gpu_process`] with what the process uses of the GPU.
    pub fn start_gpu_process_using(&self, gpu: GpuIndex, usage: ProcessUsage) -> Result<u32, SimError> {
        let mut st = self.lock();
        let pid = st.next_pid;
        st.gpu_mut_setup(gpu)?.add_process(pid, ProcessTarget::Gpu, usage);
        st.next_pid += 1;
        Ok(pid)
    }

    /// Ends a fake process; false when no such process runs.
    pub fn stop_process(&self, pid: u32) -> bool {
        self.lock().gpus.iter_mut().any(|g| g.remove_process(pid))
    }

    /// Another NVML client (e.g. `dcgm-exporter`) opens the GPU: no process shows on it, but
    /// NVML answers IN_USE to destroys and MIG mode changes until [`SimNvml::close_client`].
    pub fn open_client(&self, gpu: GpuIndex, client: &str) -> Result<(), SimError> {
        self.lock().gpu_mut_setup(gpu)?.open_client(client);
        Ok(())
    }

    pub fn close_client(&self, gpu: GpuIndex, client: &str) -> Result<(), SimError> {
        self.lock().gpu_mut_setup(gpu)?.close_client(client);
        Ok(())
    }

    /// [`SimNvml::open_client`] (`open`) or [`SimNvml::close_client`] on every GPU: a node-wide
    /// client such as DCGM or the device plugin.
    pub fn hold_every_gpu(&self, client: &str, open: bool) {
        let mut gpu = 0;
        while (if open { self.open_client(gpu, client) } else { self.close_client(gpu, client) }).is_ok() {
            gpu += 1;
        }
    }

    /// Applies a pending MIG mode change, as a GPU reset would.
    pub fn reset_gpu(&self, gpu: GpuIndex) -> Result<(), SimError> {
        self.lock().gpu_mut_setup(gpu)?.reset();
        Ok(())
    }

    /// Whether a process or another NVML client has the GPU open.
    pub fn held(&self, gpu: GpuIndex) -> Result<bool, SimError> {
        Ok(self.lock().gpu_mut_setup(gpu)?.held())
    }

    /// Changes what NVML reports for one profile (and, since NVML wins, what it allows): for
    /// tests of catalog disagreements.
    pub fn override_profile(
        &self,
        gpu: GpuIndex,
        profile: &str,
        change: impl FnOnce(&mut ReportedProfile),
    ) -> Result<(), SimError> {
        let mut st = self.lock();
        let g = st.gpu_mut_setup(gpu)?;
        let model = g.model_key().to_string();
        g.override_profile(profile, change)
            .ok_or(SimError::UnknownProfile { model, profile: profile.to_string() })
    }

    /// Makes NVML stop offering a profile (as a driver without it would).
    pub fn hide_profile(&self, gpu: GpuIndex, profile: &str) -> Result<(), SimError> {
        let mut st = self.lock();
        let g = st.gpu_mut_setup(gpu)?;
        let model = g.model_key().to_string();
        g.hide_profile(profile).ok_or(SimError::UnknownProfile { model, profile: profile.to_string() })
    }

    /// Arms a fault; it strikes the matching call it names.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.inject(fault);
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Every NVML call so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.lock().faults.calls().to_vec()
    }

    pub fn call_count(&self) -> u64 {
        self.lock().faults.calls().len() as u64
    }

    /// Runs one trait call: records it, lets an armed fault strike before or after the effect.
    fn run<T>(
        &self,
        call: NvmlCall,
        gpu: Option<GpuIndex>,
        err: impl Fn(Reason) -> NvmlError,
        op: impl FnOnce(&mut State) -> Result<T, NvmlError>,
    ) -> Result<T, NvmlError> {
        let mut st = self.lock();
        let strike = st.faults.record(call, gpu);
        if let Some((FaultEffect::FailBefore, reason)) = &strike {
            return Err(err(reason.clone()));
        }
        let value = op(&mut st)?;
        match strike {
            Some((_, reason)) => Err(err(reason)),
            None => Ok(value),
        }
    }
}

impl State {
    fn saved(&self) -> SavedNode {
        SavedNode { gpus: self.gpus.iter().map(SimGpu::saved).collect(), next_pid: self.next_pid }
    }

    fn restore(&mut self, saved: &SavedNode) -> Result<(), String> {
        if saved.gpus.len() != self.gpus.len() {
            return Err(format!(
                "it holds {} GPUs, this node simulates {}; simulate the same GPUs or remove the file",
                saved.gpus.len(),
                self.gpus.len()
            ));
        }
        for (index, (gpu, saved)) in self.gpus.iter_mut().zip(&saved.gpus).enumerate() {
            if !gpu.restore(saved) {
                return Err(format!(
                    "GPU {index} in it is another GPU (another node or model); simulate the same GPUs or remove the file"
                ));
            }
        }
        self.next_pid = saved.next_pid;
        Ok(())
    }

    fn gpu_mut(&mut self, gpu: GpuIndex) -> Result<&mut SimGpu, NvmlError> {
        let count = self.gpus.len() as u32;
        self.gpus.get_mut(gpu as usize).ok_or(NvmlError::NoSuchGpu { gpu, count })
    }

    fn gpu_mut_setup(&mut self, gpu: GpuIndex) -> Result<&mut SimGpu, SimError> {
        let count = self.gpus.len();
        self.gpus.get_mut(gpu as usize).ok_or(SimError::NoSuchGpu { gpu, count })
    }
}

impl NvmlBackend for SimNvml {
    fn driver_version(&self) -> Result<String, NvmlError> {
        let err = |reason| NvmlError::Init { reason };
        self.run(NvmlCall::DriverVersion, None, err, |_| Ok(SIM_DRIVER_VERSION.to_string()))
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, NvmlError> {
        let err = |reason| NvmlError::Gpu { gpu: 0, call: NvmlCall::Devices, reason };
        self.run(NvmlCall::Devices, None, err, |st| Ok(st.gpus.iter().map(SimGpu::device_info).collect()))
    }

    fn gpu_instance_profiles(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceProfileInfo>, NvmlError> {
        let err = move |reason| NvmlError::Gpu { gpu, call: NvmlCall::GpuInstanceProfiles, reason };
        self.run(NvmlCall::GpuInstanceProfiles, Some(gpu), err, |st| Ok(st.gpu_mut(gpu)?.profile_infos()))
    }

    fn possible_placements(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
    ) -> Result<Vec<Placement>, NvmlError> {
        let err = move |reason| NvmlError::Profile {
            gpu,
            call: NvmlCall::PossiblePlacements,
            profile: profile_id,
            reason,
        };
        self.run(NvmlCall::PossiblePlacements, Some(gpu), err, |st| {
            st.gpu_mut(gpu)?.possible_placements(profile_id).map_err(err)
        })
    }

    fn gpu_instances(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceInfo>, NvmlError> {
        let err = move |reason| NvmlError::Gpu { gpu, call: NvmlCall::GpuInstances, reason };
        self.run(NvmlCall::GpuInstances, Some(gpu), err, |st| st.gpu_mut(gpu)?.gpu_instances().map_err(err))
    }

    fn create_gpu_instance(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
        placement: Placement,
    ) -> Result<GpuInstanceInfo, NvmlError> {
        let err = move |reason| NvmlError::CreateGpuInstance { gpu, profile: profile_id, placement, reason };
        self.run(NvmlCall::CreateGpuInstance, Some(gpu), err, |st| {
            st.gpu_mut(gpu)?.create_gpu_instance(profile_id, placement).map_err(err)
        })
    }

    fn destroy_gpu_instance(&self, gpu: GpuIndex, gpu_instance: u32) -> Result<(), NvmlError> {
        let err = move |reason| NvmlError::DestroyGpuInstance { gpu, gpu_instance, reason };
        self.run(NvmlCall::DestroyGpuInstance, Some(gpu), err, |st| {
            st.gpu_mut(gpu)?.destroy_gpu_instance(gpu_instance).map_err(err)
        })
    }

    fn compute_instances(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceInfo>, NvmlError> {
        let err = move |reason| NvmlError::Gpu { gpu, call: NvmlCall::ComputeInstances, reason };
        self.run(NvmlCall::ComputeInstances, Some(gpu), err, |st| {
            st.gpu_mut(gpu)?.compute_instances(gpu_instance).map_err(err)
        })
    }

    fn create_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<ComputeInstanceInfo, NvmlError> {
        let err = move |reason| NvmlError::CreateComputeInstance { gpu, gpu_instance, reason };
        self.run(NvmlCall::CreateComputeInstance, Some(gpu), err, |st| {
            st.gpu_mut(gpu)?.create_compute_instance(gpu_instance).map_err(err)
        })
    }

    fn destroy_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), NvmlError> {
        let err =
            move |reason| NvmlError::DestroyComputeInstance { gpu, gpu_instance, compute_instance, reason };
        self.run(NvmlCall::DestroyComputeInstance, Some(gpu), err, |st| {
            st.gpu_mut(gpu)?.destroy_compute_instance(gpu_instance, compute_instance).map_err(err)
        })
    }

    fn mig_devices(&self, gpu: GpuIndex) -> Result<Vec<MigDeviceInfo>, NvmlError> {
        let err = move |reason| NvmlError::Gpu { gpu, call: NvmlCall::MigDevices, reason };
        self.run(NvmlCall::MigDevices, Some(gpu), err, |st| Ok(st.gpu_mut(gpu)?.mig_devices()))
    }

    fn processes(&self, gpu: GpuIndex, mig_uuid: &str) -> Result<Vec<ProcessInfo>, NvmlError> {
        let err = |reason| NvmlError::MigDevice { gpu, uuid: mig_uuid.to_string(), reason };
        self.run(NvmlCall::Processes, Some(gpu), err, |st| st.gpu_mut(gpu)?.processes(mig_uuid).map_err(err))
    }

    fn gpu_processes(&self, gpu: GpuIndex) -> Result<Vec<ProcessInfo>, NvmlError> {
        let err = move |reason| NvmlError::Gpu { gpu, call: NvmlCall::GpuProcesses, reason };
        self.run(NvmlCall::GpuProcesses, Some(gpu), err, |st| Ok(st.gpu_mut(gpu)?.gpu_processes()))
    }

    fn utilization(&self, gpu: GpuIndex) -> Result<u32, NvmlError> {
        let err = move |reason| NvmlError::Gpu { gpu, call: NvmlCall::Utilization, reason };
        self.run(NvmlCall::Utilization, Some(gpu), err, |st| Ok(st.gpu_mut(gpu)?.utilization()))
    }

    fn set_mig_mode(&self, gpu: GpuIndex, enabled: bool) -> Result<MigModeChange, NvmlError> {
        let err = move |reason| NvmlError::SetMigMode { gpu, enabled, reason };
        self.run(NvmlCall::SetMigMode, Some(gpu), err, |st| {
            st.gpu_mut(gpu)?.set_mig_mode(enabled).map_err(err)
        })
    }
}
