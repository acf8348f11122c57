//! NVML calls that take time, as on real GPUs (creating or destroying an instance takes a
//! noticeable fraction of a second), so that a demo shows each step as it happens. Reads stay
//! instant.

use std::sync::Arc;
use std::time::Duration;

use geometer_agent::nvml::{
    ComputeInstanceInfo, DeviceInfo, GpuIndex, GpuInstanceInfo, GpuInstanceProfileInfo, MigDeviceInfo,
    MigModeChange, NvmlBackend, NvmlError, NvmlProfileId, Placement, ProcessInfo,
};

/// Wraps a backend; every call that changes a GPU blocks for `per_change` first (NVML is
/// blocking; callers run it on blocking threads).
pub struct SlowNvml {
    inner: Arc<dyn NvmlBackend>,
    per_change: Duration,
}

impl SlowNvml {
    pub fn new(inner: Arc<dyn NvmlBackend>, per_change: Duration) -> SlowNvml {
        SlowNvml { inner, per_change }
    }

    fn pause(&self) {
        if !self.per_change.is_zero() {
            std::thread::sleep(self.per_change);
        }
    }
}

impl NvmlBackend for SlowNvml {
    fn driver_version(&self) -> Result<String, NvmlError> {
        self.inner.driver_version()
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>, NvmlError> {
        self.inner.devices()
    }
    fn gpu_instance_profiles(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceProfileInfo>, NvmlError> {
        self.inner.gpu_instance_profiles(gpu)
    }
    fn possible_placements(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
    ) -> Result<Vec<Placement>, NvmlError> {
        self.inner.possible_placements(gpu, profile_id)
    }
    fn gpu_instances(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceInfo>, NvmlError> {
        self.inner.gpu_instances(gpu)
    }
    fn create_gpu_instance(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
        placement: Placement,
    ) -> Result<GpuInstanceInfo, NvmlError> {
        self.pause();
        self.inner.create_gpu_instance(gpu, profile_id, placement)
    }
    fn destroy_gpu_instance(&self, gpu: GpuIndex, gpu_instance: u32) -> Result<(), NvmlError> {
        self.pause();
        self.inner.destroy_gpu_instance(gpu, gpu_instance)
    }
    fn compute_instances(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceInfo>, NvmlError> {
        self.inner.compute_instances(gpu, gpu_instance)
    }
    fn create_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<ComputeInstanceInfo, NvmlError> {
        self.pause();
        self.inner.create_compute_instance(gpu, gpu_instance)
    }
    fn destroy_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), NvmlError> {
        self.pause();
        self.inner.destroy_compute_instance(gpu, gpu_instance, compute_instance)
    }
    fn mig_devices(&self, gpu: GpuIndex) -> Result<Vec<MigDeviceInfo>, NvmlError> {
        self.inner.mig_devices(gpu)
    }
    fn processes(&self, gpu: GpuIndex, mig_uuid: &str) -> Result<Vec<ProcessInfo>, NvmlError> {
        self.inner.processes(gpu, mig_uuid)
    }
    fn gpu_processes(&self, gpu: GpuIndex) -> Result<Vec<ProcessInfo>, NvmlError> {
        self.inner.gpu_processes(gpu)
    }
    fn utilization(&self, gpu: GpuIndex) -> Result<u32, NvmlError> {
        self.inner.utilization(gpu)
    }
    fn set_mig_mode(&self, gpu: GpuIndex, enabled: bool) -> Result<MigModeChange, NvmlError> {
        self.pause();
        self.inner.set_mig_mode(gpu, enabled)
    }
}
