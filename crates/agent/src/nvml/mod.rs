//! NVML behind one trait, with a real backend (nvml-wrapper and its raw `NvmlLib`) and a
//! simulated one that enforces the catalog's placement rules.
//!
//! NVML is a blocking C library: every method blocks, and async callers use
//! `tokio::task::spawn_blocking` with an `Arc<dyn NvmlBackend>`.
//!
//! Two profile numbers appear in NVML and are kept apart here:
//! - the *profile index*, the value of an `NVML_GPU_INSTANCE_PROFILE_*` constant, which is what
//!   `nvmlDeviceGetGpuInstanceProfileInfo` takes (the catalog's `nvml_profile_index`);
//! - the *profile id*, the driver's id that the info call returns and that placements, creation
//!   and instance infos use (`nvidia-smi mig -lgip` shows it; the catalog's
//!   `nvidia_smi_profile_id`).

mod error;
#[allow(unsafe_code)] // the one home of `unsafe`: NVML calls nvml-wrapper does not wrap
pub mod real;
pub mod reset;
#[cfg(any(test, feature = "sim"))]
pub mod sim;

use serde::{Deserialize, Serialize};

pub use error::{NvmlError, Reason};

/// NVML device index of a physical GPU.
pub type GpuIndex = u32;

/// A GPU-instance profile's index, `NVML_GPU_INSTANCE_PROFILE_*` (0 = one slice, ...): what
/// `nvmlDeviceGetGpuInstanceProfileInfo` takes. Not the driver's profile id ([`NvmlProfileId`]);
/// the two differ on most profiles (`nvml.h`, NVIDIA/go-nvml `pkg/nvml/nvml.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct NvmlProfileIndex(pub u32);

/// The driver's id of a GPU-instance profile (`nvmlGpuInstanceProfileInfo_t.id`, what
/// `nvidia-smi mig -lgip` prints as ID): what placements and instance creation take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NvmlProfileId(pub u32);

impl std::fmt::Display for NvmlProfileIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for NvmlProfileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a GPU instance sits: placement units `[start, start + size)` (NVML's memory slices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub start: u32,
    pub size: u32,
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.start, self.size)
    }
}

/// MIG mode now and after the next reset of the GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigMode {
    pub current: bool,
    pub pending: bool,
}

/// What `nvmlDeviceSetMigMode` did. The call itself reports success whenever it accepted the
/// request; whether the new mode took effect is in its `activationStatus` out-parameter
/// (nvml.h: "activationStatus - status of the operation", e.g. NVML_ERROR_IN_USE when another
/// client holds the GPU, NVML_ERROR_RESET_REQUIRED where the driver cannot reset it, as in
/// pass-through VMs; NVIDIA/go-nvml `pkg/nvml/device.go` `SetMigMode` returns it as its first
/// value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigModeChange {
    /// The mode afterwards (`nvmlDeviceGetMigMode`).
    pub mode: MigMode,
    /// Why the change is not active yet; `None` when the activation status was success.
    pub activation: Option<Reason>,
}

/// A physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    pub index: GpuIndex,
    /// `GPU-...`
    pub uuid: String,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Device id in the high half, vendor (0x10DE) in the low half: `0x233010DE`.
    pub pci_device_id: u32,
    /// `None` when the GPU does not support MIG.
    pub mig_mode: Option<MigMode>,
    /// Total memory (`nvmlDeviceGetMemoryInfo`), in bytes: what the device plugin divides a
    /// profile's memory by to name it. `None` when NVML cannot tell.
    pub memory_total_bytes: Option<u64>,
}

/// What NVML says about one GPU-instance profile of a GPU (`nvmlGpuInstanceProfileInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuInstanceProfileInfo {
    /// `NVML_GPU_INSTANCE_PROFILE_*` value this info was asked for.
    pub profile_index: NvmlProfileIndex,
    /// Driver profile id (what placements and creation take).
    pub id: NvmlProfileId,
    /// Profile name from NVML without the `MIG ` prefix (e.g. `1g.10gb`); `None` on drivers
    /// without the versioned info call.
    pub name: Option<String>,
    /// GPU (compute) slices.
    pub slice_count: u32,
    /// Most instances of this profile on the GPU.
    pub instance_count: u32,
    pub memory_mib: u64,
    pub multiprocessor_count: u32,
    pub copy_engine_count: u32,
    pub decoder_count: u32,
    pub encoder_count: u32,
    pub jpeg_count: u32,
    pub ofa_count: u32,
}

/// A GPU instance that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuInstanceInfo {
    pub id: u32,
    /// Driver profile id.
    pub profile_id: NvmlProfileId,
    pub placement: Placement,
}

/// A compute instance that exists inside a GPU instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComputeInstanceInfo {
    pub id: u32,
    pub gpu_instance_id: u32,
    /// Driver compute-instance profile id.
    pub profile_id: u32,
    /// GPU (compute) slices of its compute-instance profile; fewer than its GPU instance's
    /// when the GPU instance is split into several compute instances.
    pub slice_count: u32,
}

/// A MIG device: one compute instance as CUDA and the device plugin see it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigDeviceInfo {
    /// Position in NVML's MIG device enumeration (`nvmlDeviceGetMigDeviceHandleByIndex`); the
    /// device plugin's `index` id strategy names devices `<gpu>:<this>`.
    pub index: u32,
    /// `MIG-...`
    pub uuid: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// A process running on a MIG device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    pub pid: u32,
    /// `None` where NVML cannot tell (e.g. without permission).
    pub used_memory_bytes: Option<u64>,
}

/// Every NVML call the trait makes, for error messages and fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum NvmlCall {
    DriverVersion,
    Devices,
    GpuInstanceProfiles,
    PossiblePlacements,
    GpuInstances,
    CreateGpuInstance,
    DestroyGpuInstance,
    ComputeInstances,
    CreateComputeInstance,
    DestroyComputeInstance,
    MigDevices,
    Processes,
    GpuProcesses,
    SetMigMode,
    Utilization,
}

impl NvmlCall {
    pub const ALL: [NvmlCall; 15] = [
        NvmlCall::DriverVersion,
        NvmlCall::Devices,
        NvmlCall::GpuInstanceProfiles,
        NvmlCall::PossiblePlacements,
        NvmlCall::GpuInstances,
        NvmlCall::CreateGpuInstance,
        NvmlCall::DestroyGpuInstance,
        NvmlCall::ComputeInstances,
        NvmlCall::CreateComputeInstance,
        NvmlCall::DestroyComputeInstance,
        NvmlCall::MigDevices,
        NvmlCall::Processes,
        NvmlCall::GpuProcesses,
        NvmlCall::SetMigMode,
        NvmlCall::Utilization,
    ];

    /// Whether the call changes the GPU (as opposed to reading it).
    pub fn mutates(self) -> bool {
        matches!(
            self,
            NvmlCall::CreateGpuInstance
                | NvmlCall::DestroyGpuInstance
                | NvmlCall::CreateComputeInstance
                | NvmlCall::DestroyComputeInstance
                | NvmlCall::SetMigMode
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NvmlCall::DriverVersion => "driver_version",
            NvmlCall::Devices => "devices",
            NvmlCall::GpuInstanceProfiles => "gpu_instance_profiles",
            NvmlCall::PossiblePlacements => "possible_placements",
            NvmlCall::GpuInstances => "gpu_instances",
            NvmlCall::CreateGpuInstance => "create_gpu_instance",
            NvmlCall::DestroyGpuInstance => "destroy_gpu_instance",
            NvmlCall::ComputeInstances => "compute_instances",
            NvmlCall::CreateComputeInstance => "create_compute_instance",
            NvmlCall::DestroyComputeInstance => "destroy_compute_instance",
            NvmlCall::MigDevices => "mig_devices",
            NvmlCall::Processes => "processes",
            NvmlCall::GpuProcesses => "gpu_processes",
            NvmlCall::SetMigMode => "set_mig_mode",
            NvmlCall::Utilization => "utilization",
        }
    }
}

impl std::fmt::Display for NvmlCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The NVML operations Geometer needs. Object-safe; every method blocks.
///
/// Instances are addressed by ids, never by handles, so that a caller can hold no NVML state
/// across calls (and a restarted agent finds everything again by listing).
pub trait NvmlBackend: Send + Sync {
    /// Driver version string, e.g. `570.124.06`.
    fn driver_version(&self) -> Result<String, NvmlError>;

    /// Every NVIDIA GPU, by index.
    fn devices(&self) -> Result<Vec<DeviceInfo>, NvmlError>;

    /// Every GPU-instance profile the GPU offers, by profile index. Empty when MIG mode is off
    /// (NVML answers profile queries only in MIG mode).
    fn gpu_instance_profiles(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceProfileInfo>, NvmlError>;

    /// Every placement NVML allows for a profile (by driver profile id) on an empty GPU.
    fn possible_placements(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
    ) -> Result<Vec<Placement>, NvmlError>;

    /// GPU instances that exist, of every profile.
    fn gpu_instances(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceInfo>, NvmlError>;

    /// Creates a GPU instance of a profile (driver id) at a placement.
    fn create_gpu_instance(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
        placement: Placement,
    ) -> Result<GpuInstanceInfo, NvmlError>;

    /// Destroys a GPU instance. NVML refuses while it has compute instances or processes.
    fn destroy_gpu_instance(&self, gpu: GpuIndex, gpu_instance: u32) -> Result<(), NvmlError>;

    /// Compute instances inside a GPU instance.
    fn compute_instances(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceInfo>, NvmlError>;

    /// Creates the compute instance that spans the whole GPU instance (what the device plugin's
    /// mixed strategy advertises as one `nvidia.com/mig-<profile>` device).
    fn create_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<ComputeInstanceInfo, NvmlError>;

    /// Destroys a compute instance. NVML refuses while processes run on it.
    fn destroy_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), NvmlError>;

    /// MIG devices (one per compute instance) with their UUIDs.
    fn mig_devices(&self, gpu: GpuIndex) -> Result<Vec<MigDeviceInfo>, NvmlError>;

    /// Compute processes running on one MIG device (by its `MIG-...` UUID).
    fn processes(&self, gpu: GpuIndex, mig_uuid: &str) -> Result<Vec<ProcessInfo>, NvmlError>;

    /// Turns MIG mode on or off: the mode afterwards and the activation status.
    ///
    /// Call it only on an idle GPU (no processes, no instances in use). On Ampere the change
    /// needs a GPU reset that only succeeds with every NVML client gone, so it stays pending
    /// (`pending` differs from `current`); Hopper and later change at once when idle (NVIDIA MIG
    /// user guide, "Enable MIG Mode").
    fn set_mig_mode(&self, gpu: GpuIndex, enabled: bool) -> Result<MigModeChange, NvmlError>;

    /// Compute processes on a whole GPU (`nvmlDeviceGetComputeRunningProcesses` on the physical
    /// device): what makes a GPU without MIG busy even when no pod holds it.
    fn gpu_processes(&self, gpu: GpuIndex) -> Result<Vec<ProcessInfo>, NvmlError>;

    /// Percent of the last sample period in which a kernel ran on the GPU
    /// (`nvmlDeviceGetUtilizationRates`, its `gpu` field): right-sizing's utilisation sample.
    fn utilization(&self, gpu: GpuIndex) -> Result<u32, NvmlError>;
}

impl<T: NvmlBackend + ?Sized> NvmlBackend for std::sync::Arc<T> {
    fn driver_version(&self) -> Result<String, NvmlError> {
        (**self).driver_version()
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>, NvmlError> {
        (**self).devices()
    }
    fn gpu_instance_profiles(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceProfileInfo>, NvmlError> {
        (**self).gpu_instance_profiles(gpu)
    }
    fn possible_placements(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
    ) -> Result<Vec<Placement>, NvmlError> {
        (**self).possible_placements(gpu, profile_id)
    }
    fn gpu_instances(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceInfo>, NvmlError> {
        (**self).gpu_instances(gpu)
    }
    fn create_gpu_instance(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
        placement: Placement,
    ) -> Result<GpuInstanceInfo, NvmlError> {
        (**self).create_gpu_instance(gpu, profile_id, placement)
    }
    fn destroy_gpu_instance(&self, gpu: GpuIndex, gpu_instance: u32) -> Result<(), NvmlError> {
        (**self).destroy_gpu_instance(gpu, gpu_instance)
    }
    fn compute_instances(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceInfo>, NvmlError> {
        (**self).compute_instances(gpu, gpu_instance)
    }
    fn create_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<ComputeInstanceInfo, NvmlError> {
        (**self).create_compute_instance(gpu, gpu_instance)
    }
    fn destroy_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), NvmlError> {
        (**self).destroy_compute_instance(gpu, gpu_instance, compute_instance)
    }
    fn mig_devices(&self, gpu: GpuIndex) -> Result<Vec<MigDeviceInfo>, NvmlError> {
        (**self).mig_devices(gpu)
    }
    fn processes(&self, gpu: GpuIndex, mig_uuid: &str) -> Result<Vec<ProcessInfo>, NvmlError> {
        (**self).processes(gpu, mig_uuid)
    }
    fn set_mig_mode(&self, gpu: GpuIndex, enabled: bool) -> Result<MigModeChange, NvmlError> {
        (**self).set_mig_mode(gpu, enabled)
    }
    fn gpu_processes(&self, gpu: GpuIndex) -> Result<Vec<ProcessInfo>, NvmlError> {
        (**self).gpu_processes(gpu)
    }
    fn utilization(&self, gpu: GpuIndex) -> Result<u32, NvmlError> {
        (**self).utilization(gpu)
    }
}

/// `MIG 1g.10gb` -> `1g.10gb`: NVML's profile names carry a prefix the catalog does not use.
pub fn strip_mig_prefix(name: &str) -> &str {
    name.trim().strip_prefix("MIG ").unwrap_or(name.trim())
}

/// `0x233010DE`: how PCI device ids are written in the catalog and the MigNode status.
pub fn format_pci_device_id(id: u32) -> String {
    format!("0x{id:08X}")
}
