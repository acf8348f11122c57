//! NVML errors: each names the GPU and, where there is one, the profile, placement or instance.

use thiserror::Error;

use crate::nvml::{GpuIndex, NvmlCall, NvmlProfileId, NvmlProfileIndex, Placement};

/// Why NVML refused, mirroring the `nvmlReturn_t` codes the agent reacts to.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Reason {
    /// `NVML_ERROR_IN_USE`: processes or child instances hold it.
    #[error("in use")]
    InUse,
    /// `NVML_ERROR_INSUFFICIENT_RESOURCES`: the placement is taken or the profile's cap reached.
    #[error("insufficient resources (placement taken or instance limit reached)")]
    InsufficientResources,
    /// `NVML_ERROR_INVALID_ARGUMENT`: e.g. a start that is not a legal placement.
    #[error("invalid argument")]
    InvalidArgument,
    /// `NVML_ERROR_NOT_SUPPORTED`: e.g. a profile query while MIG mode is off.
    #[error("not supported")]
    NotSupported,
    /// `NVML_ERROR_NO_PERMISSION`: the agent lacks the privileges MIG management needs.
    #[error("no permission (MIG management needs root or CAP_SYS_ADMIN with /dev/nvidia-caps)")]
    NoPermission,
    /// `NVML_ERROR_NOT_FOUND`: no such instance.
    #[error("not found")]
    NotFound,
    /// `NVML_ERROR_GPU_IS_LOST`: the GPU fell off the bus.
    #[error("GPU is lost (fell off the bus)")]
    GpuLost,
    /// `NVML_ERROR_RESET_REQUIRED`: the GPU must be reset first.
    #[error("GPU reset required")]
    ResetRequired,
    /// A fault injected into the simulated backend.
    #[error("injected fault")]
    Injected,
    /// Any other NVML return code, with NVML's own description.
    #[error("{0}")]
    Other(String),
}

/// An NVML failure.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NvmlError {
    #[error("no NVIDIA driver ({library} not found): {detail}. Run on a node with the NVIDIA driver installed, or mount the driver libraries into the container")]
    DriverNotFound { library: String, detail: String },

    #[error("NVML could not start: {reason}")]
    Init { reason: Reason },

    #[error("the NVIDIA driver's NVML has no {symbol}; MIG placement needs driver R470 or newer")]
    MissingSymbol { symbol: &'static str },

    #[error("GPU {gpu} does not exist (NVML reports {count} GPUs)")]
    NoSuchGpu { gpu: GpuIndex, count: u32 },

    #[error("GPU {gpu}: {call} failed: {reason}")]
    Gpu { gpu: GpuIndex, call: NvmlCall, reason: Reason },

    #[error("GPU {gpu}: {call} for profile id {profile} failed: {reason}")]
    Profile { gpu: GpuIndex, call: NvmlCall, profile: NvmlProfileId, reason: Reason },

    #[error("GPU {gpu}: {call} for profile index {index} failed: {reason}")]
    ProfileIndex { gpu: GpuIndex, call: NvmlCall, index: NvmlProfileIndex, reason: Reason },

    #[error(
        "GPU {gpu}: cannot create GPU instance of profile id {profile} at placement {placement}: {reason}"
    )]
    CreateGpuInstance { gpu: GpuIndex, profile: NvmlProfileId, placement: Placement, reason: Reason },

    #[error("GPU {gpu}: cannot destroy GPU instance {gpu_instance}: {reason}")]
    DestroyGpuInstance { gpu: GpuIndex, gpu_instance: u32, reason: Reason },

    #[error("GPU {gpu}: cannot create a compute instance in GPU instance {gpu_instance}: {reason}")]
    CreateComputeInstance { gpu: GpuIndex, gpu_instance: u32, reason: Reason },

    #[error("GPU {gpu}: cannot destroy compute instance {compute_instance} of GPU instance {gpu_instance}: {reason}")]
    DestroyComputeInstance { gpu: GpuIndex, gpu_instance: u32, compute_instance: u32, reason: Reason },

    #[error("GPU {gpu}: GPU instance {gpu_instance} is of profile id {profile}, which is not among the profiles NVML lists for this GPU; the agent does not read it as unknown-so-free. Check the driver version and `nvidia-smi mig -lgip`")]
    UnknownGpuInstanceProfile { gpu: GpuIndex, gpu_instance: u32, profile: NvmlProfileId },

    #[error("GPU {gpu}: no MIG device {uuid}: {reason}")]
    MigDevice { gpu: GpuIndex, uuid: String, reason: Reason },

    #[error("GPU {gpu}: cannot turn MIG mode {}: {reason}", if *.enabled { "on" } else { "off" })]
    SetMigMode { gpu: GpuIndex, enabled: bool, reason: Reason },

    #[error("the agent's NVML session is released for a GPU reset and not open again yet")]
    Released,
}

impl NvmlError {
    /// The reason NVML gave, where the error carries one.
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            NvmlError::Init { reason }
            | NvmlError::Gpu { reason, .. }
            | NvmlError::Profile { reason, .. }
            | NvmlError::ProfileIndex { reason, .. }
            | NvmlError::CreateGpuInstance { reason, .. }
            | NvmlError::DestroyGpuInstance { reason, .. }
            | NvmlError::CreateComputeInstance { reason, .. }
            | NvmlError::DestroyComputeInstance { reason, .. }
            | NvmlError::MigDevice { reason, .. }
            | NvmlError::SetMigMode { reason, .. } => Some(reason),
            NvmlError::DriverNotFound { .. }
            | NvmlError::MissingSymbol { .. }
            | NvmlError::NoSuchGpu { .. }
            | NvmlError::UnknownGpuInstanceProfile { .. }
            | NvmlError::Released => None,
        }
    }

    /// Whether the failure is because something is in use (retry after it is freed, never
    /// force).
    pub fn is_in_use(&self) -> bool {
        self.reason() == Some(&Reason::InUse)
    }
}
