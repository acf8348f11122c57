//! The real NVML backend. Without a driver these tests check the error a user sees and skip the
//! hardware part, saying so; on a GPU machine they read (never change) the GPUs.

use std::io::Write;

use geometer_agent::nvml::real::{RealNvml, NVML_LIBRARY};
use geometer_agent::nvml::{NvmlBackend, NvmlError};
use geometer_agent::probe;
use geometer_solver::catalog::Catalog;

/// The real library, or `None` after printing why the hardware test is skipped.
fn driver() -> Option<RealNvml> {
    match RealNvml::init() {
        Ok(nvml) => Some(nvml),
        Err(e) => {
            // Straight to stderr, past the test harness's capture, so that the skip is seen.
            let _ = writeln!(std::io::stderr(), "SKIPPED: no usable NVIDIA driver on this machine ({e})");
            None
        }
    }
}

#[test]
fn a_missing_library_is_a_no_driver_error_not_a_panic() {
    let err = RealNvml::init_with_library("/nonexistent/libnvidia-ml.so.1").err().expect("no such library");
    assert!(matches!(err, NvmlError::DriverNotFound { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with("no NVIDIA driver (/nonexistent/libnvidia-ml.so.1 not found)"), "{text}");
}

#[test]
fn default_library_is_the_driver_one() {
    assert_eq!(NVML_LIBRARY, "libnvidia-ml.so.1");
    if let Err(e) = RealNvml::init() {
        let text = e.to_string();
        assert!(
            text.starts_with("no NVIDIA driver (libnvidia-ml.so.1 not found)")
                || matches!(e, NvmlError::Init { .. }),
            "{text}"
        );
    }
}

#[test]
fn reads_every_gpu_read_only() {
    let Some(nvml) = driver() else { return };
    let version = nvml.driver_version().unwrap();
    assert!(!version.is_empty());
    let devices = nvml.devices().unwrap();
    assert!(!devices.is_empty(), "NVML loaded but reports no GPU");
    for d in &devices {
        assert!(d.uuid.starts_with("GPU-"), "{d:?}");
        assert_eq!(d.pci_device_id & 0xFFFF, 0x10DE, "vendor must be NVIDIA: {d:?}");
    }
    let report = probe(&nvml, Catalog::builtin()).unwrap();
    assert_eq!(report.gpus.len(), devices.len());
    for gpu in &report.gpus {
        if gpu.device.mig_mode.is_some_and(|m| m.current) {
            for p in &gpu.profiles {
                assert!(!p.placements.is_empty(), "NVML lists no placement for profile id {}", p.info.id);
            }
        }
    }
}
