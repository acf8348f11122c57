//! One round of the agent: read everything fresh (MigNode, Node, NVML, the kubelet, the pods
//! that must leave, the device plugin), publish the inventory, and decide the next step.

use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PostParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource};

use crate::decide::drain_rules::DrainRules;
use crate::decide::gpu_diff::{model_of, GpuModels, NodeWork};
use crate::decide::next_step::{self, Facts};
use crate::observe::inventory::{read_inventory, Inventory};
use crate::observe::usage;
use crate::observe::{catalog_check, dra, pod_resources};
use crate::runtime::agent_loop::{Agent, GpuRules, NextRound, StepError};
use crate::runtime::{conditions, status};
use crate::steps::advertise;
use crate::steps::cordon::CordonState;
use crate::steps::eviction::{classify, PodDrain};
use crate::steps::operands::{self, Operands};
use geometer_api::decoded::Decoded;
use geometer_api::gpu_operator::{self, PausedOperands, Refusal};
use geometer_api::{
    AgentStep, CatalogDisagreement, DeviceStack, MigNode, MigNodePhase, MigNodeSpec, MigNodeStatus,
    StepAction,
};
use geometer_solver::PodKey;

/// Everything a step may need, read in this round.
pub(crate) struct Context {
    pub node: Node,
    pub generation: i64,
    pub status: MigNodeStatus,
    pub inventory: Inventory,
    pub models: GpuModels,
    pub work: NodeWork,
    pub cordon: CordonState,
    /// Each pod that must leave, with where it stands.
    pub pods: Vec<(String, PodDrain)>,
    /// How allocatable differs from the GPUs (empty: it agrees).
    pub mismatches: Vec<String>,
    /// The rules the drain follows.
    pub disruption: DrainRules,
    /// The pause of the GPU Operator's operands in force, if any.
    pub pause: Option<PausedOperands>,
    /// Why the GPU Operator's labels refuse a change now, if they do.
    pub refusal: Option<Refusal>,
    /// The GPU Operator's operands on the node.
    pub operands: Operands,
    /// On a static-MIG DRA node: device UUID -> the allocated ResourceClaim naming it.
    pub claimed: std::collections::BTreeMap<String, String>,
}

impl Agent {
    pub(crate) async fn round(&mut self) -> Result<NextRound, StepError> {
        self.reopen_nvml().await?;
        let node = self
            .nodes()
            .get_opt(&self.cfg.node)
            .await?
            .ok_or_else(|| StepError::NoNode { node: self.cfg.node.clone() })?;
        let mignode = match self.read_mignode().await? {
            Some(mignode) => mignode,
            None => self.create_mignode(&node).await?,
        };
        self.mem.mignode = Some(mignode.clone());
        let generation = mignode.metadata.generation.unwrap_or(0);
        let cordon = CordonState::of(&node);
        let slices = self.node_slices().await?;
        let inventory = self.read_inventory(slices.as_deref()).await?;
        let (models, disagreements) = self.gpu_models(&inventory).await?;

        let now = self.clock.now();
        let mut status = mignode.status.clone().unwrap_or_default();
        let pause = operands::record_of(&node, status.paused_operands.as_ref());
        if let Some(record) = &pause {
            if self.close_window_if_over(&node, record, &mut status, now).await? {
                return Ok(NextRound::Continue);
            }
        }
        let work = NodeWork::plan(&mignode.spec.gpus, &inventory.gpus, &models);
        let gpus = work.as_ref().map(|w| w.gpus.as_slice()).unwrap_or_default();
        // Turning MIG mode on removes the whole-GPU device; turning it off follows the destroys.
        let destroys = gpus.iter().any(|g| !g.destroy.is_empty() || g.enable_mig);
        let changes = destroys || gpus.iter().any(|g| !g.create.is_empty() || g.disable_mig);
        let dra = self.read_dra(&node, slices.as_deref(), destroys).await?;
        status.device_stack = Some(dra.stack);
        let refusal = gpu_operator::preflight(&operands::labels(&node), pause.as_ref())
            .err()
            .or_else(|| dra_refusal(dra.stack, changes));
        self.observe_into(&mut status, &inventory, disagreements, cordon, generation, now);
        preflight_condition(&mut status, refusal.as_ref(), generation, now);
        self.measure_into(&mut status, &inventory, now).await;
        if let (DeviceStack::DraDynamicMig, Some(compaction)) = (dra.stack, &mignode.spec.compaction) {
            self.compact(compaction, now).await?;
        }
        let work = match work {
            Ok(work) => work,
            Err(e) => {
                self.write_status(&status).await?;
                return Err(e.into());
            }
        };

        let last = status.step.clone();
        let last_action = last.as_ref().map(|s| s.action);
        let failed = status.phase == MigNodePhase::Failed;
        let must_leave = !work.pods_to_evict().is_empty()
            || work.gpus.iter().any(|g| g.busy_without_pod().next().is_some());
        // The policy's rules are read when a drain or a MIG mode change (a GPU reset) needs them.
        let mode_changes = work.gpus.iter().any(|g| g.enable_mig || g.disable_mig);
        let disruption = if must_leave || mode_changes || last_action == Some(StepAction::Evict) {
            self.disruption(&mignode.spec).await
        } else {
            DrainRules {
                settings: self.cfg.drain.clone(),
                eviction_allowed: true,
                source: "agent flags".into(),
                gpu_reset_allowed: false,
            }
        };
        let pods = self.pods_to_leave(&work, &disruption, now).await?;
        let plugin_pods = match last_action {
            Some(StepAction::RestartDevicePlugin | StepAction::WaitForAllocatable) => {
                self.device_plugin_pods().await?
            }
            _ => Vec::new(),
        };
        let fresh_plugin: Vec<&Pod> = plugin_pods.iter().filter(|p| self.is_fresh_plugin(p)).collect();
        let operands = self.operands(&node, pause.as_ref()).await?;
        let mismatches = match dra.is_static_dra() {
            true => crate::observe::dra::mismatches(
                &crate::observe::dra::expected_uuids(&inventory.gpus),
                dra.published.as_ref(),
            ),
            false => {
                advertise::mismatches(&advertise::expected(&inventory.gpus), &advertise::advertised(&node))
            }
        };
        let facts = Facts {
            work: &work,
            cordon,
            last_step: last_action,
            drain_blocked: pods.iter().any(|(_, p)| p.blocks()),
            plugin_restarted: self.mem.restarted_plugin.is_some(),
            advertised: mismatches.is_empty() && fresh_plugin.iter().any(|p| advertise::plugin_ready(p)),
            expired: self.expired(last.as_ref(), &disruption, now),
            failed,
            operands: &operands,
            refused: refusal.is_some(),
        };
        let next = next_step::next(&facts);
        tracing::debug!(node = %self.cfg.node, ?next, "decided");
        let cx = Context {
            node,
            generation,
            status,
            inventory,
            models,
            work,
            cordon,
            pods,
            mismatches,
            disruption,
            pause,
            refusal,
            operands,
            claimed: dra.claimed,
        };
        self.take(next, cx).await
    }

    /// Closes a pause window that must not stay open, before anything is decided: one an
    /// earlier agent left (killed inside it), one a driver upgrade has paused on top of, and
    /// one open longer than `max_pause`. The first starts the round again (`true`); the others
    /// fail it (reported, retried with backoff).
    async fn close_window_if_over(
        &mut self,
        node: &Node,
        record: &PausedOperands,
        status: &mut MigNodeStatus,
        now: Timestamp,
    ) -> Result<bool, StepError> {
        let failure = if !self.mem.window_mine {
            None
        } else if let Some(upgrade) = gpu_operator::upgrade_started(&operands::labels(node)) {
            Some(StepError::Refused(upgrade))
        } else if self.window_overdue(record, now) {
            Some(StepError::PauseTooLong { max: self.cfg.max_pause })
        } else {
            return Ok(false);
        };
        self.close_window(node, record, status).await?;
        match failure {
            Some(error) => Err(error),
            None => {
                tracing::info!(node = %self.cfg.node, "closed the operand pause window an earlier agent left open");
                Ok(true)
            }
        }
    }

    /// This node's MigNode, if it exists. One the agent cannot decode (stored under an older,
    /// looser CRD, or written by hand) stops the round: the agent never acts on a spec it
    /// could not read. It is reported once per generation and field with a Warning event on
    /// the object and a `Ready=False` condition (reason `Unreadable`), both naming the field
    /// and value (the log line names them too, never the body).
    async fn read_mignode(&mut self) -> Result<Option<MigNode>, StepError> {
        let api: Api<Decoded<MigNode>> = Api::all(self.client.clone());
        let found = api.get_opt(&self.cfg.node).await?;
        self.metrics.set_unreadable("MigNode", matches!(found, Some(Decoded::Unreadable(_))));
        let unreadable = match found {
            None => return Ok(None),
            Some(Decoded::Read(mignode)) => return Ok(Some(Arc::unwrap_or_clone(mignode))),
            Some(Decoded::Unreadable(unreadable)) => unreadable,
        };
        self.mem.mignode = None;
        let error =
            StepError::UnreadableMigNode { node: self.cfg.node.clone(), error: unreadable.error.clone() };
        // Keyed on the generation, not the resource version: writing the condition below
        // changes the resource version, and must not make the object look new.
        let seen = (
            unreadable.meta.uid.clone().unwrap_or_default(),
            unreadable.meta.generation.unwrap_or_default(),
            unreadable.error.field.clone(),
        );
        if self.mem.unreadable_reported.as_ref() != Some(&seen) {
            let reference = Decoded::<MigNode>::Unreadable(unreadable).object_ref(&());
            self.publish(EventType::Warning, error.reason(), "Read", error.to_string(), &reference).await;
            self.mem.unreadable_reported = Some(seen);
            self.mem.unreadable_marked = false;
        }
        // The condition is retried on its own: a failed write must not repeat the event.
        if !self.mem.unreadable_marked {
            match self.mark_unreadable(error.to_string()).await {
                Ok(()) => self.mem.unreadable_marked = true,
                Err(e) => {
                    tracing::warn!(node = %self.cfg.node, error = %e, "cannot set the Ready condition of an unreadable MigNode")
                }
            }
        }
        Err(error)
    }

    /// Sets `Ready=False` (reason `Unreadable`) on a MigNode that does not decode. A merge
    /// patch replaces the conditions list whole, so the list is read raw first and every
    /// condition in it that still reads is kept; the patch carries the resource version read,
    /// so a concurrent write makes it fail (409) and it is tried again next round.
    async fn mark_unreadable(&self, message: String) -> Result<(), kube::Error> {
        let resource = ApiResource::erase::<MigNode>(&());
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let raw = api.get(&self.cfg.node).await?;
        let mut conditions = status::readable_conditions(raw.data.pointer("/status/conditions"));
        let now = self.clock.now();
        conditions::set(&mut conditions, MigNodeStatus::READY, false, "Unreadable", message, None, now);
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": raw.metadata.resource_version},
            "status": {"conditions": conditions},
        });
        api.patch_status(&self.cfg.node, &crate::patch_params(), &Patch::Merge(patch)).await?;
        Ok(())
    }

    /// The agent creates its node's MigNode (empty spec: nothing to change) so that the
    /// controller sees the inventory. It is owned by the Node, so it goes when the node goes.
    async fn create_mignode(&self, node: &Node) -> Result<MigNode, StepError> {
        let mut mignode = MigNode::new(&self.cfg.node, MigNodeSpec::default());
        mignode.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.cfg.node.clone(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            ..Default::default()
        }]);
        match self
            .mignodes()
            .create(
                &PostParams { field_manager: Some(crate::FIELD_MANAGER.into()), ..Default::default() },
                &mignode,
            )
            .await
        {
            Ok(created) => {
                tracing::info!(node = %self.cfg.node, "created the MigNode for this node");
                Ok(created)
            }
            // Created meanwhile (by a previous agent, or the controller): use that one.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(self.mignodes().get(&self.cfg.node).await?),
            Err(e) => Err(e.into()),
        }
    }

    /// NVML's GPUs and who holds each device; a DRA device the kubelet reports by name is
    /// found by its UUID in the node's `slices`.
    async fn read_inventory(&self, slices: Option<&[ResourceSlice]>) -> Result<Inventory, StepError> {
        let mut assignments = self.devices.assignments().await.map_err(StepError::PodResources)?;
        if let Some(slices) = slices.filter(|_| assignments.iter().any(|a| a.claim.is_some())) {
            assignments = pod_resources::with_dra_uuids(assignments, &dra::device_uuids(slices));
        }
        let nvml = self.nvml.clone();
        let catalog = self.cfg.catalog.clone();
        tokio::task::spawn_blocking(move || read_inventory(&*nvml, &catalog, &assignments))
            .await
            .map_err(|e| StepError::Task(e.to_string()))?
            .map_err(StepError::from)
    }

    /// Samples what each pod holding a whole GPU alone uses of it and sets `status.usage` (see
    /// [`usage`]). Measuring never fails a round: a GPU NVML cannot read is skipped and logged.
    /// NVML is only called (off the runtime) when a whole GPU is held.
    async fn measure_into(&mut self, status: &mut MigNodeStatus, inventory: &Inventory, now: Timestamp) {
        let targets = usage::targets(&self.cfg.catalog, &inventory.gpus);
        let (samples, errors) = if targets.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            let nvml = self.nvml.clone();
            let read = tokio::task::spawn_blocking(move || usage::sample(&*nvml, targets)).await;
            read.unwrap_or_else(|e| {
                tracing::warn!(node = %self.cfg.node, error = %e, "the usage sampling task failed");
                (Vec::new(), Vec::new())
            })
        };
        for e in errors {
            tracing::warn!(node = %self.cfg.node, error = %e, "cannot measure a whole GPU's use this round");
        }
        self.mem.usage.record(&status.usage, &samples, now);
        let every = SignedDuration::try_from(self.cfg.usage_publish_interval).unwrap_or(SignedDuration::MAX);
        status.usage = self.mem.usage.publication(&status.usage, now, every);
    }

    /// Each GPU's rules: the catalog's model corrected by what NVML reports (NVML wins), read
    /// once per GPU while MIG mode is on. GPUs with MIG off get the catalog's model.
    async fn gpu_models(
        &mut self,
        inventory: &Inventory,
    ) -> Result<(GpuModels, Vec<CatalogDisagreement>), StepError> {
        let mut models = GpuModels::new();
        let mut disagreements = Vec::new();
        for gpu in &inventory.gpus {
            let Some(model) = model_of(gpu, &self.cfg.catalog) else {
                if gpu.mig_mode.current {
                    disagreements.push(CatalogDisagreement {
                        gpu: gpu.index,
                        profile: None,
                        field: "model".into(),
                        catalog: "unknown GPU".into(),
                        nvml: format!("{} ({})", gpu.model, gpu.pci_device_id),
                    });
                }
                continue;
            };
            if !gpu.mig_mode.current {
                models.insert(gpu.index, model.clone());
                continue;
            }
            if !self.mem.rules.contains_key(&gpu.uuid) {
                let (nvml, index) = (self.nvml.clone(), gpu.index);
                let reported =
                    tokio::task::spawn_blocking(move || catalog_check::read_profiles(&*nvml, index))
                        .await
                        .map_err(|e| StepError::Task(e.to_string()))??;
                // The agent acts on these rules, so it does not act on a partial reading: a
                // profile whose placements NVML would not give fails the round (named, and
                // retried), where the probe and the published disagreements skip it.
                if let Some(error) = reported.iter().find_map(|p| p.placements_error.clone()) {
                    return Err(StepError::Nvml(error));
                }
                let rules = GpuRules {
                    model: catalog_check::nvml_model(model, &reported),
                    disagreements: catalog_check::compare(model, index, &reported),
                };
                self.mem.rules.insert(gpu.uuid.clone(), rules);
            }
            let rules = &self.mem.rules[&gpu.uuid];
            models.insert(gpu.index, rules.model.clone());
            disagreements.extend(rules.disagreements.iter().cloned());
        }
        Ok((models, disagreements))
    }

    /// Publishes what was observed: inventory, catalog disagreements, whose cordon it is.
    fn observe_into(
        &self,
        status: &mut MigNodeStatus,
        inventory: &Inventory,
        disagreements: Vec<CatalogDisagreement>,
        cordon: CordonState,
        generation: i64,
        now: Timestamp,
    ) {
        status.gpus = inventory.gpus.clone();
        status.gpu_count = inventory.gpus.len() as u32;
        status.cordoned_by_geometer = cordon.marked();
        status.observed_generation = Some(generation);
        let g = Some(generation);
        if disagreements.is_empty() {
            conditions::set(
                &mut status.conditions,
                MigNodeStatus::CATALOG_MISMATCH,
                false,
                "CatalogAgrees",
                "NVML reports what the catalog says",
                g,
                now,
            );
        } else {
            let message = format!(
                "{} difference(s) between Geometer's catalog and NVML; NVML is trusted. See status.catalogDisagreements",
                disagreements.len()
            );
            conditions::set(
                &mut status.conditions,
                MigNodeStatus::CATALOG_MISMATCH,
                true,
                "NvmlDisagrees",
                message,
                g,
                now,
            );
        }
        status.catalog_disagreements = disagreements;
        if self.mem.last_round_ok && conditions::is_true(&status.conditions, MigNodeStatus::FAILED) {
            conditions::set(
                &mut status.conditions,
                MigNodeStatus::FAILED,
                false,
                "Recovered",
                "the step that failed succeeded on retry",
                g,
                now,
            );
        }
    }

    /// The pods that must leave, each looked up in the API now.
    async fn pods_to_leave(
        &self,
        work: &NodeWork,
        disruption: &DrainRules,
        now: Timestamp,
    ) -> Result<Vec<(String, PodDrain)>, StepError> {
        let forbidden = (!disruption.eviction_allowed).then(|| {
            format!("{} does not allow evictions (spec.disruption.evictionAllowed is false); waiting for the pod to leave", disruption.source)
        });
        let mut out = Vec::new();
        for pod_ref in work.pods_to_evict() {
            // The agent writes these references itself; one it cannot read holds the drain up
            // rather than be taken for a pod that is gone.
            let drain = match PodKey::parse(&pod_ref) {
                Ok(key) => {
                    let pod = self.pods(key.namespace()).get_opt(key.name()).await?;
                    classify(pod, &disruption.settings.do_not_disrupt_keys, now, forbidden.as_deref())
                }
                Err(e) => PodDrain::Forbidden { why: format!("{e}; the agent cannot look this pod up") },
            };
            out.push((pod_ref, drain));
        }
        Ok(out)
    }

    /// The pods that advertise the node's GPUs: NVIDIA's DRA kubelet plugin on a static-MIG
    /// DRA node, else the device plugin.
    pub(crate) async fn device_plugin_pods(&self) -> Result<Vec<Pod>, StepError> {
        if self.mem.stack == Some(DeviceStack::DraStaticMig) {
            return self.dra_plugin_pods().await;
        }
        self.operator_pods_on_node(&self.cfg.device_plugin_selector).await
    }

    /// This node's kubelet plugin pods of NVIDIA's DRA driver.
    pub(crate) async fn dra_plugin_pods(&self) -> Result<Vec<Pod>, StepError> {
        let namespace = self.cfg.dra_plugin_namespace.as_deref();
        self.labelled_pods_on_node(&self.cfg.dra_plugin_selector, namespace).await
    }

    /// This node's pods matching the label `selector` in the device plugin's namespace (the
    /// GPU Operator's), or in every namespace when none is set.
    pub(crate) async fn operator_pods_on_node(&self, selector: &str) -> Result<Vec<Pod>, StepError> {
        self.labelled_pods_on_node(selector, self.cfg.device_plugin_namespace.as_deref()).await
    }

    /// This node's pods matching the label `selector`, in `namespace` or in every namespace.
    async fn labelled_pods_on_node(
        &self,
        selector: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Pod>, StepError> {
        let params =
            ListParams::default().labels(selector).fields(&format!("spec.nodeName={}", self.cfg.node));
        let api: Api<Pod> = match namespace {
            Some(ns) => self.pods(ns),
            None => Api::all(self.client.clone()),
        };
        Ok(api.list(&params).await?.items)
    }

    /// A device plugin pod that was not among those the last restart deleted. Without memory
    /// of a restart (a restarted agent), every pod counts.
    fn is_fresh_plugin(&self, pod: &Pod) -> bool {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.mem.restarted_plugin.as_ref().is_none_or(|deleted: &BTreeSet<String>| !deleted.contains(&uid))
    }

    /// Whether the recorded wait ran past its timeout.
    fn expired(&self, last: Option<&AgentStep>, disruption: &DrainRules, now: Timestamp) -> bool {
        let Some(step) = last else { return false };
        let timeout = match step.action {
            StepAction::Evict => disruption.settings.timeout,
            StepAction::PauseOperands => self.cfg.operand_timeout,
            StepAction::WaitForAllocatable => self.cfg.advertise_timeout,
            _ => return false,
        };
        let timeout = SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX);
        step.started_at.0.checked_add(timeout).is_ok_and(|deadline| now >= deadline)
    }
}

/// Why the node's device stack refuses a change the spec asks for: DynamicMIG (the driver owns
/// the instances) or both stacks at once (each GPU given out twice).
fn dra_refusal(stack: DeviceStack, changes: bool) -> Option<Refusal> {
    match stack {
        _ if !changes => None,
        DeviceStack::DraDynamicMig => Some(Refusal::DraDynamicMig),
        DeviceStack::Both => Some(Refusal::BothDeviceStacks),
        DeviceStack::DevicePlugin | DeviceStack::DraStaticMig => None,
    }
}

/// The `Refused` condition: whether the GPU Operator's labels let Geometer change the node.
fn preflight_condition(
    status: &mut MigNodeStatus,
    refusal: Option<&Refusal>,
    generation: i64,
    now: Timestamp,
) {
    let (refused, reason, message) = match refusal {
        Some(r) => (true, r.reason(), r.to_string()),
        None => (false, "Accepted", "the node's labels let Geometer change its GPUs".to_string()),
    };
    conditions::set(
        &mut status.conditions,
        MigNodeStatus::REFUSED,
        refused,
        reason,
        message,
        Some(generation),
        now,
    );
}
