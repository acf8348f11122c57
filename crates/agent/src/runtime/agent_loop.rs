//! The agent's loop: one round at a time (observe, decide, record, act), waiting between
//! rounds for a change it watches or a poll, and backing off after failures.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use geometer_solver::catalog::{Catalog, GpuModel};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::Patch;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource};
use thiserror::Error;

use crate::decide::gpu_diff::WorkError;
use crate::nvml::reset::GpuReset;
use crate::nvml::{NvmlBackend, NvmlError};
use crate::observe::sources::{Clock, DeviceAssignments, StepHook};
use crate::observe::watch::{self, Wake};
use crate::runtime::backoff::Backoff;
use crate::runtime::conditions;
use crate::runtime::metrics::AgentMetrics;
use crate::runtime::status::status_patch;
use crate::steps::advertise::DEFAULT_DEVICE_PLUGIN_SELECTOR;
use crate::steps::eviction::DrainSettings;
use crate::steps::operands::OperandMode;
use geometer_api::{CatalogDisagreement, MigNode, MigNodePhase, MigNodeStatus};

/// How the agent behaves. [`AgentConfig::new`] gives the defaults `geometer agent run` uses.
#[derive(Clone)]
pub struct AgentConfig {
    /// The node (and MigNode) this agent manages.
    pub node: String,
    pub catalog: Arc<Catalog>,
    pub drain: DrainSettings,
    /// Label selector of the NVIDIA device plugin pods.
    pub device_plugin_selector: String,
    /// Namespace of the device plugin pods; `None`: any namespace.
    pub device_plugin_namespace: Option<String>,
    /// Label selector of the kubelet plugin pods of NVIDIA's DRA driver, restarted after a
    /// change on a static-MIG DRA node so that it publishes the new devices.
    pub dra_plugin_selector: String,
    /// Namespace of the DRA driver's kubelet plugin pods; `None`: any namespace.
    pub dra_plugin_namespace: Option<String>,
    /// Longest wait for the node's allocatable to show the new slices after the plugin restart.
    pub advertise_timeout: Duration,
    /// How often NVML and the kubelet are read again when nothing the agent watches changes.
    pub poll_interval: Duration,
    /// Retries after a failed step.
    pub backoff: Backoff,
    /// Retries of an eviction a PodDisruptionBudget refused.
    pub eviction_backoff: Backoff,
    /// Longest time between two publications of unchanged usage summaries (right-sizing);
    /// a summary that changes by a histogram bucket is published at once.
    pub usage_publish_interval: Duration,
    /// Whether the GPU Operator's operands are paused around a change (`Auto`: on nodes with
    /// its deploy labels).
    pub operands: OperandMode,
    /// Longest wait for the paused operands' pods to leave the node.
    pub operand_timeout: Duration,
    /// Longest time the operands stay paused; a window open longer is closed and the change
    /// retried later.
    pub max_pause: Duration,
    /// How to reset a GPU whose MIG mode changes only through a reset (Ampere), where the
    /// policy allows it (`--allow-gpu-reset`); `None`: never reset, say what to do instead.
    pub gpu_reset: Option<Arc<dyn GpuReset>>,
}

impl AgentConfig {
    pub fn new(node: impl Into<String>) -> AgentConfig {
        AgentConfig {
            node: node.into(),
            catalog: Arc::new(Catalog::builtin().clone()),
            drain: DrainSettings::default(),
            device_plugin_selector: DEFAULT_DEVICE_PLUGIN_SELECTOR.to_string(),
            device_plugin_namespace: None,
            dra_plugin_selector: crate::observe::dra::DEFAULT_DRA_PLUGIN_SELECTOR.to_string(),
            dra_plugin_namespace: None,
            advertise_timeout: Duration::from_secs(300),
            poll_interval: Duration::from_secs(10),
            backoff: Backoff::default(),
            eviction_backoff: Backoff::new(Duration::from_secs(5), Duration::from_secs(60)),
            usage_publish_interval: Duration::from_secs(300),
            operands: OperandMode::Auto,
            // mig-manager's wait for each operand (NVIDIA/mig-parted pkg/mig/reconfigure).
            operand_timeout: Duration::from_secs(300),
            max_pause: Duration::from_secs(900),
            gpu_reset: None,
        }
    }
}

/// Why a round failed. Each becomes the `Failed` condition's reason and message.
#[derive(Debug, Error)]
pub enum StepError {
    #[error(transparent)]
    Nvml(#[from] NvmlError),
    #[error("cannot read which pods hold which GPU devices from the kubelet: {0}")]
    PodResources(String),
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("spec cannot be applied: {0}")]
    Spec(#[from] WorkError),
    #[error("node {node} does not exist; the agent must run on a node of the cluster it talks to (--node)")]
    NoNode { node: String },
    #[error("the drain did not finish within {timeout:?}: {waiting}. Nothing was changed on the GPUs; the agent tries again later")]
    DrainTimeout { timeout: Duration, waiting: String },
    #[error("the device plugin did not advertise the new slices within {timeout:?} ({mismatches}); restarting it again")]
    AdvertiseTimeout { timeout: Duration, mismatches: String },
    #[error("no NVIDIA device plugin pod on node {node} matches the label selector {selector:?}; set --device-plugin-selector to the labels of its DaemonSet's pods")]
    NoDevicePlugin { node: String, selector: String },
    #[error("the eviction of device plugin pod {pod} (to make it advertise the new slices) was refused: {message}")]
    DevicePluginRefused { pod: String, message: String },
    #[error("GPU {gpu}: MIG mode was turned on but is not active yet: {blocker}")]
    MigModePending { gpu: u32, blocker: String },
    #[error("GPU {gpu}: instance {instance} is in use ({user}); it is never destroyed while in use")]
    InUse { gpu: u32, instance: String, user: String },
    #[error("GPU {gpu}: nothing is destroyed on this node while the kubelet reports NVIDIA devices the agent cannot match to a GPU or MIG instance, as they may be on it: {devices}. Check the device plugin's id strategy (uuid or index) and its sharing settings")]
    UnknownDeviceInUse { gpu: u32, devices: String },
    #[error("GPU {gpu}: NVML refuses to destroy instance {instance} as in use, but no pod and no process uses it: another NVML client holds the GPU (processes with NVIDIA devices open: {holders}). Stop or pause it (NVIDIA's mig-manager pauses the device plugin, GPU feature discovery, dcgm-exporter and DCGM around a change, and so does this agent on a GPU Operator node); the agent tries again")]
    HeldByClient { gpu: u32, instance: String, holders: String },
    #[error("GPU {gpu}: {what}")]
    Placement { gpu: u32, what: String },
    #[error("verification failed: {0}")]
    Verify(String),
    #[error("MigNode {node} cannot be read: {error}. Nothing on the node changes until it can; fix or delete the MigNode (the agent creates a new one)")]
    UnreadableMigNode { node: String, error: geometer_api::decode::DecodeError },
    #[error("an NVML call did not complete: {0}")]
    Task(String),
    #[error("{0}")]
    Refused(geometer_api::gpu_operator::Refusal),
    #[error("the GPU Operator's paused operands did not leave the node within {timeout:?}: {waiting}. Their labels were restored and nothing was changed on the GPUs; the agent tries again later")]
    OperandsTimeout { timeout: Duration, waiting: String },
    #[error("the GPU Operator's operands were paused for longer than {max:?}; their labels were restored and the change is retried later, from the GPUs as they are now")]
    PauseTooLong { max: Duration },
    #[error("GPU {gpu}: the reset that makes MIG mode {mode} take effect failed: {error}. The pending change was undone, so no later reset or reboot flips the GPU; the agent tries again")]
    GpuResetFailed { gpu: u32, mode: &'static str, error: String },
}

impl StepError {
    /// CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            StepError::Nvml(_) => "NvmlError",
            StepError::PodResources(_) => "PodResourcesError",
            StepError::Kube(_) => "ApiError",
            StepError::Spec(_) => "InvalidSpec",
            StepError::NoNode { .. } => "NodeNotFound",
            StepError::DrainTimeout { .. } => "DrainTimeout",
            StepError::AdvertiseTimeout { .. } => "AdvertiseTimeout",
            StepError::NoDevicePlugin { .. } => "NoDevicePlugin",
            StepError::DevicePluginRefused { .. } => "DevicePluginRestartRefused",
            StepError::MigModePending { .. } => "MigModePendingReset",
            StepError::InUse { .. } => "InstanceInUse",
            StepError::UnknownDeviceInUse { .. } => "UnknownDeviceInUse",
            StepError::HeldByClient { .. } => "GpuHeldByClient",
            StepError::Placement { .. } => "PlacementUnknown",
            StepError::Verify(_) => "VerifyFailed",
            StepError::Task(_) => "NvmlError",
            StepError::UnreadableMigNode { .. } => "Unreadable",
            StepError::Refused(refusal) => refusal.reason(),
            StepError::OperandsTimeout { .. } => "OperandsTimeout",
            StepError::PauseTooLong { .. } => "PauseWindowTooLong",
            StepError::GpuResetFailed { .. } => "GpuResetFailed",
        }
    }
}

/// What a round asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextRound {
    /// Progress was made: decide again at once.
    Continue,
    /// Waiting for something outside the agent: look again after this long, or sooner when a
    /// watched object changes.
    Wait(Duration),
}

/// The rules of one GPU as NVML corrects the catalog, read once per GPU.
#[derive(Debug, Clone)]
pub(crate) struct GpuRules {
    pub model: GpuModel,
    pub disagreements: Vec<CatalogDisagreement>,
}

/// A PDB-refused eviction waiting for its retry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EvictionRetry {
    pub refusals: u32,
    pub next_try: jiff::Timestamp,
}

/// What the agent keeps between rounds. Losing it (a restart) costs at most a repeated, safe
/// action: everything that matters for safety is in status or observed again.
#[derive(Default)]
pub(crate) struct Memory {
    /// By GPU UUID.
    pub rules: BTreeMap<String, GpuRules>,
    pub failures: u32,
    /// The last round succeeded (so a `Failed` condition from before can be cleared).
    pub last_round_ok: bool,
    /// By pod ref.
    pub evictions: BTreeMap<String, EvictionRetry>,
    /// Pods whose block was announced with an event during this drain.
    pub announced: BTreeSet<String>,
    /// UIDs of the device plugin pods deleted by the last restart.
    pub restarted_plugin: Option<BTreeSet<String>>,
    /// Whether the cluster serves DRA (`resource.k8s.io/v1`), asked once.
    pub dra_served: Option<bool>,
    /// How the node's GPUs were advertised in the last round.
    pub stack: Option<geometer_api::DeviceStack>,
    /// The MigNode as last read or written.
    pub mignode: Option<MigNode>,
    /// The unreadable MigNode last reported (uid, generation and field), so that each is
    /// reported once, not on every retry.
    pub unreadable_reported: Option<(String, i64, String)>,
    /// Whether that MigNode's `Ready=False, Unreadable` condition is written.
    pub unreadable_marked: bool,
    /// What pods use of the whole GPUs they hold, summarised across rounds.
    pub usage: crate::observe::usage::UsageBook,
    /// This agent opened the pause window in force (one it finds open otherwise is an
    /// earlier agent's, and is closed before anything else).
    pub window_mine: bool,
    /// The preflight refusal last announced with an event.
    pub refusal_announced: Option<String>,
}

/// The node agent.
pub struct Agent {
    pub(crate) cfg: AgentConfig,
    pub(crate) client: kube::Client,
    pub(crate) nvml: Arc<dyn NvmlBackend>,
    pub(crate) devices: Arc<dyn DeviceAssignments>,
    pub(crate) hook: Option<StepHook>,
    pub(crate) recorder: Recorder,
    pub(crate) clock: Clock,
    pub(crate) metrics: Arc<AgentMetrics>,
    pub(crate) mem: Memory,
    /// Set while the NVML session is released for a GPU reset and not open again yet.
    pub(crate) reopen: Option<Arc<dyn GpuReset>>,
}

impl Agent {
    pub fn new(
        cfg: AgentConfig,
        client: kube::Client,
        nvml: Arc<dyn NvmlBackend>,
        devices: Arc<dyn DeviceAssignments>,
    ) -> Agent {
        let reporter = Reporter { controller: "geometer-agent".into(), instance: Some(cfg.node.clone()) };
        let recorder = Recorder::new(client.clone(), reporter);
        Agent {
            cfg,
            client,
            nvml,
            devices,
            hook: None,
            recorder,
            clock: Clock::start(),
            metrics: Arc::new(AgentMetrics::new()),
            mem: Memory::default(),
            reopen: None,
        }
    }

    /// Runs `hook` at every step boundary (see [`StepHook`]).
    pub fn with_hook(mut self, hook: StepHook) -> Agent {
        self.hook = Some(hook);
        self
    }

    /// Counts into `metrics` (served by `geometer agent run` on `/metrics`).
    pub fn with_metrics(mut self, metrics: Arc<AgentMetrics>) -> Agent {
        self.metrics = metrics;
        self
    }

    /// Works towards the MigNode's spec forever. Failures are reported in status and retried;
    /// nothing here returns.
    pub async fn run(self) {
        self.run_until(std::future::pending()).await
    }

    /// [`Agent::run`] until `stop` completes (SIGTERM), between two rounds: a round in progress
    /// (an NVML call) finishes first. A pause of the GPU Operator's operands is closed before
    /// it returns, as after every failure.
    pub async fn run_until(mut self, stop: impl std::future::Future<Output = ()>) {
        let wake = Wake::default();
        let _watchers = watch::spawn(self.client.clone(), &self.cfg.node, wake.clone());
        let mut stop = std::pin::pin!(stop);
        loop {
            let outcome = self.round().await;
            if futures::FutureExt::now_or_never(stop.as_mut()).is_some() {
                break;
            }
            let stopped = match outcome {
                Ok(NextRound::Continue) => {
                    self.mem.failures = 0;
                    tokio::task::yield_now().await;
                    false
                }
                Ok(NextRound::Wait(pause)) => {
                    self.mem.failures = 0;
                    tokio::select! {
                        _ = wake.any.notified() => false,
                        _ = tokio::time::sleep(pause) => false,
                        _ = stop.as_mut() => true,
                    }
                }
                Err(error) => {
                    self.mem.failures += 1;
                    self.mem.last_round_ok = false;
                    self.metrics.failed(error.reason());
                    // Nothing stays paused while the agent backs off.
                    self.close_any_window(error.reason()).await;
                    let delay = self.cfg.backoff.delay(self.mem.failures);
                    self.report_failure(&error, delay).await;
                    // Only a new spec cuts the backoff short: our own status writes and the
                    // node's heartbeats must not turn it into a busy loop.
                    tokio::select! {
                        _ = wake.spec.notified() => false,
                        _ = tokio::time::sleep(delay) => false,
                        _ = stop.as_mut() => true,
                    }
                }
            };
            if stopped {
                break;
            }
        }
        self.close_any_window("the agent is stopping").await;
    }

    /// Opens NVML again after a GPU reset released it (retried each round until it opens).
    pub(crate) async fn reopen_nvml(&mut self) -> Result<(), StepError> {
        let Some(reset) = self.reopen.clone() else { return Ok(()) };
        let opened = tokio::task::spawn_blocking(move || reset.reopen())
            .await
            .map_err(|e| StepError::Task(e.to_string()))??;
        self.nvml = opened;
        self.reopen = None;
        Ok(())
    }

    pub(crate) fn mignodes(&self) -> Api<MigNode> {
        Api::all(self.client.clone())
    }

    pub(crate) fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub(crate) fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Writes `status` if it differs from what the server has; remembers the result.
    pub(crate) async fn write_status(&mut self, status: &MigNodeStatus) -> Result<(), StepError> {
        self.metrics.phase(status.phase);
        let server = self.mem.mignode.as_ref().and_then(|m| m.status.as_ref());
        let Some(patch) = status_patch(server, status) else { return Ok(()) };
        let updated = self
            .mignodes()
            .patch_status(&self.cfg.node, &crate::patch_params(), &Patch::Merge(&patch))
            .await?;
        self.mem.mignode = Some(updated);
        Ok(())
    }

    /// Publishes an event about the MigNode (and, when given, about a pod too). Events are
    /// best effort: failing to publish one never fails a step.
    pub(crate) async fn event(
        &self,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        pod: Option<&Pod>,
    ) {
        if let Some(mignode) = &self.mem.mignode {
            self.publish(type_, reason, action, note.clone(), &mignode.object_ref(&())).await;
        }
        if let Some(pod) = pod {
            self.publish(type_, reason, action, note, &pod.object_ref(&())).await;
        }
    }

    /// Publishes one event about `reference`, best effort.
    pub(crate) async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        reference: &ObjectReference,
    ) {
        // events.k8s.io/v1 refuses notes over 1 KiB.
        let note = Some(geometer_api::limits::cut(&note, 1024));
        let event = Event { type_, reason: reason.into(), note, action: action.into(), secondary: None };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::warn!(error = %e, reason, kind = ?reference.kind, "could not publish event");
        }
    }

    /// Marks the last attempt failed: phase `Failed`, a `Failed` condition that says what went
    /// wrong, when the retry comes, and (if it is ours) why the node stays cordoned.
    async fn report_failure(&mut self, error: &StepError, retry_in: Duration) {
        tracing::warn!(node = %self.cfg.node, error = %error, retry_in = ?retry_in, "reconfiguration step failed");
        if let StepError::UnreadableMigNode { .. } = error {
            // Reported on the object itself when it was read; its status cannot be trusted.
            return;
        }
        if self.mem.mignode.is_none() {
            match self.mignodes().get_opt(&self.cfg.node).await {
                Ok(found) => self.mem.mignode = found,
                Err(e) => tracing::warn!(error = %e, "cannot read the MigNode to report the failure"),
            }
        }
        let Some(mignode) = self.mem.mignode.clone() else { return };
        let generation = mignode.metadata.generation;
        let mut status = mignode.status.clone().unwrap_or_default();
        if let (StepError::Nvml(_), Some(step)) = (error, &status.step) {
            self.metrics.nvml_error(step.action);
        }
        let now = self.clock.now();
        let mut message =
            format!("{error}. Retrying in {}s (attempt {}).", retry_in.as_secs().max(1), self.mem.failures);
        if status.cordoned_by_geometer {
            message.push_str(" The node stays cordoned by Geometer until the change completes or is undone.");
        }
        if let Some(progress) = crate::runtime::status::half_built_summary(&mignode.spec, &status) {
            message.push(' ');
            message.push_str(&progress);
        }
        status.phase = MigNodePhase::Failed;
        conditions::set(
            &mut status.conditions,
            MigNodeStatus::FAILED,
            true,
            error.reason(),
            message.clone(),
            generation,
            now,
        );
        conditions::set(
            &mut status.conditions,
            MigNodeStatus::READY,
            false,
            "Failed",
            "the last reconfiguration step failed; see the Failed condition",
            generation,
            now,
        );
        if let Err(e) = self.write_status(&status).await {
            tracing::warn!(error = %e, "cannot write the failure to status");
        }
        self.event(EventType::Warning, error.reason(), "Reconfigure", message, None).await;
    }
}
