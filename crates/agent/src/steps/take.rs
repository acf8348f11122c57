//! Taking a step: record it in status first, then act, with a hook on each side.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use kube::runtime::events::EventType;

use crate::decide::mig_mode;
use crate::decide::next_step::Next;
use crate::nvml::reset::{GpuReset, Released};
use crate::nvml::{NvmlBackend, NvmlError, NvmlProfileId, Placement, Reason};
use crate::observe::device_holders::device_holders;
use crate::observe::observation::Context;
use crate::observe::sources::StepPoint;
use crate::runtime::agent_loop::{Agent, NextRound, StepError};
use crate::runtime::conditions;
use crate::runtime::status::phase_of;
use crate::steps::cordon::{self, Applied};
use crate::steps::eviction::{self, EvictionOutcome};
use crate::steps::operands::Operands;
use geometer_api::{AgentStep, MigInstance, MigNodePhase, MigNodeStatus, PlacedInstance, StepAction};

impl Agent {
    pub(crate) async fn take(&mut self, next: Next, mut cx: Context) -> Result<NextRound, StepError> {
        match next {
            Next::Ready => return self.ready(cx).await,
            Next::Refused => return self.refused(cx).await,
            Next::DrainTimedOut => return self.drain_timed_out(cx).await,
            Next::OperandsTimedOut => {
                let waiting = match &cx.operands {
                    Operands::Paused { waiting } => waiting.join(", "),
                    _ => String::new(),
                };
                if let Some(record) = cx.pause.take() {
                    self.close_window(&cx.node, &record, &mut cx.status).await?;
                }
                return Err(StepError::OperandsTimeout { timeout: self.cfg.operand_timeout, waiting });
            }
            Next::AdvertiseTimedOut => {
                return Err(StepError::AdvertiseTimeout {
                    timeout: self.cfg.advertise_timeout,
                    mismatches: describe_mismatches(&cx),
                })
            }
            _ => {}
        }
        let (step, new) = self.record(&next, &mut cx).await?;
        if new {
            self.metrics.step_started(step.action);
            self.hook(StepPoint::Recorded(step.clone())).await;
        }
        let outcome = self.act(&next, &mut cx).await?;
        self.mem.last_round_ok = true;
        if new {
            self.hook(StepPoint::Taken(step)).await;
        }
        Ok(outcome)
    }

    async fn hook(&self, point: StepPoint) {
        if let Some(hook) = &self.hook {
            hook(&point).await;
        }
    }

    /// Writes the step to status before it is taken. Returns the step and whether it is new
    /// (a first try or a retry) rather than another round of the same wait.
    async fn record(&mut self, next: &Next, cx: &mut Context) -> Result<(AgentStep, bool), StepError> {
        let action = next.action().expect("only steps are recorded");
        let now = self.clock.now();
        let failed = cx.status.phase == MigNodePhase::Failed;
        let previous = cx.status.step.clone();
        let same = previous.as_ref().is_some_and(|p| {
            p.action == action
                && p.gpu == next.gpu()
                && p.instance == next.instance()
                && p.generation == cx.generation
        });
        let step = match previous.clone() {
            Some(p) if same && !failed => p,
            Some(p) if same => AgentStep {
                attempt: p.attempt.saturating_add(1),
                // A drain that timed out starts over with a full timeout; any other failure
                // keeps the drain's clock running. A pause retried after a failure is a new window, with a full timeout too.
                started_at: if (action == StepAction::Evict && drain_timed_out(&cx.status))
                    || action == StepAction::PauseOperands
                {
                    now.into()
                } else {
                    p.started_at
                },
                ..p
            },
            _ => AgentStep {
                action,
                generation: cx.generation,
                gpu: next.gpu(),
                instance: next.instance(),
                pod: None,
                attempt: 1,
                started_at: now.into(),
            },
        };
        let new = previous.as_ref() != Some(&step) || failed;
        cx.status.step = Some(step.clone());
        cx.status.phase = phase_of(action);
        let g = Some(cx.generation);
        let mut message = self.describe(next);
        if cx.cordon.marked() || action == StepAction::Cordon {
            message.push_str(
                ". The node is cordoned by Geometer for this change and is uncordoned when it completes",
            );
        }
        conditions::set(
            &mut cx.status.conditions,
            MigNodeStatus::RECONFIGURING,
            true,
            &format!("{action:?}"),
            message,
            g,
            now,
        );
        conditions::set(
            &mut cx.status.conditions,
            MigNodeStatus::READY,
            false,
            "Reconfiguring",
            "the GPUs are being changed to match the spec",
            g,
            now,
        );
        if action != StepAction::Evict {
            conditions::set(
                &mut cx.status.conditions,
                MigNodeStatus::DRAIN_BLOCKED,
                false,
                "NotDraining",
                "",
                g,
                now,
            );
        }
        self.write_status(&cx.status).await?;
        if new {
            tracing::info!(node = %self.cfg.node, action = ?action, gpu = ?step.gpu, instance = ?step.instance, attempt = step.attempt, "step");
        }
        Ok((step, new))
    }

    fn describe(&self, next: &Next) -> String {
        match next {
            Next::Cordon => "cordoning the node so that no new pod gets a slice that is about to go".into(),
            Next::Drain => "draining: the pods on instances that go must leave first".into(),
            Next::EnableMigMode { gpu } => {
                format!("GPU {gpu}: turning MIG mode on (this resets GPU {gpu} only)")
            }
            Next::DisableMigMode { gpu } => {
                format!("GPU {gpu}: turning MIG mode off for a whole GPU (this resets GPU {gpu} only)")
            }
            Next::DestroyComputeInstance { gpu, instance } => {
                format!("GPU {gpu}: destroying the compute instance of {}", instance.placed())
            }
            Next::DestroyGpuInstance { gpu, instance } => {
                format!("GPU {gpu}: destroying GPU instance {}", instance.placed())
            }
            Next::CreateGpuInstance { gpu, placed } => format!("GPU {gpu}: creating GPU instance {placed}"),
            Next::CreateComputeInstance { gpu, instance } => {
                format!("GPU {gpu}: creating the compute instance of {}", instance.placed())
            }
            Next::PauseOperands => "pausing the GPU Operator's operands (device plugin, GPU feature discovery, DCGM, dcgm-exporter, GPU clients) and waiting until their pods have left the node".into(),
            Next::Verify => "checking every GPU against its target".into(),
            Next::RestoreOperands => "re-running the GPU Operator's validator and restoring its operands' labels".into(),
            Next::RestartDevicePlugin => format!(
                "restarting the NVIDIA device plugin ({}) so that it advertises the new slices",
                self.cfg.device_plugin_selector
            ),
            Next::WaitForAllocatable => "waiting for the node's allocatable to show the new slices".into(),
            Next::Uncordon => "lifting Geometer's cordon".into(),
            Next::Ready | Next::Refused | Next::DrainTimedOut | Next::AdvertiseTimedOut | Next::OperandsTimedOut => {
                String::new()
            }
        }
    }

    async fn act(&mut self, next: &Next, cx: &mut Context) -> Result<NextRound, StepError> {
        match next {
            Next::Cordon => self.cordon(cx).await,
            Next::Drain => self.drain(cx).await,
            Next::EnableMigMode { gpu } => self.set_mig_mode(*gpu, true, cx).await,
            Next::DisableMigMode { gpu } => self.set_mig_mode(*gpu, false, cx).await,
            Next::DestroyComputeInstance { gpu, instance } => {
                ensure_unused(*gpu, instance)?;
                ensure_unclaimed(*gpu, instance.placed().to_string(), instance.uuid.as_deref(), cx)?;
                ensure_no_unknown_devices(*gpu, cx)?;
                let ci = instance.compute_instance_id.unwrap_or_default();
                let (gpu_index, gi) = (*gpu, instance.gpu_instance_id);
                self.nvml_call(move |n| n.destroy_compute_instance(gpu_index, gi, ci))
                    .await
                    .or_else(gone_is_done)
                    .map_err(|e| held_by_client(e, *gpu, instance))?;
                Ok(NextRound::Continue)
            }
            Next::DestroyGpuInstance { gpu, instance } => {
                ensure_unused(*gpu, instance)?;
                ensure_unclaimed(*gpu, instance.placed().to_string(), instance.uuid.as_deref(), cx)?;
                ensure_no_unknown_devices(*gpu, cx)?;
                let (gpu_index, gi) = (*gpu, instance.gpu_instance_id);
                self.nvml_call(move |n| n.destroy_gpu_instance(gpu_index, gi))
                    .await
                    .or_else(gone_is_done)
                    .map_err(|e| held_by_client(e, *gpu, instance))?;
                Ok(NextRound::Continue)
            }
            Next::CreateGpuInstance { gpu, placed } => {
                let (profile_id, placement) = placement_of(*gpu, placed, cx)?;
                let gpu = *gpu;
                self.nvml_call(move |n| n.create_gpu_instance(gpu, profile_id, placement)).await?;
                Ok(NextRound::Continue)
            }
            Next::CreateComputeInstance { gpu, instance } => {
                let (gpu, gi) = (*gpu, instance.gpu_instance_id);
                self.nvml_call(move |n| n.create_compute_instance(gpu, gi)).await?;
                Ok(NextRound::Continue)
            }
            Next::PauseOperands => self.pause_operands(cx).await,
            Next::Verify => self.verify(cx).await,
            Next::RestoreOperands => self.restore_operands(cx).await,
            Next::RestartDevicePlugin => self.restart_device_plugin().await,
            Next::WaitForAllocatable => self.wait_for_allocatable(cx).await,
            Next::Uncordon => self.uncordon(cx).await,
            Next::Ready
            | Next::Refused
            | Next::DrainTimedOut
            | Next::AdvertiseTimedOut
            | Next::OperandsTimedOut => {
                unreachable!("handled in take")
            }
        }
    }

    pub(crate) async fn nvml_call<T: Send + 'static>(
        &self,
        call: impl FnOnce(&dyn NvmlBackend) -> Result<T, NvmlError> + Send + 'static,
    ) -> Result<T, StepError> {
        let nvml = self.nvml.clone();
        tokio::task::spawn_blocking(move || call(&*nvml))
            .await
            .map_err(|e| StepError::Task(e.to_string()))?
            .map_err(StepError::from)
    }

    async fn cordon(&mut self, cx: &Context) -> Result<NextRound, StepError> {
        if cordon::cordon(&self.nodes(), &cx.node).await? == Applied::Patched {
            let note =
                "cordoned for a MIG reconfiguration; Geometer lifts this cordon when it is done".to_string();
            self.event(EventType::Normal, "Cordoned", "Cordon", note, None).await;
        }
        Ok(NextRound::Continue)
    }

    async fn uncordon(&mut self, cx: &Context) -> Result<NextRound, StepError> {
        if cordon::uncordon(&self.nodes(), &cx.node).await? == Applied::Patched {
            self.event(EventType::Normal, "Uncordoned", "Uncordon", "lifted Geometer's cordon".into(), None)
                .await;
        }
        Ok(NextRound::Continue)
    }

    /// MIG mode on (for slices) or off (for a whole GPU), on an idle GPU: no pod holds it and
    /// no process runs on it (turning it off, its instances are gone already). Where the
    /// driver leaves the change pending, the error says how to reset per the architecture.
    async fn set_mig_mode(&mut self, gpu: u32, enabled: bool, cx: &Context) -> Result<NextRound, StepError> {
        let pods = cx.work.gpu(gpu).map(|w| w.whole_gpu_pods.clone()).unwrap_or_default();
        if enabled {
            let uuid = cx.inventory.gpus.iter().find(|g| g.index == gpu).map(|g| g.uuid.as_str());
            ensure_unclaimed(gpu, "the whole GPU".into(), uuid, cx)?;
        }
        if enabled && !pods.is_empty() {
            return Err(StepError::InUse {
                gpu,
                instance: "the whole GPU".into(),
                user: format!("pod {}", pods.join(", pod ")),
            });
        }
        let processes = self.nvml_call(move |n| n.gpu_processes(gpu)).await?;
        if !processes.is_empty() {
            let user = mig_mode::describe_processes(&processes);
            return Err(StepError::InUse { gpu, instance: "the whole GPU".into(), user });
        }
        let change = self.nvml_call(move |n| n.set_mig_mode(gpu, enabled)).await?;
        if let Some(inv) = cx.inventory.gpus.iter().find(|g| g.index == gpu) {
            self.mem.rules.remove(&inv.uuid);
        }
        if change.mode.current != enabled {
            let architecture = cx.models.get(&gpu).map(|m| m.architecture.as_str());
            // Never on a pass-through VM: the driver says the hypervisor must reset it.
            let resettable = mig_mode::needs_reset(architecture)
                && change.activation != Some(Reason::ResetRequired)
                && cx.disruption.gpu_reset_allowed;
            let uuid = cx.inventory.gpus.iter().find(|g| g.index == gpu).map(|g| g.uuid.clone());
            match (self.cfg.gpu_reset.clone(), uuid) {
                (Some(reset), Some(uuid)) if resettable => self.reset_gpu(gpu, &uuid, enabled, reset).await?,
                _ => {
                    let blocker = mig_mode::pending_blocker(gpu, architecture, change.activation.as_ref());
                    return Err(StepError::MigModePending { gpu, blocker });
                }
            }
        }
        let (reason, action, note) = match enabled {
            true => ("MigModeEnabled", "EnableMigMode", format!("GPU {gpu}: MIG mode on")),
            false => ("MigModeDisabled", "DisableMigMode", format!("GPU {gpu}: MIG mode off, a whole GPU")),
        };
        self.event(EventType::Normal, reason, action, note, None).await;
        Ok(NextRound::Continue)
    }

    /// Resets GPU `gpu` (and only it: it is idle, checked by the caller) so that its pending
    /// MIG mode takes effect, with the agent's own NVML session released around the reset. A
    /// failed reset undoes the pending change, so that no later reset or reboot flips the GPU.
    async fn reset_gpu(
        &mut self,
        gpu: u32,
        uuid: &str,
        enabled: bool,
        reset: Arc<dyn GpuReset>,
    ) -> Result<(), StepError> {
        tracing::info!(node = %self.cfg.node, gpu, uuid, "resetting the GPU so that its MIG mode change takes effect");
        self.nvml = Arc::new(Released);
        self.reopen = Some(reset.clone());
        let (target, r) = (uuid.to_string(), reset.clone());
        let outcome = tokio::task::spawn_blocking(move || r.reset(&target))
            .await
            .map_err(|e| StepError::Task(e.to_string()))?;
        self.reopen_nvml().await?;
        let mode = if enabled { "on" } else { "off" };
        match outcome {
            Ok(()) => {
                let note = format!("GPU {gpu} ({uuid}) reset: MIG mode {mode}");
                self.event(EventType::Normal, "GpuReset", "ResetGpu", note, None).await;
                Ok(())
            }
            Err(error) => {
                if let Err(e) = self.nvml_call(move |n| n.set_mig_mode(gpu, !enabled)).await {
                    tracing::warn!(node = %self.cfg.node, gpu, error = %e, "cannot undo the pending MIG mode change");
                }
                Err(StepError::GpuResetFailed { gpu, mode, error })
            }
        }
    }

    async fn verify(&mut self, cx: &Context) -> Result<NextRound, StepError> {
        let mut problems = Vec::new();
        let mut summary = Vec::new();
        for gpu in &cx.work.gpus {
            let Some(have) = cx.inventory.gpus.iter().find(|g| g.index == gpu.index) else { continue };
            let mut now: Vec<PlacedInstance> = have.instances.iter().map(MigInstance::placed).collect();
            now.sort();
            let mut target = gpu.target.clone();
            target.sort();
            if have.mig_mode.current == gpu.whole {
                let want = if gpu.whole { "off (a whole GPU)" } else { "on" };
                problems.push(format!("GPU {}: MIG mode should be {want}", gpu.index));
            }
            if now != target {
                let show =
                    |g: &[PlacedInstance]| g.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
                problems.push(format!("GPU {} has [{}], target [{}]", gpu.index, show(&now), show(&target)));
            }
            for i in have.instances.iter().filter(|i| i.uuid.is_none()) {
                problems.push(format!("GPU {}: {} has no MIG device", gpu.index, i.placed()));
            }
            let shown: Vec<String> = gpu.target.iter().map(|p| p.to_string()).collect();
            match gpu.whole {
                true => summary.push(format!("GPU {}: whole (MIG off)", gpu.index)),
                false => summary.push(format!("GPU {}: [{}]", gpu.index, shown.join(", "))),
            }
        }
        if !problems.is_empty() {
            return Err(StepError::Verify(problems.join("; ")));
        }
        self.event(EventType::Normal, "Repartitioned", "Verify", summary.join("; "), None).await;
        Ok(NextRound::Continue)
    }

    /// Restarts the device plugin by evicting its pods on this node; their DaemonSet brings
    /// them back, and a starting plugin enumerates the MIG devices anew. Eviction rather than
    /// delete: the agent needs no right to delete pods, and a budget on the plugin is honoured.
    async fn restart_device_plugin(&mut self) -> Result<NextRound, StepError> {
        let pods = self.device_plugin_pods().await?;
        if pods.is_empty() {
            return Err(StepError::NoDevicePlugin {
                node: self.cfg.node.clone(),
                selector: self.cfg.device_plugin_selector.clone(),
            });
        }
        let mut restarted = BTreeSet::new();
        for pod in &pods {
            if pod.metadata.deletion_timestamp.is_none() {
                if let EvictionOutcome::Refused { message } = eviction::evict(&self.client, pod).await? {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    return Err(StepError::DevicePluginRefused { pod: name, message });
                }
            }
            restarted.extend(pod.metadata.uid.clone());
        }
        self.mem.restarted_plugin = Some(restarted);
        Ok(NextRound::Continue)
    }

    async fn wait_for_allocatable(&mut self, cx: &mut Context) -> Result<NextRound, StepError> {
        let g = Some(cx.generation);
        let now = self.clock.now();
        let message =
            format!("waiting for the node's allocatable to show the new slices: {}", describe_mismatches(cx));
        conditions::set(
            &mut cx.status.conditions,
            MigNodeStatus::RECONFIGURING,
            true,
            "WaitForAllocatable",
            message,
            g,
            now,
        );
        self.write_status(&cx.status).await?;
        Ok(NextRound::Wait(self.cfg.poll_interval))
    }

    async fn ready(&mut self, mut cx: Context) -> Result<NextRound, StepError> {
        let g = Some(cx.generation);
        let now = self.clock.now();
        let was_ready = cx.status.phase == MigNodePhase::Ready;
        cx.status.phase = MigNodePhase::Ready;
        cx.status.step = None;
        let message = format!("the GPUs match spec generation {}", cx.generation);
        conditions::set(&mut cx.status.conditions, MigNodeStatus::READY, true, "Converged", message, g, now);
        conditions::set(&mut cx.status.conditions, MigNodeStatus::RECONFIGURING, false, "Idle", "", g, now);
        conditions::set(
            &mut cx.status.conditions,
            MigNodeStatus::DRAIN_BLOCKED,
            false,
            "NotDraining",
            "",
            g,
            now,
        );
        conditions::set(&mut cx.status.conditions, MigNodeStatus::FAILED, false, "Succeeded", "", g, now);
        self.write_status(&cx.status).await?;
        self.mem.last_round_ok = true;
        self.mem.evictions.clear();
        self.mem.announced.clear();
        self.mem.restarted_plugin = None;
        if !was_ready {
            let note = format!("MIG geometry matches spec generation {}", cx.generation);
            self.event(EventType::Normal, "Ready", "Reconfigure", note, None).await;
        }
        Ok(NextRound::Wait(self.cfg.poll_interval))
    }

    /// The GPU Operator's labels refuse the change: nothing on the node is touched; the
    /// `Refused` condition (set every round) says why, and one event per refusal announces it.
    /// The phase is `Failed`, with the refusal as the reason, so that a plan that meets a node
    /// refused after it was planned reports that node failed rather than taking it for done.
    async fn refused(&mut self, mut cx: Context) -> Result<NextRound, StepError> {
        let Some(refusal) = cx.refusal.clone() else { return Ok(NextRound::Wait(self.cfg.poll_interval)) };
        let (g, now, reason) = (Some(cx.generation), self.clock.now(), refusal.reason());
        let message = format!("the spec is not applied: {refusal}");
        let status = &mut cx.status;
        status.phase = MigNodePhase::Failed;
        conditions::set(&mut status.conditions, MigNodeStatus::READY, false, reason, message.clone(), g, now);
        conditions::set(&mut status.conditions, MigNodeStatus::FAILED, true, reason, message.clone(), g, now);
        self.write_status(&cx.status).await?;
        // Not a success: the Failed condition stays until the change can go ahead.
        self.mem.last_round_ok = false;
        if self.mem.refusal_announced.as_deref() != Some(message.as_str()) {
            self.event(EventType::Warning, reason, "Preflight", message.clone(), None).await;
            self.mem.refusal_announced = Some(message);
        }
        Ok(NextRound::Wait(self.cfg.poll_interval))
    }

    /// The drain ran out of time: lift our cordon (recorded first, like every step), forget the
    /// drain, and fail so that the failure is reported and retried with backoff.
    async fn drain_timed_out(&mut self, mut cx: Context) -> Result<NextRound, StepError> {
        let waiting = crate::steps::drain::waiting_for(&cx);
        self.mem.evictions.clear();
        self.mem.announced.clear();
        if cx.cordon.marked() {
            let (step, _) = self.record(&Next::Uncordon, &mut cx).await?;
            self.hook(StepPoint::Recorded(step.clone())).await;
            self.uncordon(&cx).await?;
            self.hook(StepPoint::Taken(step)).await;
        }
        Err(StepError::DrainTimeout { timeout: cx.disruption.settings.timeout, waiting })
    }
}

fn drain_timed_out(status: &MigNodeStatus) -> bool {
    conditions::get(&status.conditions, MigNodeStatus::FAILED)
        .is_some_and(|c| c.status == "True" && c.reason == "DrainTimeout")
}

fn describe_mismatches(cx: &Context) -> String {
    if cx.mismatches.is_empty() {
        "allocatable agrees, waiting for a restarted device plugin pod to be ready".into()
    } else {
        cx.mismatches.join("; ")
    }
}

/// Never destroy what is in use: the decision was made on this round's inventory, and this
/// guards against a decision that overlooked a user.
fn ensure_unused(gpu: u32, instance: &MigInstance) -> Result<(), StepError> {
    if !instance.in_use() {
        return Ok(());
    }
    let user = match &instance.pod {
        Some(pod) => format!("pod {pod}"),
        None => format!("{} process(es) outside Kubernetes", instance.processes),
    };
    Err(StepError::InUse { gpu, instance: instance.placed().to_string(), user })
}

/// On a static-MIG DRA node, an allocated ResourceClaim holds its device from the moment
/// kube-scheduler allocates it, before any pod runs with it: the device is not destroyed while
/// a claim names it (checked again right before the destroy, from claims read this round).
fn ensure_unclaimed(gpu: u32, instance: String, uuid: Option<&str>, cx: &Context) -> Result<(), StepError> {
    match uuid.and_then(|u| cx.claimed.get(u)) {
        Some(claim) => Err(StepError::InUse {
            gpu,
            instance,
            user: format!("ResourceClaim {claim}, allocated to it (its pod may not run yet)"),
        }),
        None => Ok(()),
    }
}

/// NVIDIA devices the kubelet assigned but the inventory could not place may be on any GPU:
/// "in use, unknown", so nothing is destroyed until they are understood.
fn ensure_no_unknown_devices(gpu: u32, cx: &Context) -> Result<(), StepError> {
    if cx.inventory.unmatched.is_empty() {
        return Ok(());
    }
    let devices: Vec<String> = cx
        .inventory
        .unmatched
        .iter()
        .map(|a| format!("{} {} of pod {}", a.resource, a.device_id, a.pod_ref()))
        .collect();
    Err(StepError::UnknownDeviceInUse { gpu, devices: devices.join(", ") })
}

/// NVML refused a destroy as in use although no pod and no process holds the instance:
/// another NVML client has the GPU open. Said with the processes holding NVIDIA device files
/// (when the agent can see them), instead of an NVML error retried as if it might pass.
fn held_by_client(e: StepError, gpu: u32, instance: &MigInstance) -> StepError {
    let StepError::Nvml(n) = &e else { return e };
    if !n.is_in_use() || instance.in_use() {
        return e;
    }
    let holders = device_holders(Path::new("/proc"), "/dev/nvidia", std::process::id());
    let holders = if holders.is_empty() {
        "no process the agent can see has /dev/nvidia* open (it sees the node's processes only with \
         hostPID: true)"
            .to_string()
    } else {
        holders.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    };
    StepError::HeldByClient { gpu, instance: instance.placed().to_string(), holders }
}

/// A destroy that finds nothing to destroy already happened (before a crash, say).
fn gone_is_done(e: StepError) -> Result<(), StepError> {
    match &e {
        StepError::Nvml(n) if n.reason() == Some(&Reason::NotFound) => Ok(()),
        _ => Err(e),
    }
}

/// NVML's profile id and the placement for a planned instance, from the GPU's rules (which
/// carry NVML's own ids and sizes).
fn placement_of(
    gpu: u32,
    placed: &PlacedInstance,
    cx: &Context,
) -> Result<(NvmlProfileId, Placement), StepError> {
    let model = cx
        .models
        .get(&gpu)
        .ok_or_else(|| StepError::Placement { gpu, what: "no rules for this GPU".into() })?;
    let id = model.profile(&placed.profile).ok_or_else(|| StepError::Placement {
        gpu,
        what: format!("the GPU does not offer profile {}", placed.profile),
    })?;
    let profile = &model.profiles[id];
    let profile_id = profile.nvidia_smi_profile_id.ok_or_else(|| StepError::Placement {
        gpu,
        what: format!("NVML reported no profile id for {}; is MIG mode on?", placed.profile),
    })?;
    Ok((NvmlProfileId(profile_id), Placement { start: placed.start as u32, size: profile.size as u32 }))
}
