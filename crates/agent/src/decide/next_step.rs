//! The next step, decided from what is observed now and the last step recorded in status.
//!
//! Level-triggered: every decision starts from a fresh look at the GPUs, the node and the pods,
//! so a step that was recorded but not (or only half) taken before a crash is simply decided
//! again. The recorded step only carries what cannot be observed: that the GPUs were changed
//! and the device plugin still has to re-advertise them, and when a wait began.
//!
//! Order, as in DESIGN.md: preflight (a node the GPU Operator's labels refuse is not touched) ->
//! cordon (only when needed) -> drain -> pause the GPU Operator's operands (on its nodes) ->
//! repartition (per GPU: MIG mode on, destroy compute then GPU instances, MIG mode off for a
//! whole GPU, create GPU instances largest first, then their compute instances) -> verify ->
//! restore the operands -> re-advertise -> uncordon (only our own cordon) -> ready.

use geometer_api::{MigInstance, PlacedInstance, StepAction};

use crate::decide::gpu_diff::NodeWork;
use crate::steps::cordon::CordonState;
use crate::steps::operands::Operands;

/// What the agent knows when it decides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    pub work: &'a NodeWork,
    pub cordon: CordonState,
    /// The step last written to status (whatever generation it was for).
    pub last_step: Option<StepAction>,
    /// A pod that must leave is protected by a do-not-disrupt annotation now.
    pub drain_blocked: bool,
    /// This agent deleted the device plugin pods for the last `RestartDevicePlugin` step. A
    /// restarted agent does not know whether its predecessor did, and restarts the plugin again
    /// (harmless).
    pub plugin_restarted: bool,
    /// The node's allocatable shows exactly the MIG devices on the GPUs, and a device plugin pod
    /// that was not deleted by the restart is ready.
    pub advertised: bool,
    /// The recorded wait (drain or advertise) has run past its timeout.
    pub expired: bool,
    /// Status says the last attempt failed (and the backoff has passed, or we would not be
    /// deciding).
    pub failed: bool,
    /// The GPU Operator's operands on the node.
    pub operands: &'a Operands,
    /// The GPU Operator's labels refuse a change now (preflight); a change already under way
    /// (our cordon, our pause) goes on.
    pub refused: bool,
}

/// The step to take next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Publish `Ready`: nothing to do.
    Ready,
    /// The preflight refuses the change: say why and wait, touching nothing.
    Refused,
    Cordon,
    /// Evict the pods on instances that go, or wait for them (or for do-not-disrupt, a PDB, or
    /// processes outside Kubernetes) to leave.
    Drain,
    /// The drain ran past its timeout: fail cleanly (lift our cordon, say why) and retry later.
    DrainTimedOut,
    EnableMigMode {
        gpu: u32,
    },
    DisableMigMode {
        gpu: u32,
    },
    DestroyComputeInstance {
        gpu: u32,
        instance: MigInstance,
    },
    DestroyGpuInstance {
        gpu: u32,
        instance: MigInstance,
    },
    CreateGpuInstance {
        gpu: u32,
        placed: PlacedInstance,
    },
    CreateComputeInstance {
        gpu: u32,
        instance: MigInstance,
    },
    /// Pause the GPU Operator's operands, or wait for their pods to leave the node.
    PauseOperands,
    /// The operands' pods did not leave in time: restore them, fail, and retry later.
    OperandsTimedOut,
    /// Check every GPU against its target before telling anyone about the new slices.
    Verify,
    /// Re-run the validator and give the paused labels their values back.
    RestoreOperands,
    RestartDevicePlugin,
    WaitForAllocatable,
    /// The device plugin did not advertise in time: report it, then restart it again.
    AdvertiseTimedOut,
    Uncordon,
}

impl Next {
    /// The step recorded in status for this decision; `None` for `Ready` and for failures
    /// (which keep the step they failed in).
    pub(crate) fn action(&self) -> Option<StepAction> {
        Some(match self {
            Next::Ready
            | Next::Refused
            | Next::DrainTimedOut
            | Next::AdvertiseTimedOut
            | Next::OperandsTimedOut => return None,
            Next::Cordon => StepAction::Cordon,
            Next::Drain => StepAction::Evict,
            Next::EnableMigMode { .. } => StepAction::EnableMigMode,
            Next::DisableMigMode { .. } => StepAction::DisableMigMode,
            Next::DestroyComputeInstance { .. } => StepAction::DestroyComputeInstance,
            Next::DestroyGpuInstance { .. } => StepAction::DestroyGpuInstance,
            Next::CreateGpuInstance { .. } => StepAction::CreateGpuInstance,
            Next::CreateComputeInstance { .. } => StepAction::CreateComputeInstance,
            Next::PauseOperands => StepAction::PauseOperands,
            Next::Verify => StepAction::Verify,
            Next::RestoreOperands => StepAction::RestoreOperands,
            Next::RestartDevicePlugin => StepAction::RestartDevicePlugin,
            Next::WaitForAllocatable => StepAction::WaitForAllocatable,
            Next::Uncordon => StepAction::Uncordon,
        })
    }

    pub(crate) fn gpu(&self) -> Option<u32> {
        match self {
            Next::EnableMigMode { gpu }
            | Next::DisableMigMode { gpu }
            | Next::DestroyComputeInstance { gpu, .. }
            | Next::DestroyGpuInstance { gpu, .. }
            | Next::CreateGpuInstance { gpu, .. }
            | Next::CreateComputeInstance { gpu, .. } => Some(*gpu),
            _ => None,
        }
    }

    pub(crate) fn instance(&self) -> Option<PlacedInstance> {
        match self {
            Next::DestroyComputeInstance { instance, .. }
            | Next::DestroyGpuInstance { instance, .. }
            | Next::CreateComputeInstance { instance, .. } => Some(instance.placed()),
            Next::CreateGpuInstance { placed, .. } => Some(placed.clone()),
            _ => None,
        }
    }
}

/// Whether a step changes the GPUs (after which the device plugin must re-advertise).
pub(crate) fn changes_gpus(action: StepAction) -> bool {
    matches!(
        action,
        StepAction::EnableMigMode
            | StepAction::DisableMigMode
            | StepAction::DestroyComputeInstance
            | StepAction::DestroyGpuInstance
            | StepAction::CreateGpuInstance
            | StepAction::CreateComputeInstance
    )
}

pub(crate) fn next(f: &Facts<'_>) -> Next {
    if !f.work.is_done() {
        return next_change(f);
    }
    match f.last_step {
        Some(action) if changes_gpus(action) => Next::Verify,
        // A verification that failed is repeated; the plugin must not advertise unverified GPUs.
        Some(StepAction::Verify) if f.failed => Next::Verify,
        // The window closes once the GPUs are verified, or when the work is gone (the plan was
        // withdrawn) before any GPU changed.
        _ if f.operands.paused() => Next::RestoreOperands,
        Some(StepAction::Verify) => Next::RestartDevicePlugin,
        // The restored device plugin pod is a new one; an agent that does not know which pods
        // the pause took away restarts it again (harmless).
        Some(StepAction::RestoreOperands) if f.plugin_restarted => Next::WaitForAllocatable,
        Some(StepAction::RestoreOperands) => Next::RestartDevicePlugin,
        Some(StepAction::RestartDevicePlugin) if !f.plugin_restarted => Next::RestartDevicePlugin,
        Some(StepAction::RestartDevicePlugin) => Next::WaitForAllocatable,
        Some(StepAction::WaitForAllocatable) if !f.advertised => match (f.expired, f.failed) {
            (false, _) => Next::WaitForAllocatable,
            (true, false) => Next::AdvertiseTimedOut,
            (true, true) => Next::RestartDevicePlugin,
        },
        _ if f.cordon.marked() => Next::Uncordon,
        _ => Next::Ready,
    }
}

fn next_change(f: &Facts<'_>) -> Next {
    let work = f.work;
    let must_leave =
        !work.pods_to_evict().is_empty() || work.gpus.iter().any(|g| g.busy_without_pod().next().is_some());
    if f.refused && !f.cordon.marked() && !f.operands.paused() {
        return Next::Refused;
    }
    if must_leave && f.last_step == Some(StepAction::Evict) && f.expired && !f.failed {
        return Next::DrainTimedOut;
    }
    // A protected pod is waited for before cordoning: the node keeps serving while nothing
    // can move (as Karpenter does), and no cordon is left waiting on a pod that may never go.
    if must_leave && f.drain_blocked {
        return Next::Drain;
    }
    if work.needs_cordon() && !f.cordon.unschedulable() {
        return Next::Cordon;
    }
    if must_leave {
        return Next::Drain;
    }
    if f.refused && !f.operands.paused() {
        return Next::Refused;
    }
    if !f.operands.clear() {
        let waited = f.last_step == Some(StepAction::PauseOperands) && f.operands.paused();
        return if waited && f.expired && !f.failed { Next::OperandsTimedOut } else { Next::PauseOperands };
    }
    for gpu in &work.gpus {
        if gpu.enable_mig {
            return Next::EnableMigMode { gpu: gpu.index };
        }
        if let Some(instance) = gpu.destroy.first() {
            let instance = instance.clone();
            return match instance.compute_instance_id {
                Some(_) => Next::DestroyComputeInstance { gpu: gpu.index, instance },
                None => Next::DestroyGpuInstance { gpu: gpu.index, instance },
            };
        }
        if gpu.disable_mig {
            return Next::DisableMigMode { gpu: gpu.index };
        }
    }
    for gpu in &work.gpus {
        if let Some(placed) = gpu.create.first() {
            return Next::CreateGpuInstance { gpu: gpu.index, placed: placed.clone() };
        }
    }
    for gpu in &work.gpus {
        if let Some(instance) = gpu.half_built().next() {
            return Next::CreateComputeInstance { gpu: gpu.index, instance: instance.clone() };
        }
    }
    // Not reachable (work that is not done has one of the changes above), but if it were,
    // verifying reports the mismatch as a failure instead of taking the agent down.
    Next::Verify
}

#[cfg(test)]
mod tests {
    use geometer_api::{GpuGeometry, GpuInventory, MigModeStatus};

    use super::*;
    use crate::decide::gpu_diff::{catalog_models, NodeWork};

    fn instance(profile: &str, start: u8, size: u8, gi: u32, pod: Option<&str>) -> MigInstance {
        MigInstance {
            profile: profile.into(),
            start,
            size,
            gpu_instance_id: gi,
            compute_instance_id: Some(0),
            uuid: Some(format!("MIG-{gi}")),
            pod: pod.map(str::to_string),
            processes: 0,
            shared_with: Vec::new(),
            rebuild: None,
        }
    }

    fn work(have: Vec<MigInstance>, want: &[(&str, u8)]) -> NodeWork {
        let gpu = GpuInventory {
            index: 0,
            uuid: "GPU-0".into(),
            model: "H100-80GB".into(),
            pci_device_id: "0x233010DE".into(),
            mig_mode: MigModeStatus { current: true, pending: true },
            instances: have,
            pod: None,
            shared_with: vec![],
            advertised_as: Default::default(),
            free_placements: Vec::new(),
        };
        let spec = GpuGeometry {
            index: 0,
            geometry: want.iter().map(|&(p, s)| PlacedInstance::new(p, s)).collect(),
        };
        let observed = vec![gpu];
        NodeWork::plan(
            &[spec],
            &observed,
            &catalog_models(&observed, geometer_solver::catalog::Catalog::builtin()),
        )
        .unwrap()
    }

    fn facts(work: &NodeWork) -> Facts<'_> {
        Facts {
            work,
            cordon: CordonState::Open,
            last_step: None,
            drain_blocked: false,
            plugin_restarted: false,
            advertised: false,
            expired: false,
            failed: false,
            operands: &ABSENT,
            refused: false,
        }
    }

    static ABSENT: Operands = Operands::Absent;
    static RUNNING: Operands = Operands::Running;

    #[test]
    fn a_refused_node_is_not_touched_but_a_change_under_way_goes_on() {
        let w = work(vec![instance("7g.80gb", 0, 8, 1, Some("ml/big"))], &[("3g.40gb", 0)]);
        assert_eq!(next(&Facts { refused: true, ..facts(&w) }), Next::Refused);
        let cordoned = Facts { refused: true, cordon: CordonState::Ours, ..facts(&w) };
        assert_eq!(next(&cordoned), Next::Drain);
        let done = work(vec![instance("7g.80gb", 0, 8, 1, None)], &[("7g.80gb", 0)]);
        assert_eq!(
            next(&Facts { refused: true, ..facts(&done) }),
            Next::Ready,
            "nothing to do is no refusal"
        );
    }

    #[test]
    fn on_a_gpu_operator_node_the_operands_are_paused_after_the_drain_and_restored_after_verify() {
        let drained = work(vec![instance("7g.80gb", 0, 8, 1, None)], &[("3g.40gb", 0)]);
        let base = Facts { cordon: CordonState::Ours, last_step: Some(StepAction::Evict), ..facts(&drained) };
        assert_eq!(next(&Facts { operands: &RUNNING, ..base }), Next::PauseOperands);
        let waiting = Operands::Paused { waiting: vec!["gpu-operator/nvidia-dcgm-exporter-x".into()] };
        let paused = Facts { operands: &waiting, last_step: Some(StepAction::PauseOperands), ..base };
        assert_eq!(next(&paused), Next::PauseOperands, "the clients have not left yet");
        assert_eq!(next(&Facts { expired: true, ..paused }), Next::OperandsTimedOut);
        let clear = Operands::Paused { waiting: vec![] };
        assert!(matches!(next(&Facts { operands: &clear, ..paused }), Next::DestroyComputeInstance { .. }));

        let done = work(vec![instance("3g.40gb", 0, 4, 1, None)], &[("3g.40gb", 0)]);
        let changed =
            Facts { operands: &clear, last_step: Some(StepAction::CreateComputeInstance), ..facts(&done) };
        assert_eq!(next(&changed), Next::Verify);
        assert_eq!(next(&Facts { last_step: Some(StepAction::Verify), ..changed }), Next::RestoreOperands);
        let restored = Facts { operands: &RUNNING, last_step: Some(StepAction::RestoreOperands), ..changed };
        assert_eq!(next(&Facts { plugin_restarted: true, ..restored }), Next::WaitForAllocatable);
        assert_eq!(next(&restored), Next::RestartDevicePlugin, "a restarted agent restarts the plugin again");
    }

    #[test]
    fn a_plan_withdrawn_inside_the_window_restores_the_operands_before_anything_else() {
        let undone = work(vec![instance("7g.80gb", 0, 8, 1, None)], &[("7g.80gb", 0)]);
        let clear = Operands::Paused { waiting: vec![] };
        let f = Facts {
            cordon: CordonState::Ours,
            operands: &clear,
            last_step: Some(StepAction::PauseOperands),
            ..facts(&undone)
        };
        assert_eq!(next(&f), Next::RestoreOperands);
    }

    #[test]
    fn nothing_to_do_is_ready_and_lifts_only_a_marked_cordon() {
        let w = work(vec![instance("7g.80gb", 0, 8, 1, None)], &[("7g.80gb", 0)]);
        assert_eq!(next(&facts(&w)), Next::Ready);
        assert_eq!(next(&Facts { cordon: CordonState::Ours, ..facts(&w) }), Next::Uncordon);
        assert_eq!(next(&Facts { cordon: CordonState::MarkOnly, ..facts(&w) }), Next::Uncordon);
        assert_eq!(next(&Facts { cordon: CordonState::Theirs, ..facts(&w) }), Next::Ready);
    }

    #[test]
    fn a_change_walks_cordon_drain_destroy_create_in_order() {
        let w = work(vec![instance("7g.80gb", 0, 8, 1, Some("ml/big"))], &[("3g.40gb", 0), ("1g.10gb", 4)]);
        assert_eq!(next(&facts(&w)), Next::Cordon);
        let cordoned = Facts { cordon: CordonState::Ours, last_step: Some(StepAction::Cordon), ..facts(&w) };
        assert_eq!(next(&cordoned), Next::Drain);
        // A person's cordon serves as well: no second cordon, straight to the drain.
        assert_eq!(next(&Facts { cordon: CordonState::Theirs, ..facts(&w) }), Next::Drain);

        let drained = work(vec![instance("7g.80gb", 0, 8, 1, None)], &[("3g.40gb", 0), ("1g.10gb", 4)]);
        let f = Facts { cordon: CordonState::Ours, last_step: Some(StepAction::Evict), ..facts(&drained) };
        assert!(matches!(next(&f), Next::DestroyComputeInstance { gpu: 0, .. }));

        let mut bare = instance("7g.80gb", 0, 8, 1, None);
        bare.compute_instance_id = None;
        let w = work(vec![bare], &[("3g.40gb", 0), ("1g.10gb", 4)]);
        let f = Facts {
            cordon: CordonState::Ours,
            last_step: Some(StepAction::DestroyComputeInstance),
            ..facts(&w)
        };
        assert!(matches!(next(&f), Next::DestroyGpuInstance { gpu: 0, .. }));

        let w = work(vec![], &[("3g.40gb", 0), ("1g.10gb", 4)]);
        let f =
            Facts { cordon: CordonState::Ours, last_step: Some(StepAction::DestroyGpuInstance), ..facts(&w) };
        assert_eq!(next(&f), Next::CreateGpuInstance { gpu: 0, placed: PlacedInstance::new("3g.40gb", 0) });

        let mut new = instance("3g.40gb", 0, 4, 1, None);
        new.compute_instance_id = None;
        let w = work(vec![new.clone()], &[("3g.40gb", 0), ("1g.10gb", 4)]);
        let f =
            Facts { cordon: CordonState::Ours, last_step: Some(StepAction::CreateGpuInstance), ..facts(&w) };
        assert_eq!(
            next(&f),
            Next::CreateGpuInstance { gpu: 0, placed: PlacedInstance::new("1g.10gb", 4) },
            "every GPU instance before compute instances"
        );

        let mut small = instance("1g.10gb", 4, 1, 2, None);
        small.compute_instance_id = None;
        let w = work(vec![new.clone(), small], &[("3g.40gb", 0), ("1g.10gb", 4)]);
        let f =
            Facts { cordon: CordonState::Ours, last_step: Some(StepAction::CreateGpuInstance), ..facts(&w) };
        assert_eq!(next(&f), Next::CreateComputeInstance { gpu: 0, instance: new });
    }

    #[test]
    fn after_the_gpus_change_verify_readvertise_then_uncordon() {
        let done = work(vec![instance("3g.40gb", 0, 4, 1, None)], &[("3g.40gb", 0)]);
        let base = Facts { cordon: CordonState::Ours, ..facts(&done) };
        for action in
            [StepAction::CreateComputeInstance, StepAction::DestroyGpuInstance, StepAction::EnableMigMode]
        {
            assert_eq!(next(&Facts { last_step: Some(action), ..base }), Next::Verify);
        }
        assert_eq!(next(&Facts { last_step: Some(StepAction::Verify), ..base }), Next::RestartDevicePlugin);
        assert_eq!(next(&Facts { last_step: Some(StepAction::Verify), failed: true, ..base }), Next::Verify);
        let restarting = Facts { last_step: Some(StepAction::RestartDevicePlugin), ..base };
        assert_eq!(next(&restarting), Next::RestartDevicePlugin, "a restart not seen yet is repeated");
        assert_eq!(next(&Facts { plugin_restarted: true, ..restarting }), Next::WaitForAllocatable);
        let waiting =
            Facts { last_step: Some(StepAction::WaitForAllocatable), plugin_restarted: true, ..base };
        assert_eq!(next(&waiting), Next::WaitForAllocatable);
        assert_eq!(next(&Facts { advertised: true, ..waiting }), Next::Uncordon);
        assert_eq!(next(&Facts { advertised: true, cordon: CordonState::Open, ..waiting }), Next::Ready);
    }

    #[test]
    fn a_change_undone_before_the_gpus_were_touched_needs_no_readvertising() {
        let done = work(vec![instance("7g.80gb", 0, 8, 1, None)], &[("7g.80gb", 0)]);
        let f = Facts { cordon: CordonState::Ours, last_step: Some(StepAction::Evict), ..facts(&done) };
        assert_eq!(next(&f), Next::Uncordon);
    }

    #[test]
    fn only_adding_slices_skips_cordon_and_drain() {
        let w = work(vec![instance("3g.40gb", 0, 4, 1, Some("ml/a"))], &[("3g.40gb", 0), ("3g.40gb", 4)]);
        assert_eq!(
            next(&facts(&w)),
            Next::CreateGpuInstance { gpu: 0, placed: PlacedInstance::new("3g.40gb", 4) }
        );
    }

    #[test]
    fn a_protected_pod_is_waited_for_before_cordoning_and_times_out_once() {
        let w = work(vec![instance("7g.80gb", 0, 8, 1, Some("ml/keep-me"))], &[]);
        let blocked = Facts { drain_blocked: true, ..facts(&w) };
        assert_eq!(next(&blocked), Next::Drain);
        let expired = Facts { last_step: Some(StepAction::Evict), expired: true, ..blocked };
        assert_eq!(next(&expired), Next::DrainTimedOut);
        // After the failure was reported and the backoff passed, the drain starts over.
        assert_eq!(next(&Facts { failed: true, ..expired }), Next::Drain);
    }

    #[test]
    fn processes_outside_kubernetes_are_waited_for_like_pods() {
        let mut busy = instance("7g.80gb", 0, 8, 1, None);
        busy.processes = 2;
        let w = work(vec![busy], &[]);
        assert_eq!(next(&Facts { cordon: CordonState::Ours, ..facts(&w) }), Next::Drain);
    }

    #[test]
    fn a_device_plugin_that_never_advertises_fails_then_is_restarted() {
        let done = work(vec![instance("3g.40gb", 0, 4, 1, None)], &[("3g.40gb", 0)]);
        let waiting =
            Facts { last_step: Some(StepAction::WaitForAllocatable), expired: true, ..facts(&done) };
        assert_eq!(next(&waiting), Next::AdvertiseTimedOut);
        assert_eq!(next(&Facts { failed: true, ..waiting }), Next::RestartDevicePlugin);
    }

    #[test]
    fn a_gpu_with_mig_off_gets_it_enabled_before_any_instance() {
        let mut w = work(vec![], &[("7g.80gb", 0)]);
        w.gpus[0].enable_mig = true;
        let f = Facts { cordon: CordonState::Ours, ..facts(&w) };
        assert_eq!(next(&f), Next::EnableMigMode { gpu: 0 });
    }
}
