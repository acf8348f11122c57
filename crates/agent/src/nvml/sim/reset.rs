//! A GPU reset on simulated GPUs.

use std::sync::{Arc, Mutex};

use super::SimNvml;
use crate::nvml::{NvmlBackend, NvmlError};

/// [`crate::nvml::reset::GpuReset`] on simulated GPUs, as `nvidia-smi -r -i <uuid>`: refused
/// while a process or another NVML client has the GPU open, or while `fail` is set; otherwise
/// the pending MIG mode takes effect. Every GPU it resets is logged by UUID.
#[derive(Clone)]
pub struct SimReset {
    sim: SimNvml,
    pub fail: Arc<std::sync::atomic::AtomicBool>,
    pub resets: Arc<Mutex<Vec<String>>>,
}

impl SimReset {
    pub fn new(sim: SimNvml) -> SimReset {
        SimReset { sim, fail: Arc::default(), resets: Arc::default() }
    }
}

impl crate::nvml::reset::GpuReset for SimReset {
    fn reset(&self, gpu_uuid: &str) -> Result<(), String> {
        let devices = self.sim.devices().map_err(|e| e.to_string())?;
        let gpu = devices.iter().find(|d| d.uuid == gpu_uuid).ok_or(format!("no GPU {gpu_uuid}"))?.index;
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(format!("Resetting GPU {gpu_uuid} is not supported (injected)"));
        }
        if self.sim.held(gpu).map_err(|e| e.to_string())? {
            return Err(format!("GPU {gpu_uuid} is in use by another client"));
        }
        self.sim.reset_gpu(gpu).map_err(|e| e.to_string())?;
        self.resets.lock().unwrap_or_else(|p| p.into_inner()).push(gpu_uuid.to_string());
        Ok(())
    }

    fn reopen(&self) -> Result<Arc<dyn NvmlBackend>, NvmlError> {
        Ok(Arc::new(self.sim.clone()))
    }
}
