//! The real backend: nvml-wrapper for queries and MIG mode; its raw `NvmlLib` for the GPU- and
//! compute-instance calls it does not wrap (or wraps wrongly: its `possible_placements` returns an
//! empty list, so the raw `nvmlDeviceGetGpuInstancePossiblePlacements_v2` is called instead).
//!
//! Every raw symbol is looked up before use and a missing one is an error naming it; nothing
//! here panics when the driver is old or absent.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::mem;
use std::os::raw::{c_char, c_uint};
use std::ptr;
use std::sync::Mutex;

use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::*;

mod profiles;
mod returns;

use self::returns::{
    c_chars_to_string, check, gpu_instance_error, profile_absent, profile_error, reason_from_wrapper, sym,
};
use crate::nvml::{
    ComputeInstanceInfo, DeviceInfo, GpuIndex, GpuInstanceInfo, GpuInstanceProfileInfo, MigDeviceInfo,
    MigMode, MigModeChange, NvmlBackend, NvmlCall, NvmlError, NvmlProfileId, Placement, ProcessInfo, Reason,
};

/// The library the driver installs (the unversioned `libnvidia-ml.so` only comes with
/// development packages, so nvml-wrapper's default name is not used).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// Profile indexes probed for GPU-instance profile info. nvml.h defines 0..=16 today; newer
/// drivers add more, and an index a driver does not know is answered "not supported".
const MAX_GPU_INSTANCE_PROFILE_INDEX: u32 = 32;
/// Compute-instance profile indexes (`NVML_COMPUTE_INSTANCE_PROFILE_*`), same reasoning.
const MAX_COMPUTE_INSTANCE_PROFILE_INDEX: u32 = 16;

/// NVML through the NVIDIA driver.
pub struct RealNvml {
    nvml: Nvml,
    /// MIG device index of each MIG UUID, by GPU, from the last walk of its MIG devices: a
    /// process query looks its device up by index (checking the UUID) instead of walking every
    /// slot again, so an inventory walks each GPU's MIG devices once.
    mig_index: Mutex<HashMap<(GpuIndex, String), u32>>,
    /// Its library's `nvmlErrorString` among those [`returns`] keeps.
    error_strings: Option<u64>,
}

impl RealNvml {
    /// Loads `libnvidia-ml.so.1` and initialises NVML.
    pub fn init() -> Result<RealNvml, NvmlError> {
        RealNvml::init_with_library(NVML_LIBRARY)
    }

    /// Loads NVML from a given library path or name.
    pub fn init_with_library(library: &str) -> Result<RealNvml, NvmlError> {
        let result = Nvml::builder().lib_path(OsStr::new(library)).init();
        match result {
            Ok(nvml) => {
                let error_strings =
                    nvml.lib().nvmlErrorString.as_ref().ok().map(|f| returns::remember_error_string(*f));
                Ok(RealNvml { nvml, mig_index: Mutex::new(HashMap::new()), error_strings })
            }
            Err(WrapperError::LibloadingError(e)) => {
                Err(NvmlError::DriverNotFound { library: library.to_string(), detail: e.to_string() })
            }
            Err(WrapperError::DriverNotLoaded) => Err(NvmlError::DriverNotFound {
                library: library.to_string(),
                detail: "the library loaded but the NVIDIA kernel driver is not running".to_string(),
            }),
            Err(e) => Err(NvmlError::Init { reason: reason_from_wrapper(e) }),
        }
    }

    fn device(&self, gpu: GpuIndex) -> Result<Device<'_>, NvmlError> {
        self.nvml.device_by_index(gpu).map_err(|e| match e {
            WrapperError::InvalidArg => {
                NvmlError::NoSuchGpu { gpu, count: self.nvml.device_count().unwrap_or(0) }
            }
            e => NvmlError::Gpu { gpu, call: NvmlCall::Devices, reason: reason_from_wrapper(e) },
        })
    }

    fn handle(&self, gpu: GpuIndex) -> Result<nvmlDevice_t, NvmlError> {
        // SAFETY: the handle stays valid while `self.nvml` is initialised, which outlives every
        // use here (NVML device handles are not freed before nvmlShutdown).
        Ok(unsafe { self.device(gpu)?.handle() })
    }

    fn lib(&self) -> &NvmlLib {
        self.nvml.lib()
    }

    fn gpu_instance_handle(
        &self,
        gpu: GpuIndex,
        id: u32,
        call: NvmlCall,
    ) -> Result<nvmlGpuInstance_t, NvmlError> {
        let dev = self.handle(gpu)?;
        let f = sym(&self.lib().nvmlDeviceGetGpuInstanceById, "nvmlDeviceGetGpuInstanceById")?;
        let mut gi: nvmlGpuInstance_t = ptr::null_mut();
        // SAFETY: valid device handle and out pointer.
        let code = unsafe { f(dev, id, &mut gi) };
        check(code).map_err(|reason| gpu_instance_error(gpu, id, call, reason))?;
        Ok(gi)
    }

    fn gpu_instance_info(
        &self,
        gpu: GpuIndex,
        gi: nvmlGpuInstance_t,
        call: NvmlCall,
    ) -> Result<GpuInstanceInfo, NvmlError> {
        let f = sym(&self.lib().nvmlGpuInstanceGetInfo, "nvmlGpuInstanceGetInfo")?;
        // SAFETY: plain C struct, all-zero is a valid value.
        let mut info: nvmlGpuInstanceInfo_t = unsafe { mem::zeroed() };
        let code = unsafe { f(gi, &mut info) };
        check(code).map_err(|reason| NvmlError::Gpu { gpu, call, reason })?;
        Ok(GpuInstanceInfo {
            id: info.id,
            profile_id: NvmlProfileId(info.profileId),
            placement: Placement { start: info.placement.start, size: info.placement.size },
        })
    }

    /// The compute-instance profile that spans a GPU instance of `slices` slices: the largest
    /// one whose slice count fits (NVML offers exactly one equal to the GPU instance's).
    fn full_compute_profile(
        &self,
        gpu: GpuIndex,
        gi: nvmlGpuInstance_t,
        gi_id: u32,
    ) -> Result<(u32, u32), NvmlError> {
        let f = sym(
            &self.lib().nvmlGpuInstanceGetComputeInstanceProfileInfo,
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        )?;
        let mut best: Option<(u32, u32)> = None;
        for index in 0..MAX_COMPUTE_INSTANCE_PROFILE_INDEX {
            let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { mem::zeroed() };
            // SAFETY: valid GPU instance handle and out pointer.
            let code = unsafe { f(gi, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut info) };
            if profile_absent(code) {
                continue;
            }
            check(code).map_err(|reason| NvmlError::CreateComputeInstance {
                gpu,
                gpu_instance: gi_id,
                reason,
            })?;
            if best.is_none_or(|(slices, _)| info.sliceCount > slices) {
                best = Some((info.sliceCount, info.id));
            }
        }
        best.map(|(slices, id)| (id, slices)).ok_or(NvmlError::CreateComputeInstance {
            gpu,
            gpu_instance: gi_id,
            reason: Reason::Other(
                "NVML offers no compute-instance profile for this GPU instance".to_string(),
            ),
        })
    }

    fn mig_handles(&self, gpu: GpuIndex) -> Result<Vec<(u32, nvmlDevice_t)>, NvmlError> {
        let dev = self.handle(gpu)?;
        let lib = self.lib();
        let count_fn = sym(&lib.nvmlDeviceGetMaxMigDeviceCount, "nvmlDeviceGetMaxMigDeviceCount")?;
        let by_index = sym(&lib.nvmlDeviceGetMigDeviceHandleByIndex, "nvmlDeviceGetMigDeviceHandleByIndex")?;
        let mut max: c_uint = 0;
        // SAFETY: valid device handle and out pointer.
        let code = unsafe { count_fn(dev, &mut max) };
        check(code).map_err(|reason| NvmlError::Gpu { gpu, call: NvmlCall::MigDevices, reason })?;
        let mut handles = Vec::new();
        for index in 0..max {
            let mut mig: nvmlDevice_t = ptr::null_mut();
            let code = unsafe { by_index(dev, index, &mut mig) };
            // Slots without a MIG device answer NOT_FOUND, and on some drivers INVALID_ARGUMENT;
            // enumeration continues past them (NVIDIA/go-nvlib `pkg/nvlib/device/device.go`,
            // `VisitMigDevices`, skips both).
            if code == nvmlReturn_enum_NVML_ERROR_NOT_FOUND
                || code == nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
            {
                continue;
            }
            check(code).map_err(|reason| NvmlError::Gpu { gpu, call: NvmlCall::MigDevices, reason })?;
            handles.push((index, mig));
        }
        Ok(handles)
    }

    /// The handle of a MIG device by the index the last walk found it at, if that slot still
    /// holds the same device.
    fn known_mig_handle(&self, gpu: GpuIndex, uuid: &str) -> Option<nvmlDevice_t> {
        let index =
            *self.mig_index.lock().unwrap_or_else(|p| p.into_inner()).get(&(gpu, uuid.to_string()))?;
        let dev = self.handle(gpu).ok()?;
        let by_index =
            sym(&self.lib().nvmlDeviceGetMigDeviceHandleByIndex, "nvmlDeviceGetMigDeviceHandleByIndex")
                .ok()?;
        let mut mig: nvmlDevice_t = ptr::null_mut();
        // SAFETY: valid device handle and out pointer.
        check(unsafe { by_index(dev, index, &mut mig) }).ok()?;
        (self.mig_uuid(gpu, mig).ok()? == uuid).then_some(mig)
    }

    fn mig_uuid(&self, gpu: GpuIndex, mig: nvmlDevice_t) -> Result<String, NvmlError> {
        let f = sym(&self.lib().nvmlDeviceGetUUID, "nvmlDeviceGetUUID")?;
        let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE as usize];
        // SAFETY: buffer of the documented size.
        let code = unsafe { f(mig, buf.as_mut_ptr(), buf.len() as c_uint) };
        check(code).map_err(|reason| NvmlError::Gpu { gpu, call: NvmlCall::MigDevices, reason })?;
        Ok(c_chars_to_string(&buf))
    }
}

impl NvmlBackend for RealNvml {
    fn driver_version(&self) -> Result<String, NvmlError> {
        self.nvml.sys_driver_version().map_err(|e| NvmlError::Init { reason: reason_from_wrapper(e) })
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, NvmlError> {
        let count = self.nvml.device_count().map_err(|e| NvmlError::Gpu {
            gpu: 0,
            call: NvmlCall::Devices,
            reason: reason_from_wrapper(e),
        })?;
        let mut devices = Vec::with_capacity(count as usize);
        for index in 0..count {
            let device = self.device(index)?;
            let err = |e: WrapperError| NvmlError::Gpu {
                gpu: index,
                call: NvmlCall::Devices,
                reason: reason_from_wrapper(e),
            };
            let mig_mode = match device.mig_mode() {
                Ok(mode) => Some(MigMode {
                    current: mode.current == NVML_DEVICE_MIG_ENABLE,
                    pending: mode.pending == NVML_DEVICE_MIG_ENABLE,
                }),
                Err(WrapperError::NotSupported) => None,
                Err(e) => return Err(err(e)),
            };
            devices.push(DeviceInfo {
                index,
                uuid: device.uuid().map_err(err)?,
                name: device.name().map_err(err)?,
                pci_device_id: device.pci_info().map_err(err)?.pci_device_id,
                mig_mode,
                memory_total_bytes: device.memory_info().ok().map(|m| m.total),
            });
        }
        Ok(devices)
    }

    fn gpu_instance_profiles(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceProfileInfo>, NvmlError> {
        let dev = self.handle(gpu)?;
        let mut profiles = Vec::new();
        for index in 0..MAX_GPU_INSTANCE_PROFILE_INDEX {
            if let Some(info) = self.profile_info(gpu, dev, index)? {
                profiles.push(info);
            }
        }
        Ok(profiles)
    }

    fn possible_placements(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
    ) -> Result<Vec<Placement>, NvmlError> {
        let dev = self.handle(gpu)?;
        let f = sym(
            &self.lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2,
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
        )?;
        let err = |reason| profile_error(gpu, NvmlCall::PossiblePlacements, profile_id, reason);
        let mut count: c_uint = 0;
        // SAFETY: a null buffer asks NVML for the count only (documented in nvml.h).
        let code = unsafe { f(dev, profile_id.0, ptr::null_mut(), &mut count) };
        check(code).map_err(err)?;
        let mut raw: Vec<nvmlGpuInstancePlacement_t> = vec![unsafe { mem::zeroed() }; count as usize];
        if count > 0 {
            // SAFETY: buffer holds `count` placements.
            let code = unsafe { f(dev, profile_id.0, raw.as_mut_ptr(), &mut count) };
            check(code).map_err(err)?;
            raw.truncate(count as usize);
        }
        Ok(raw.iter().map(|p| Placement { start: p.start, size: p.size }).collect())
    }

    fn gpu_instances(&self, gpu: GpuIndex) -> Result<Vec<GpuInstanceInfo>, NvmlError> {
        let dev = self.handle(gpu)?;
        let f = sym(&self.lib().nvmlDeviceGetGpuInstances, "nvmlDeviceGetGpuInstances")?;
        let mut instances = Vec::new();
        for profile in self.gpu_instance_profiles(gpu)? {
            let mut handles: Vec<nvmlGpuInstance_t> =
                vec![ptr::null_mut(); profile.instance_count.max(1) as usize];
            let mut count: c_uint = 0;
            // SAFETY: the buffer holds the profile's instance count, as nvml.h requires.
            let code = unsafe { f(dev, profile.id.0, handles.as_mut_ptr(), &mut count) };
            check(code).map_err(|reason| profile_error(gpu, NvmlCall::GpuInstances, profile.id, reason))?;
            for &gi in handles.iter().take(count as usize) {
                instances.push(self.gpu_instance_info(gpu, gi, NvmlCall::GpuInstances)?);
            }
        }
        instances.sort_by_key(|gi| (gi.placement.start, gi.id));
        Ok(instances)
    }

    fn create_gpu_instance(
        &self,
        gpu: GpuIndex,
        profile_id: NvmlProfileId,
        placement: Placement,
    ) -> Result<GpuInstanceInfo, NvmlError> {
        let dev = self.handle(gpu)?;
        let f = sym(
            &self.lib().nvmlDeviceCreateGpuInstanceWithPlacement,
            "nvmlDeviceCreateGpuInstanceWithPlacement",
        )?;
        let raw = nvmlGpuInstancePlacement_t { start: placement.start, size: placement.size };
        let mut gi: nvmlGpuInstance_t = ptr::null_mut();
        // SAFETY: valid device handle, placement and out pointer.
        let code = unsafe { f(dev, profile_id.0, &raw, &mut gi) };
        check(code).map_err(|reason| NvmlError::CreateGpuInstance {
            gpu,
            profile: profile_id,
            placement,
            reason,
        })?;
        self.gpu_instance_info(gpu, gi, NvmlCall::CreateGpuInstance)
    }

    fn destroy_gpu_instance(&self, gpu: GpuIndex, gpu_instance: u32) -> Result<(), NvmlError> {
        let gi = self.gpu_instance_handle(gpu, gpu_instance, NvmlCall::DestroyGpuInstance)?;
        let f = sym(&self.lib().nvmlGpuInstanceDestroy, "nvmlGpuInstanceDestroy")?;
        // SAFETY: valid GPU instance handle.
        let code = unsafe { f(gi) };
        check(code).map_err(|reason| NvmlError::DestroyGpuInstance { gpu, gpu_instance, reason })
    }

    fn compute_instances(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<Vec<ComputeInstanceInfo>, NvmlError> {
        let gi = self.gpu_instance_handle(gpu, gpu_instance, NvmlCall::ComputeInstances)?;
        let lib = self.lib();
        let profile_fn = sym(
            &lib.nvmlGpuInstanceGetComputeInstanceProfileInfo,
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        )?;
        let list_fn = sym(&lib.nvmlGpuInstanceGetComputeInstances, "nvmlGpuInstanceGetComputeInstances")?;
        let info_fn = sym(&lib.nvmlComputeInstanceGetInfo_v2, "nvmlComputeInstanceGetInfo_v2")?;
        let err = |reason| NvmlError::Gpu { gpu, call: NvmlCall::ComputeInstances, reason };
        let mut out = Vec::new();
        for index in 0..MAX_COMPUTE_INSTANCE_PROFILE_INDEX {
            let mut profile: nvmlComputeInstanceProfileInfo_t = unsafe { mem::zeroed() };
            // SAFETY: valid GPU instance handle and out pointer.
            let code =
                unsafe { profile_fn(gi, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut profile) };
            if profile_absent(code) {
                continue;
            }
            check(code).map_err(err)?;
            let mut handles: Vec<nvmlComputeInstance_t> =
                vec![ptr::null_mut(); profile.instanceCount.max(1) as usize];
            let mut count: c_uint = 0;
            let code = unsafe { list_fn(gi, profile.id, handles.as_mut_ptr(), &mut count) };
            check(code).map_err(err)?;
            for &ci in handles.iter().take(count as usize) {
                let mut info: nvmlComputeInstanceInfo_t = unsafe { mem::zeroed() };
                let code = unsafe { info_fn(ci, &mut info) };
                check(code).map_err(err)?;
                out.push(ComputeInstanceInfo {
                    id: info.id,
                    gpu_instance_id: gpu_instance,
                    profile_id: info.profileId,
                    slice_count: profile.sliceCount,
                });
            }
        }
        out.sort_by_key(|ci| ci.id);
        Ok(out)
    }

    fn create_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
    ) -> Result<ComputeInstanceInfo, NvmlError> {
        let gi = self.gpu_instance_handle(gpu, gpu_instance, NvmlCall::CreateComputeInstance)?;
        let (profile, slice_count) = self.full_compute_profile(gpu, gi, gpu_instance)?;
        let lib = self.lib();
        let create = sym(&lib.nvmlGpuInstanceCreateComputeInstance, "nvmlGpuInstanceCreateComputeInstance")?;
        let info_fn = sym(&lib.nvmlComputeInstanceGetInfo_v2, "nvmlComputeInstanceGetInfo_v2")?;
        let err = |reason| NvmlError::CreateComputeInstance { gpu, gpu_instance, reason };
        let mut ci: nvmlComputeInstance_t = ptr::null_mut();
        // SAFETY: valid GPU instance handle and out pointer.
        check(unsafe { create(gi, profile, &mut ci) }).map_err(err)?;
        let mut info: nvmlComputeInstanceInfo_t = unsafe { mem::zeroed() };
        check(unsafe { info_fn(ci, &mut info) }).map_err(err)?;
        Ok(ComputeInstanceInfo {
            id: info.id,
            gpu_instance_id: gpu_instance,
            profile_id: info.profileId,
            slice_count,
        })
    }

    fn destroy_compute_instance(
        &self,
        gpu: GpuIndex,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), NvmlError> {
        let gi = self.gpu_instance_handle(gpu, gpu_instance, NvmlCall::DestroyComputeInstance)?;
        let lib = self.lib();
        let by_id = sym(&lib.nvmlGpuInstanceGetComputeInstanceById, "nvmlGpuInstanceGetComputeInstanceById")?;
        let destroy = sym(&lib.nvmlComputeInstanceDestroy, "nvmlComputeInstanceDestroy")?;
        let err = |reason| NvmlError::DestroyComputeInstance { gpu, gpu_instance, compute_instance, reason };
        let mut ci: nvmlComputeInstance_t = ptr::null_mut();
        // SAFETY: valid GPU instance handle and out pointer, then the handle NVML returned.
        check(unsafe { by_id(gi, compute_instance, &mut ci) }).map_err(err)?;
        check(unsafe { destroy(ci) }).map_err(err)
    }

    fn mig_devices(&self, gpu: GpuIndex) -> Result<Vec<MigDeviceInfo>, NvmlError> {
        let lib = self.lib();
        let gi_fn = sym(&lib.nvmlDeviceGetGpuInstanceId, "nvmlDeviceGetGpuInstanceId")?;
        let ci_fn = sym(&lib.nvmlDeviceGetComputeInstanceId, "nvmlDeviceGetComputeInstanceId")?;
        let err = |reason| NvmlError::Gpu { gpu, call: NvmlCall::MigDevices, reason };
        let mut out = Vec::new();
        for (index, mig) in self.mig_handles(gpu)? {
            let (mut gi, mut ci): (c_uint, c_uint) = (0, 0);
            // SAFETY: MIG device handle from NVML and out pointers.
            check(unsafe { gi_fn(mig, &mut gi) }).map_err(err)?;
            check(unsafe { ci_fn(mig, &mut ci) }).map_err(err)?;
            out.push(MigDeviceInfo {
                index,
                uuid: self.mig_uuid(gpu, mig)?,
                gpu_instance_id: gi,
                compute_instance_id: ci,
            });
        }
        let mut known = self.mig_index.lock().unwrap_or_else(|p| p.into_inner());
        known.retain(|(g, _), _| *g != gpu);
        known.extend(out.iter().map(|d| ((gpu, d.uuid.clone()), d.index)));
        Ok(out)
    }

    fn processes(&self, gpu: GpuIndex, mig_uuid: &str) -> Result<Vec<ProcessInfo>, NvmlError> {
        let mut target = self.known_mig_handle(gpu, mig_uuid);
        if target.is_none() {
            for (_, mig) in self.mig_handles(gpu)? {
                if self.mig_uuid(gpu, mig)? == mig_uuid {
                    target = Some(mig);
                    break;
                }
            }
        }
        let Some(mig) = target else {
            return Err(NvmlError::MigDevice { gpu, uuid: mig_uuid.to_string(), reason: Reason::NotFound });
        };
        self.running_processes(mig, |reason| NvmlError::MigDevice { gpu, uuid: mig_uuid.to_string(), reason })
    }

    fn gpu_processes(&self, gpu: GpuIndex) -> Result<Vec<ProcessInfo>, NvmlError> {
        let dev = self.handle(gpu)?;
        self.running_processes(dev, |reason| NvmlError::Gpu { gpu, call: NvmlCall::GpuProcesses, reason })
    }

    fn utilization(&self, gpu: GpuIndex) -> Result<u32, NvmlError> {
        let err = |e: WrapperError| NvmlError::Gpu {
            gpu,
            call: NvmlCall::Utilization,
            reason: reason_from_wrapper(e),
        };
        Ok(self.device(gpu)?.utilization_rates().map_err(err)?.gpu)
    }

    fn set_mig_mode(&self, gpu: GpuIndex, enabled: bool) -> Result<MigModeChange, NvmlError> {
        let device = self.device(gpu)?;
        let err = |e: WrapperError| NvmlError::SetMigMode { gpu, enabled, reason: reason_from_wrapper(e) };
        // nvml-wrapper returns the activation status as a raw nvmlReturn_t.
        let activation = device.set_mig_mode(enabled).map_err(err)?;
        let mode = device.mig_mode().map_err(err)?;
        Ok(MigModeChange {
            mode: MigMode {
                current: mode.current == NVML_DEVICE_MIG_ENABLE,
                pending: mode.pending == NVML_DEVICE_MIG_ENABLE,
            },
            activation: check(activation).err(),
        })
    }
}

/// Reads of a process list before giving up on a list that keeps growing.
const MAX_PROCESS_READS: u32 = 5;

impl RealNvml {
    /// Compute processes on a device handle (a physical GPU or a MIG device). Processes come
    /// and go between asking for the count and reading: NVML answers INSUFFICIENT_SIZE with the
    /// new count, and the read is retried with more room, a bounded number of times.
    fn running_processes(
        &self,
        device: nvmlDevice_t,
        err: impl Fn(Reason) -> NvmlError,
    ) -> Result<Vec<ProcessInfo>, NvmlError> {
        let f = sym(
            &self.lib().nvmlDeviceGetComputeRunningProcesses_v3,
            "nvmlDeviceGetComputeRunningProcesses_v3",
        )?;
        let mut room: c_uint = 8;
        for _ in 0..MAX_PROCESS_READS {
            let mut buf: Vec<nvmlProcessInfo_t> = vec![unsafe { mem::zeroed() }; room as usize];
            let mut count = room;
            // SAFETY: buffer holds `count` entries.
            let code = unsafe { f(device, &mut count, buf.as_mut_ptr()) };
            if code == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
                room = count.max(room) * 2;
                continue;
            }
            check(code).map_err(&err)?;
            buf.truncate(count as usize);
            // NVML_VALUE_NOT_AVAILABLE is (unsigned long long)-1.
            return Ok(buf
                .iter()
                .map(|p| ProcessInfo {
                    pid: p.pid,
                    used_memory_bytes: (p.usedGpuMemory != u64::MAX).then_some(p.usedGpuMemory),
                })
                .collect());
        }
        Err(err(Reason::Other(format!(
            "the process list kept growing over {MAX_PROCESS_READS} reads (NVML_ERROR_INSUFFICIENT_SIZE)"
        ))))
    }
}

impl Drop for RealNvml {
    fn drop(&mut self) {
        if let Some(key) = self.error_strings {
            returns::forget_error_string(key);
        }
    }
}
