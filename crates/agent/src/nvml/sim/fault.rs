//! Fault injection for the simulated backend: fail a chosen call (by name, GPU and/or the Nth
//! matching call), once or from then on, before or after the call takes effect.

use serde::Serialize;

use crate::nvml::{GpuIndex, NvmlCall, Reason};

/// When an injected fault strikes relative to the call's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FaultEffect {
    /// The call fails and changes nothing.
    FailBefore,
    /// The call changes the GPU, then reports failure: a reply lost on the way back, or the agent
    /// dying right after the call. Tests that a retry is idempotent.
    FailAfter,
}

/// A failure to inject. Built with [`Fault::on`] or [`Fault::any_call`] and refined:
///
/// ```
/// use geometer_agent::nvml::sim::{Fault, SimNvml};
/// use geometer_agent::nvml::{NvmlBackend, NvmlCall, NvmlProfileId, Placement, Reason};
///
/// let sim = SimNvml::new("node-a");
/// sim.add_gpu("H100-80GB").unwrap(); // GPU 0
/// sim.add_gpu("H100-80GB").unwrap(); // GPU 1
/// // The 2nd GPU-instance creation on GPU 1 fails with "in use", and keeps failing after that.
/// sim.inject(Fault::on(NvmlCall::CreateGpuInstance).on_gpu(1).nth(2).always().reason(Reason::InUse));
///
/// let one_g = NvmlProfileId(19); // 1g.10gb on an H100-80GB (`nvidia-smi mig -lgip`)
/// let at = |start| Placement { start, size: 1 };
/// assert!(sim.create_gpu_instance(1, one_g, at(0)).is_ok(), "the 1st call on GPU 1 goes through");
/// for start in [1, 2] {
///     let err = sim.create_gpu_instance(1, one_g, at(start)).unwrap_err();
///     assert_eq!(err.reason(), Some(&Reason::InUse));
/// }
/// assert!(sim.create_gpu_instance(0, one_g, at(1)).is_ok(), "GPU 0 is not targeted");
/// assert_eq!(sim.geometry(1).unwrap().len(), 1, "a fault before the effect changes nothing");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Only calls of this kind count; `None`: every call counts.
    pub call: Option<NvmlCall>,
    /// Only calls about this GPU count; `None`: any GPU (and calls about no GPU).
    pub gpu: Option<GpuIndex>,
    /// Fail the Nth matching call after injection (1 = the next one).
    pub nth: u64,
    /// Keep failing every matching call from the Nth on.
    pub always: bool,
    pub effect: FaultEffect,
    pub reason: Reason,
}

impl Fault {
    /// Fails the next call of this kind.
    pub fn on(call: NvmlCall) -> Fault {
        Fault { call: Some(call), ..Fault::any_call() }
    }

    /// Fails the next call, whatever it is (with [`Fault::nth`]: the Nth call).
    pub fn any_call() -> Fault {
        Fault {
            call: None,
            gpu: None,
            nth: 1,
            always: false,
            effect: FaultEffect::FailBefore,
            reason: Reason::Injected,
        }
    }

    pub fn on_gpu(mut self, gpu: GpuIndex) -> Fault {
        self.gpu = Some(gpu);
        self
    }

    /// The Nth matching call fails (1-based, counted from injection).
    pub fn nth(mut self, n: u64) -> Fault {
        self.nth = n.max(1);
        self
    }

    pub fn always(mut self) -> Fault {
        self.always = true;
        self
    }

    /// The call takes effect, then reports the failure.
    pub fn after_effect(mut self) -> Fault {
        self.effect = FaultEffect::FailAfter;
        self
    }

    pub fn reason(mut self, reason: Reason) -> Fault {
        self.reason = reason;
        self
    }

    fn matches(&self, call: NvmlCall, gpu: Option<GpuIndex>) -> bool {
        self.call.is_none_or(|c| c == call) && self.gpu.is_none_or(|g| gpu == Some(g))
    }
}

/// One call the simulated backend received, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallRecord {
    /// 1-based position among all calls since the backend was made.
    pub seq: u64,
    pub call: NvmlCall,
    pub gpu: Option<GpuIndex>,
    /// Whether an injected fault made this call fail.
    pub faulted: bool,
}

#[derive(Debug)]
pub(crate) struct ArmedFault {
    fault: Fault,
    seen: u64,
    spent: bool,
}

#[derive(Debug, Default)]
pub(crate) struct FaultBook {
    armed: Vec<ArmedFault>,
    calls: Vec<CallRecord>,
}

impl FaultBook {
    pub(crate) fn inject(&mut self, fault: Fault) {
        self.armed.push(ArmedFault { fault, seen: 0, spent: false });
    }

    pub(crate) fn clear(&mut self) {
        self.armed.clear();
    }

    pub(crate) fn calls(&self) -> &[CallRecord] {
        &self.calls
    }

    /// Records a call and returns the fault that strikes it, if any. Every armed fault that
    /// matches counts the call, so two faults on different Nths both fire.
    pub(crate) fn record(&mut self, call: NvmlCall, gpu: Option<GpuIndex>) -> Option<(FaultEffect, Reason)> {
        let mut strike = None;
        for armed in self.armed.iter_mut().filter(|a| !a.spent && a.fault.matches(call, gpu)) {
            armed.seen += 1;
            let hit = if armed.fault.always {
                armed.seen >= armed.fault.nth
            } else {
                armed.seen == armed.fault.nth
            };
            if hit {
                armed.spent = !armed.fault.always;
                if strike.is_none() {
                    strike = Some((armed.fault.effect, armed.fault.reason.clone()));
                }
            }
        }
        let seq = self.calls.len() as u64 + 1;
        self.calls.push(CallRecord { seq, call, gpu, faulted: strike.is_some() });
        strike
    }
}
