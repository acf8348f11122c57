//! Turning MIG mode on: what the agent tells the operator when the change does not take effect.
//!
//! On Ampere (A100, A30) the reset that activates a MIG mode change only succeeds with every
//! NVML client gone, the agent's own session included. Unless the agent and the policy allow
//! it to reset the GPU itself (`nvml::reset`), it stops with a condition naming what to stop
//! and the command to run. From Hopper on the change needs no reset and takes effect on an idle
//! GPU; "idle" is checked through NVML's process list before the call (NVIDIA MIG user guide,
//! "Enable MIG Mode"; NVIDIA/mig-parted `pkg/mig/reconfigure/reconfigure.go` pauses the same
//! clients around a change).

use crate::nvml::{ProcessInfo, Reason};

/// The NVML clients a node usually runs, as mig-parted's reconfigure script stops them.
const NVML_CLIENTS: &str =
    "the NVIDIA device plugin, GPU feature discovery, dcgm-exporter, DCGM (nv-hostengine), nvidia-persistenced";

/// Whether the GPU's architecture needs a GPU reset for a MIG mode change.
pub(crate) fn needs_reset(architecture: Option<&str>) -> bool {
    architecture.is_some_and(|a| a.starts_with("Ampere"))
}

/// Why a MIG mode change on `gpu` is not active yet and what the operator must do, from the
/// activation status NVML gave.
pub(crate) fn pending_blocker(gpu: u32, architecture: Option<&str>, activation: Option<&Reason>) -> String {
    let reset = format!("`nvidia-smi -r -i {gpu}`");
    match activation {
        Some(Reason::ResetRequired) => format!(
            "the driver cannot reset this GPU itself (activation status RESET_REQUIRED, as in pass-through VMs): \
             reset it from the hypervisor or reboot the node; where resets are allowed, {reset} with the GPU idle"
        ),
        _ if needs_reset(architecture) => format!(
            "on Ampere the change needs a GPU reset, which only succeeds with every NVML client gone: stop \
             {NVML_CLIENTS} and this agent on the node, run {reset}, then start them again (or reboot the node); \
             the agent picks the new mode up when it starts"
        ),
        Some(Reason::InUse) => format!(
            "another NVML client holds the GPU although no process runs on it (activation status IN_USE): stop \
             {NVML_CLIENTS} on the node, or run {reset} once they are stopped; the agent tries again"
        ),
        Some(other) => format!("NVML's activation status: {other}; {reset} on an idle GPU or a reboot makes it active"),
        None => format!("NVML reports the change as pending; {reset} on an idle GPU or a reboot makes it active"),
    }
}

/// Processes on a GPU whose MIG mode must change, as the user of an `InUse` error.
pub(crate) fn describe_processes(processes: &[ProcessInfo]) -> String {
    let pids: Vec<String> = processes.iter().map(|p| p.pid.to_string()).collect();
    format!(
        "{} process(es) NVML reports on the GPU, no pod holds it (pids {})",
        processes.len(),
        pids.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ampere_is_told_to_stop_every_client_and_reset() {
        let text = pending_blocker(2, Some("Ampere GA100"), Some(&Reason::InUse));
        for must in ["nvidia-smi -r -i 2", "dcgm-exporter", "nvidia-persistenced", "this agent"] {
            assert!(text.contains(must), "{must}: {text}");
        }
    }

    #[test]
    fn hopper_held_by_a_client_is_told_which_clients_and_that_the_agent_retries() {
        let text = pending_blocker(0, Some("Hopper GH100"), Some(&Reason::InUse));
        assert!(text.contains("another NVML client") && text.contains("tries again"), "{text}");
        assert!(!text.contains("Ampere"), "{text}");
    }

    #[test]
    fn a_pass_through_vm_is_told_to_reset_from_the_hypervisor() {
        let text = pending_blocker(1, Some("Ampere GA100"), Some(&Reason::ResetRequired));
        assert!(text.contains("RESET_REQUIRED") && text.contains("hypervisor"), "{text}");
    }
}
