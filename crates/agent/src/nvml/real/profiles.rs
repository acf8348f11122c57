//! GPU-instance profile info: the versioned call where the driver has it, else the unversioned
//! one, read into one [`GpuInstanceProfileInfo`].

use std::mem;
use std::os::raw::c_uint;

use nvml_wrapper_sys::bindings::*;

use super::returns::{c_chars_to_string, check, profile_absent, sym};
use super::RealNvml;
use crate::nvml::{GpuIndex, GpuInstanceProfileInfo, NvmlCall, NvmlError, NvmlProfileId, NvmlProfileIndex};

/// The agent's profile info from either NVML struct (they share these field names).
macro_rules! profile_from {
    ($index:expr, $info:expr, $name:expr) => {
        GpuInstanceProfileInfo {
            profile_index: NvmlProfileIndex($index),
            id: NvmlProfileId($info.id),
            name: $name,
            slice_count: $info.sliceCount,
            instance_count: $info.instanceCount,
            memory_mib: $info.memorySizeMB,
            multiprocessor_count: $info.multiprocessorCount,
            copy_engine_count: $info.copyEngineCount,
            decoder_count: $info.decoderCount,
            encoder_count: $info.encoderCount,
            jpeg_count: $info.jpegCount,
            ofa_count: $info.ofaCount,
        }
    };
}

impl RealNvml {
    /// The profile at `index`, or `None` where the GPU (or its MIG mode) does not offer it.
    pub(super) fn profile_info(
        &self,
        gpu: GpuIndex,
        dev: nvmlDevice_t,
        index: u32,
    ) -> Result<Option<GpuInstanceProfileInfo>, NvmlError> {
        let lib = self.lib();
        let answer = |code| -> Result<bool, NvmlError> {
            if profile_absent(code) {
                return Ok(false);
            }
            check(code).map_err(|reason| NvmlError::ProfileIndex {
                gpu,
                call: NvmlCall::GpuInstanceProfiles,
                index: NvmlProfileIndex(index),
                reason,
            })?;
            Ok(true)
        };
        if let Ok(f) = lib.nvmlDeviceGetGpuInstanceProfileInfoV.as_ref() {
            // SAFETY: plain C struct; version field set as nvml.h's NVML_STRUCT_VERSION does.
            let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { mem::zeroed() };
            info.version = mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as c_uint | (2 << 24);
            let code = unsafe { f(dev, index, &mut info) };
            // Drivers that predate the v2 struct answer VERSION_MISMATCH, and some answer
            // INVALID_ARGUMENT for the version field itself: both fall through to the
            // unversioned call, whose answer then decides (an absent profile says so there).
            let unversioned = code == nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH
                || code == nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
            if !unversioned {
                if !answer(code)? {
                    return Ok(None);
                }
                let name = c_chars_to_string(&info.name);
                let name = (!name.is_empty()).then(|| crate::nvml::strip_mig_prefix(&name).to_string());
                return Ok(Some(profile_from!(index, info, name)));
            }
        }
        let f = sym(&lib.nvmlDeviceGetGpuInstanceProfileInfo, "nvmlDeviceGetGpuInstanceProfileInfo")?;
        let mut info: nvmlGpuInstanceProfileInfo_t = unsafe { mem::zeroed() };
        // SAFETY: valid device handle and out pointer.
        let code = unsafe { f(dev, index, &mut info) };
        Ok(answer(code)?.then_some(profile_from!(index, info, None)))
    }
}
