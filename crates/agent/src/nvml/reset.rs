//! Resetting one GPU so that a pending MIG mode change takes effect (Ampere: A100, A30), for
//! agents started with `--allow-gpu-reset` under a policy that allows it.
//!
//! A GPU reset only succeeds with every NVML client of that GPU gone, the resetting process's
//! own NVML session included: NVIDIA's mig-parted shuts NVML down before it runs `nvidia-smi -r`
//! (NVIDIA/mig-parted `cmd/nvidia-mig-parted/apply/mode.go`, and `util/device.go` for the reset
//! itself, which resets every GPU of the node). The agent resets only the GPU whose mode
//! changes, by UUID, after releasing its own session, and opens a new one afterwards.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use crate::nvml::real::RealNvml;
use crate::nvml::{
    ComputeInstanceInfo, DeviceInfo, GpuIndex, GpuInstanceInfo, GpuInstanceProfileInfo, MigDeviceInfo,
    MigModeChange, NvmlBackend, NvmlError, NvmlProfileId, Placement, ProcessInfo,
};

/// Resets a GPU and opens NVML again afterwards.
pub trait GpuReset: Send + Sync {
    /// Resets the GPU with this `GPU-...` UUID; `Err` says why it did not happen. The caller
    /// has released its NVML session.
    fn reset(&self, gpu_uuid: &str) -> Result<(), String>;

    /// A new NVML session, after a reset.
    fn reopen(&self) -> Result<Arc<dyn NvmlBackend>, NvmlError>;
}

/// `nvidia-smi -r -i <uuid>`, and the real NVML library opened again.
pub struct NvidiaSmiReset {
    /// The `nvidia-smi` binary (the NVIDIA container runtime mounts it with the `utility`
    /// capability).
    pub nvidia_smi: PathBuf,
    /// The NVML library to open again.
    pub library: String,
}

impl GpuReset for NvidiaSmiReset {
    fn reset(&self, gpu_uuid: &str) -> Result<(), String> {
        let out = Command::new(&self.nvidia_smi)
            .args(["-r", "-i", gpu_uuid])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.nvidia_smi.display()))?;
        if out.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(if out.stdout.is_empty() { &out.stderr } else { &out.stdout });
        Err(format!(
            "`nvidia-smi -r -i {gpu_uuid}` failed ({}): {}",
            out.status,
            geometer_api::limits::cut(said.trim(), 400)
        ))
    }

    fn reopen(&self) -> Result<Arc<dyn NvmlBackend>, NvmlError> {
        Ok(Arc::new(RealNvml::init_with_library(&self.library)?))
    }
}

/// The backend while the agent's session is released for a reset: every call fails.
pub(crate) struct Released;

fn released<T>() -> Result<T, NvmlError> {
    Err(NvmlError::Released)
}

impl NvmlBackend for Released {
    fn driver_version(&self) -> Result<String, NvmlError> {
        released()
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>, NvmlError> {
        released()
    }
    fn gpu_instance_profiles(&self, _: GpuIndex) -> Result<Vec<GpuInstanceProfileInfo>, NvmlError> {
        released()
    }
    fn possible_placements(&self, _: GpuIndex, _: NvmlProfileId) -> Result<Vec<Placement>, NvmlError> {
        released()
    }
    fn gpu_instances(&self, _: GpuIndex) -> Result<Vec<GpuInstanceInfo>, NvmlError> {
        released()
    }
    fn create_gpu_instance(
        &self,
        _: GpuIndex,
        _: NvmlProfileId,
        _: Placement,
    ) -> Result<GpuInstanceInfo, NvmlError> {
        released()
    }
    fn destroy_gpu_instance(&self, _: GpuIndex, _: u32) -> Result<(), NvmlError> {
        released()
    }
    fn compute_instances(&self, _: GpuIndex, _: u32) -> Result<Vec<ComputeInstanceInfo>, NvmlError> {
        released()
    }
    fn create_compute_instance(&self, _: GpuIndex, _: u32) -> Result<ComputeInstanceInfo, NvmlError> {
        released()
    }
    fn destroy_compute_instance(&self, _: GpuIndex, _: u32, _: u32) -> Result<(), NvmlError> {
        released()
    }
    fn mig_devices(&self, _: GpuIndex) -> Result<Vec<MigDeviceInfo>, NvmlError> {
        released()
    }
    fn processes(&self, _: GpuIndex, _: &str) -> Result<Vec<ProcessInfo>, NvmlError> {
        released()
    }
    fn set_mig_mode(&self, _: GpuIndex, _: bool) -> Result<MigModeChange, NvmlError> {
        released()
    }
    fn gpu_processes(&self, _: GpuIndex) -> Result<Vec<ProcessInfo>, NvmlError> {
        released()
    }
    fn utilization(&self, _: GpuIndex) -> Result<u32, NvmlError> {
        released()
    }
}
