//! NVML return codes as the agent's `Reason`s, and the small helpers every raw call shares:
//! symbol lookup, the success check, and NVML's own description of a code.

use std::ffi::CStr;
use std::os::raw::c_char;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper_sys::bindings::*;

use crate::nvml::{GpuIndex, NvmlCall, NvmlError, NvmlProfileId, Reason};

/// A symbol of the loaded library, or an error naming it.
pub(super) fn sym<'a, T, E>(symbol: &'a Result<T, E>, name: &'static str) -> Result<&'a T, NvmlError> {
    symbol.as_ref().map_err(|_| NvmlError::MissingSymbol { symbol: name })
}

pub(super) fn check(code: nvmlReturn_t) -> Result<(), Reason> {
    if code == nvmlReturn_enum_NVML_SUCCESS {
        Ok(())
    } else {
        Err(reason_from_code(code))
    }
}

/// Profile queries answer these for a profile index the GPU (or MIG mode) does not offer.
pub(super) fn profile_absent(code: nvmlReturn_t) -> bool {
    code == nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED || code == nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
}

pub(super) fn profile_error(
    gpu: GpuIndex,
    call: NvmlCall,
    profile: NvmlProfileId,
    reason: Reason,
) -> NvmlError {
    NvmlError::Profile { gpu, call, profile, reason }
}

pub(super) fn gpu_instance_error(
    gpu: GpuIndex,
    gpu_instance: u32,
    call: NvmlCall,
    reason: Reason,
) -> NvmlError {
    match call {
        NvmlCall::DestroyGpuInstance => NvmlError::DestroyGpuInstance { gpu, gpu_instance, reason },
        NvmlCall::CreateComputeInstance => NvmlError::CreateComputeInstance { gpu, gpu_instance, reason },
        _ => NvmlError::Gpu { gpu, call, reason },
    }
}

// bindgen names the return codes in lower case.
#[allow(non_upper_case_globals)]
fn reason_from_code(code: nvmlReturn_t) -> Reason {
    match code {
        nvmlReturn_enum_NVML_ERROR_IN_USE => Reason::InUse,
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES => Reason::InsufficientResources,
        nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => Reason::InvalidArgument,
        nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => Reason::NotSupported,
        nvmlReturn_enum_NVML_ERROR_NO_PERMISSION => Reason::NoPermission,
        nvmlReturn_enum_NVML_ERROR_NOT_FOUND => Reason::NotFound,
        nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => Reason::GpuLost,
        nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED => Reason::ResetRequired,
        other => Reason::Other(match error_string(other) {
            Some(text) => format!("{text} (NVML error code {other})"),
            None => format!("NVML error code {other}"),
        }),
    }
}

/// `nvmlErrorString` of each loaded library, kept while its [`RealNvml`] holds the library
/// (added at initialisation, removed on drop, before the library can be unloaded) so that free
/// functions can describe a return code the way NVML itself does. A process normally holds one;
/// each has its own entry so that dropping one never leaves another without its strings, nor
/// with a pointer into a library that is gone. The newest is asked.
pub(super) type ErrorStringFn = unsafe extern "C" fn(nvmlReturn_t) -> *const c_char;
static ERROR_STRINGS: Mutex<Vec<(u64, ErrorStringFn)>> = Mutex::new(Vec::new());

/// Keeps `nvmlErrorString` of a library that was just loaded; the key removes it again.
pub(super) fn remember_error_string(f: ErrorStringFn) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let key = NEXT.fetch_add(1, Ordering::Relaxed);
    ERROR_STRINGS.lock().unwrap_or_else(|p| p.into_inner()).push((key, f));
    key
}

/// Forgets it before the library can be unloaded.
pub(super) fn forget_error_string(key: u64) {
    ERROR_STRINGS.lock().unwrap_or_else(|p| p.into_inner()).retain(|(k, _)| *k != key);
}

fn error_string(code: nvmlReturn_t) -> Option<String> {
    // Held through the call, so a RealNvml being dropped waits for it.
    let guard = ERROR_STRINGS.lock().unwrap_or_else(|p| p.into_inner());
    let &(_, f) = guard.last()?;
    // SAFETY: nvmlErrorString returns a pointer to a static, NUL-terminated string (nvml.h),
    // or null for a code it does not know.
    let text = unsafe { f(code) };
    if text.is_null() {
        return None;
    }
    Some(unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned())
}

pub(super) fn reason_from_wrapper(e: WrapperError) -> Reason {
    match e {
        WrapperError::InUse => Reason::InUse,
        WrapperError::InvalidArg => Reason::InvalidArgument,
        WrapperError::NotSupported => Reason::NotSupported,
        WrapperError::NoPermission => Reason::NoPermission,
        WrapperError::NotFound => Reason::NotFound,
        WrapperError::GpuLost => Reason::GpuLost,
        WrapperError::ResetRequired => Reason::ResetRequired,
        other => Reason::Other(other.to_string()),
    }
}

pub(super) fn c_chars_to_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
