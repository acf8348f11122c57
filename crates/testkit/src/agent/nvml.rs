//! An NVML wrapper for crash tests: counts calls, can stop the agent dead at the Nth call
//! (before or after the call takes effect), and audits that no destroy ever targets a device a
//! pod holds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use geometer_agent::nvml::sim::SimNvml;
use geometer_agent::nvml::{
    ComputeInstanceInfo, DeviceInfo, GpuIndex, GpuInstanceInfo, GpuInstanceProfileInfo, MigDeviceInfo,
    MigModeChange, NvmlBackend, NvmlError, NvmlProfileId, Placement, ProcessInfo, Reason,
};
use geometer_agent::SharedAssignments;

/// Where the kill strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillAt {
    /// The Nth call never happens.
    Before(u64),
    /// The Nth call takes effect, and the agent never learns of it.
    After(u64),
}

#[derive(Default)]
struct Gate {
    released: Mutex<bool>,
    cv: Condvar,
}

pub struct AuditedNvml {
    inner: SimNvml,
    assignments: SharedAssignments,
    calls: AtomicU64,
    kill: Option<KillAt>,
    killed: tokio::sync::mpsc::UnboundedSender<()>,
    gate: Arc<Gate>,
    uuids: Mutex<BTreeMap<(GpuIndex, u32), String>>,
    pub violations: Mutex<Vec<String>>,
}

/// Lets a killed call's thread finish once the test has dropped the agent.
#[derive(Clone)]
pub struct Release(Arc<Gate>);

impl Release {
    pub fn release(&self) {
        *self.0.released.lock().unwrap() = true;
        self.0.cv.notify_all();
    }
}

impl AuditedNvml {
    pub fn new(
        inner: SimNvml,
        assignments: SharedAssignments,
        kill: Option<KillAt>,
    ) -> (Arc<AuditedNvml>, tokio::sync::mpsc::UnboundedReceiver<()>, Release) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let gate = Arc::new(Gate::default());
        let nvml = AuditedNvml {
            inner,
            assignments,
            calls: AtomicU64::new(0),
            kill,
            killed: tx,
            gate: gate.clone(),
            uuids: Mutex::new(BTreeMap::new()),
            violations: Mutex::new(Vec::new()),
        };
        (Arc::new(nvml), rx, Release(gate))
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Runs one call, killing the agent around it if this is the chosen one. A killed call
    /// blocks its thread until released and then fails; its caller is gone by then.
    fn call<T>(&self, f: impl FnOnce(&SimNvml) -> Result<T, NvmlError>) -> Result<T, NvmlError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let strike = match self.kill {
            Some(KillAt::Before(k)) if k == n => Some(false),
            Some(KillAt::After(k)) if k == n => Some(true),
            _ => None,
        };
        let Some(after) = strike else { return f(&self.inner) };
        if after {
            let _ = f(&self.inner);
        }
        let _ = self.killed.send(());
        let mut released = self.gate.released.lock().unwrap();
        while !*released {
            released = self.gate.cv.wait(released).unwrap();
        }
        Err(NvmlError::Init { reason: Reason::Other("killed".into()) })
    }

    fn audit_destroy(&self, gpu: GpuIndex, gi: u32) {
        let Some(uuid) = self.uuids.lock().unwrap().get(&(gpu, gi)).cloned() else { return };
        if let Some(a) = self.assignments.get().iter().find(|a| a.device_id == uuid) {
            self.violations.lock().unwrap().push(format!(
                "GPU {gpu} GI {gi} ({uuid}) destroyed while pod {}/{} holds it",
                a.namespace, a.pod
            ));
        }
    }
}

impl NvmlBackend for AuditedNvml {
    fn driver_version(&self) -> Result<String, NvmlError> {
        self.call(|n| n.driver_version())
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>, NvmlError> {
        self.call(|n| n.devices())
    }
    fn gpu_instance_profiles(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceProfileInfo>, NvmlError> {
        self.call(|n| n.gpu_instance_profiles(gpu))
    }
    fn possible_placements(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
    ) -> Result<Vec<Placement>, NvmlError> {
        self.call(|n| n.possible_placements(gpu, profile_id))
    }
    fn gpu_instances(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceInfo>, NvmlError> {
        self.call(|n| n.gpu_instances(gpu))
    }
    fn create_gpu_instance(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
        placement: Placement,
    ) -> Result<GpuInstanceInfo, NvmlError> {
        self.call(|n| n.create_gpu_instance(gpu, profile_id, placement))
    }
    fn destroy_gpu_instance(&self, gpu: GpuIndex, gpu_instance: u32) -> Result<(), NvmlError> {
        self.audit_destroy(gpu, gpu_instance);
        self.call(|n| n.destroy_gpu_instance(gpu, gpu_instance))
    }
    fn compute_instances(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceInfo>, NvmlError> {
        self.call(|n| n.compute_instances(gpu, gpu_instance))
    }
    fn create_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<ComputeInstanceInfo, NvmlError> {
        self.call(|n| n.create_compute_instance(gpu, gpu_instance))
    }
    fn destroy_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), NvmlError> {
        self.audit_destroy(gpu, gpu_instance);
        self.call(|n| n.destroy_compute_instance(gpu, gpu_instance, compute_instance))
    }
    fn mig_devices(&self, gpu: GpuIndex) -> Result<Vec<MigDeviceInfo>, NvmlError> {
        let devices = self.call(|n| n.mig_devices(gpu))?;
        let mut uuids = self.uuids.lock().unwrap();
        uuids.retain(|(g, _), _| *g != gpu);
        for d in &devices {
            uuids.insert((gpu, d.gpu_instance_id), d.uuid.clone());
        }
        Ok(devices)
    }
    fn processes(&self, gpu: GpuIndex, mig_uuid: &str) -> Result<Vec<ProcessInfo>, NvmlError> {
        self.call(|n| n.processes(gpu, mig_uuid))
    }
    fn gpu_processes(&self, gpu: GpuIndex) -> Result<Vec<ProcessInfo>, NvmlError> {
        self.call(|n| n.gpu_processes(gpu))
    }
    fn utilization(&self, gpu: GpuIndex) -> Result<u32, NvmlError> {
        self.call(|n| n.utilization(gpu))
    }
    fn set_mig_mode(&self, gpu: GpuIndex, enabled: bool) -> Result<MigModeChange, NvmlError> {
        self.call(|n| n.set_mig_mode(gpu, enabled))
    }
}
