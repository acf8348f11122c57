//! The GPU Operator's operands around a change, as NVIDIA's mig-manager handles them
//! (NVIDIA/mig-parted `pkg/mig/reconfigure/reconfigure.go`): record each deploy label, pause
//! the operands that keep the GPUs open, wait until their pods have left the node, change the
//! GPUs, then re-run the validator and give each label its recorded value back.
//!
//! One pause window covers every GPU change of the node. Every way out of the window restores
//! the labels: the change done, a failure, a timeout, the plan withdrawn, the agent stopping
//! (SIGTERM), and, for an agent killed outright, its successor's first round.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch};
use kube::runtime::events::EventType;
use serde_json::{json, Value};

use crate::observe::observation::Context;
use crate::runtime::agent_loop::{Agent, NextRound, StepError};
use crate::steps::eviction;
use geometer_api::gpu_operator::{self, PausedOperands, PAUSED_FOR_MIG_CHANGE, PAUSED_OPERANDS_ANNOTATION};
use geometer_solver::PodKey;

/// Pods the validator starts that use every GPU while they run (NVIDIA/gpu-operator
/// `validator/manifests/cuda-workload-validation.yaml`, `plugin-workload-validation.yaml`):
/// evicted when the window opens, as mig-manager deletes them.
pub(crate) const WORKLOAD_VALIDATORS: [&str; 2] =
    ["app=nvidia-cuda-validator", "app=nvidia-device-plugin-validator"];
/// The validator DaemonSet's pods: evicted before the labels are restored, so that every
/// validation runs again on the new geometry (mig-manager does the same).
pub(crate) const OPERATOR_VALIDATOR: &str = "app=nvidia-operator-validator";

/// Whether the agent pauses the GPU Operator's operands around a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OperandMode {
    /// When the node carries the Operator's deploy labels.
    #[default]
    Auto,
    On,
    Off,
}

/// What the agent sees of the operands in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Operands {
    /// Not a GPU Operator node, or pausing is turned off: nothing to pause.
    Absent,
    /// The operands run; nothing is paused.
    Running,
    /// This agent's pause is in force; the pods still on the node that must leave first.
    Paused { waiting: Vec<String> },
}

impl Operands {
    pub(crate) fn paused(&self) -> bool {
        matches!(self, Operands::Paused { .. })
    }

    /// The GPUs may change: nothing to pause, or paused with every client gone.
    pub(crate) fn clear(&self) -> bool {
        match self {
            Operands::Absent => true,
            Operands::Running => false,
            Operands::Paused { waiting } => waiting.is_empty(),
        }
    }
}

/// The pause record in force on the node: the Node's annotation, else (the agent stopped
/// between writing status and patching the Node) the MigNode's status.
pub(crate) fn record_of(node: &Node, status_record: Option<&PausedOperands>) -> Option<PausedOperands> {
    let annotation = node.metadata.annotations.as_ref().and_then(|a| a.get(PAUSED_OPERANDS_ANNOTATION));
    match annotation.map(|v| PausedOperands::from_annotation(v)) {
        Some(Ok(record)) => Some(record),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "the pause record on the Node does not parse; using the MigNode's");
            status_record.cloned()
        }
        None => status_record.cloned(),
    }
}

/// The node's labels (none: empty).
pub(crate) fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// RFC 6901 escaping of a label key in a JSON pointer.
fn pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that opens the window: the record as an annotation, and each label that is
/// exactly `true` compare-and-swapped to `paused-for-mig-change`. A label someone changed since
/// the node was read fails its `test` and the whole patch is refused: nothing is half paused.
pub(crate) fn pause_patch(node: &Node, record: &PausedOperands) -> Value {
    let mut ops = Vec::new();
    let annotation = json!(record.to_annotation());
    match &node.metadata.annotations {
        Some(_) => ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer(PAUSED_OPERANDS_ANNOTATION)), "value": annotation})),
        None => ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {PAUSED_OPERANDS_ANNOTATION: annotation}})),
    }
    for label in record.paused_labels() {
        let path = format!("/metadata/labels/{}", pointer(&label.label));
        ops.push(json!({"op": "test", "path": path, "value": "true"}));
        ops.push(json!({"op": "replace", "path": path, "value": PAUSED_FOR_MIG_CHANGE}));
    }
    Value::Array(ops)
}

/// The JSON patch that closes the window: each paused label that still holds Geometer's pause
/// gets its recorded value back ([`gpu_operator::OperandLabel::restored`]), compare-and-swapped
/// against the value read, and the record goes. `None` when there is nothing to write.
pub(crate) fn restore_patch(node: &Node, record: &PausedOperands) -> Option<Value> {
    let now = labels(node);
    let mut ops = Vec::new();
    for label in record.paused_labels() {
        let current = now.get(&label.label);
        let Some(value) = label.restored(current.map(String::as_str)) else { continue };
        let path = format!("/metadata/labels/{}", pointer(&label.label));
        ops.push(json!({"op": "test", "path": path, "value": current}));
        ops.push(json!({"op": "replace", "path": path, "value": value}));
    }
    let annotated =
        node.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(PAUSED_OPERANDS_ANNOTATION));
    if annotated {
        let path = format!("/metadata/annotations/{}", pointer(PAUSED_OPERANDS_ANNOTATION));
        ops.push(json!({"op": "remove", "path": path}));
    }
    (!ops.is_empty()).then_some(Value::Array(ops))
}

/// Whether `pod` is a GPU client that must leave while `record` is in force: a DaemonSet's pod
/// (not finished, not the agent's own) whose node selection names a paused label and no longer
/// matches the node's labels, so the DaemonSet controller takes it off the node. A pod that
/// tolerates the pause in its node affinity (the agent's own) stays.
pub(crate) fn must_leave(pod: &Pod, record: &PausedOperands, labels: &BTreeMap<String, String>) -> bool {
    let by_daemonset = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    if !by_daemonset || finished {
        return false;
    }
    let selection = Selection::of(pod);
    selection.keys().any(|k| record.paused(k)) && !selection.matches(labels)
}

/// A pod's node selection: its `nodeSelector` and its required node affinity's expressions.
struct Selection<'p> {
    selector: Option<&'p BTreeMap<String, String>>,
    /// Terms (any may match), each a list of expressions (all must).
    terms: Vec<Vec<&'p k8s_openapi::api::core::v1::NodeSelectorRequirement>>,
}

impl<'p> Selection<'p> {
    fn of(pod: &'p Pod) -> Selection<'p> {
        let spec = pod.spec.as_ref();
        let required = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
        let terms = required
            .map(|r| {
                r.node_selector_terms.iter().map(|t| t.match_expressions.iter().flatten().collect()).collect()
            })
            .unwrap_or_default();
        Selection { selector: spec.and_then(|s| s.node_selector.as_ref()), terms }
    }

    fn keys(&self) -> impl Iterator<Item = &str> {
        let selector = self.selector.into_iter().flat_map(|s| s.keys().map(String::as_str));
        selector.chain(self.terms.iter().flatten().map(|e| e.key.as_str()))
    }

    /// As the scheduler reads them (`In`, `NotIn`, `Exists`, `DoesNotExist`; numeric operators
    /// never match a deploy label).
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let selector = self.selector.is_none_or(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v)));
        let expression = |e: &&k8s_openapi::api::core::v1::NodeSelectorRequirement| {
            let value = labels.get(&e.key);
            let listed = || value.is_some_and(|v| e.values.iter().flatten().any(|x| x == v));
            match e.operator.as_str() {
                "In" => listed(),
                "NotIn" => !listed(),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        };
        let affinity = self.terms.is_empty() || self.terms.iter().any(|t| t.iter().all(expression));
        selector && affinity
    }
}

fn pod_ref(pod: &Pod) -> String {
    let meta = &pod.metadata;
    PodKey::new(meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
        .to_string()
}

impl Agent {
    /// Whether the agent pauses operands on `node`.
    pub(crate) fn manages_operands(&self, node: &Node) -> bool {
        match self.cfg.operands {
            OperandMode::On => true,
            OperandMode::Off => false,
            OperandMode::Auto => gpu_operator::runs_operands(&labels(node)),
        }
    }

    /// The operands as they stand: absent, running, or paused with the pods still to leave.
    pub(crate) async fn operands(
        &self,
        node: &Node,
        record: Option<&PausedOperands>,
    ) -> Result<Operands, StepError> {
        if !self.manages_operands(node) {
            return Ok(Operands::Absent);
        }
        let Some(record) = record else { return Ok(Operands::Running) };
        let labels = labels(node);
        let waiting = self
            .pods_on_node()
            .await?
            .iter()
            .filter(|p| must_leave(p, record, &labels) || self.is_workload_validator(p))
            .map(pod_ref)
            .collect();
        Ok(Operands::Paused { waiting })
    }

    async fn pods_on_node(&self) -> Result<Vec<Pod>, StepError> {
        let params = ListParams::default().fields(&format!("spec.nodeName={}", self.cfg.node));
        Ok(kube::Api::<Pod>::all(self.client.clone()).list(&params).await?.items)
    }

    fn is_workload_validator(&self, pod: &Pod) -> bool {
        let app = pod.metadata.labels.as_ref().and_then(|l| l.get("app"));
        WORKLOAD_VALIDATORS.iter().any(|s| app.is_some_and(|a| Some(a.as_str()) == s.strip_prefix("app=")))
    }

    /// Opens the window (recording first), evicts the workload validators, and waits until no
    /// paused client is left on the node.
    pub(crate) async fn pause_operands(&mut self, cx: &mut Context) -> Result<NextRound, StepError> {
        if cx.pause.is_none() {
            let record = PausedOperands::of(&labels(&cx.node), self.clock.now().into());
            // Recorded in status first, then on the Node in the same patch as the pause.
            cx.status.paused_operands = Some(record.clone());
            self.write_status(&cx.status).await?;
            let patch = pause_patch(&cx.node, &record);
            match self
                .nodes()
                .patch(
                    &self.cfg.node,
                    &crate::patch_params(),
                    &Patch::<()>::Json(serde_json::from_value(patch).expect("JSON patch")),
                )
                .await
            {
                Ok(_) => {}
                // A label changed since the node was read: the record goes, decide again.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                    cx.status.paused_operands = None;
                    self.write_status(&cx.status).await?;
                    return Ok(NextRound::Continue);
                }
                Err(e) => return Err(e.into()),
            }
            let paused: Vec<&str> = record.paused_labels().map(|l| l.label.as_str()).collect();
            let plugins = self.device_plugin_pods().await?;
            self.mem.restarted_plugin = Some(plugins.iter().filter_map(|p| p.metadata.uid.clone()).collect());
            self.mem.window_mine = true;
            self.metrics.set_operands_paused(true);
            let note = format!("paused the GPU Operator's operands for the change: {}", paused.join(", "));
            self.event(EventType::Normal, "OperandsPaused", "Pause", note, None).await;
            cx.pause = Some(record);
            return Ok(NextRound::Continue);
        }
        self.evict_on_node(&WORKLOAD_VALIDATORS).await?;
        Ok(NextRound::Wait(self.cfg.poll_interval))
    }

    /// Evicts the pods on the node matching any of `selectors` in the operands' namespace.
    async fn evict_on_node(&self, selectors: &[&str]) -> Result<(), StepError> {
        for selector in selectors {
            let pods = self.operator_pods_on_node(selector).await?;
            for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
                match eviction::evict(&self.client, pod).await? {
                    eviction::EvictionOutcome::Refused { message } => {
                        tracing::warn!(pod = %pod_ref(pod), %message, "an operand pod's eviction was refused")
                    }
                    _ => tracing::info!(pod = %pod_ref(pod), "evicted operand pod"),
                }
            }
        }
        Ok(())
    }

    /// Closes the window after the change: the validator runs again, then every label gets its
    /// recorded value back. The device plugin the DaemonSet starts again advertises the new
    /// slices, so the agent waits for allocatable next.
    pub(crate) async fn restore_operands(&mut self, cx: &mut Context) -> Result<NextRound, StepError> {
        self.evict_on_node(&[OPERATOR_VALIDATOR]).await?;
        if let Some(record) = cx.pause.take() {
            self.close_window(&cx.node, &record, &mut cx.status).await?;
        }
        Ok(NextRound::Continue)
    }

    /// Gives every paused label its recorded value back (a compare-and-swap; a label changed
    /// meanwhile is read again) and clears the record from the Node and the MigNode.
    pub(crate) async fn close_window(
        &mut self,
        node: &Node,
        record: &PausedOperands,
        status: &mut geometer_api::MigNodeStatus,
    ) -> Result<(), StepError> {
        let mut node = node.clone();
        for _ in 0..5 {
            let Some(patch) = restore_patch(&node, record) else { break };
            let patch = serde_json::from_value(patch).expect("JSON patch");
            match self.nodes().patch(&self.cfg.node, &crate::patch_params(), &Patch::<()>::Json(patch)).await
            {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                    node = self.nodes().get(&self.cfg.node).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        status.paused_operands = None;
        // An unreadable MigNode's status is not written (its Ready condition says why).
        if self.mem.mignode.is_some() {
            self.write_status(status).await?;
        }
        self.mem.window_mine = false;
        self.metrics.set_operands_paused(false);
        let restored: Vec<&str> = record.paused_labels().map(|l| l.label.as_str()).collect();
        let note = format!("restored the GPU Operator's operand labels: {}", restored.join(", "));
        self.event(EventType::Normal, "OperandsRestored", "Restore", note, None).await;
        Ok(())
    }

    /// Closes any window left open, from the Node and MigNode as they are now: on every failure,
    /// when the agent stops, and for a window an earlier agent left. Errors are logged: the
    /// record stays and the next round tries again.
    pub(crate) async fn close_any_window(&mut self, why: &str) {
        let node = match self.nodes().get_opt(&self.cfg.node).await {
            Ok(Some(node)) => node,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the node to restore the operand labels");
                return;
            }
        };
        let mut status = self.mem.mignode.as_ref().and_then(|m| m.status.clone()).unwrap_or_default();
        let Some(record) = record_of(&node, status.paused_operands.as_ref()) else { return };
        tracing::info!(node = %self.cfg.node, why, "closing the operand pause window");
        if let Err(e) = self.close_window(&node, &record, &mut status).await {
            tracing::warn!(error = %e, "cannot restore the operand labels; retrying in the next round");
        }
    }

    /// How long a window may stay open before it is closed and the change retried.
    pub(crate) fn window_overdue(&self, record: &PausedOperands, now: Timestamp) -> bool {
        let max = jiff::SignedDuration::try_from(self.cfg.max_pause).unwrap_or(jiff::SignedDuration::MAX);
        record.since.0.checked_add(max).is_ok_and(|deadline| now >= deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)], annotated: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("gpu-1".into());
        n.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        if annotated {
            n.metadata.annotations = Some(BTreeMap::new());
        }
        n
    }

    fn operator_labels() -> Vec<(&'static str, &'static str)> {
        vec![
            ("nvidia.com/gpu.deploy.device-plugin", "true"),
            ("nvidia.com/gpu.deploy.dcgm-exporter", "true"),
            ("nvidia.com/gpu.deploy.dcgm", "false"),
            ("nvidia.com/gpu.deploy.mig-manager", "false"),
        ]
    }

    fn record() -> PausedOperands {
        let labels = labels(&node(&operator_labels(), false));
        PausedOperands::of(
            &labels,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        )
    }

    fn apply(node: &Node, patch: &Value) -> Result<Value, json_patch::PatchError> {
        let mut doc = serde_json::to_value(node).unwrap();
        json_patch::patch(&mut doc, &serde_json::from_value::<json_patch::Patch>(patch.clone()).unwrap())?;
        Ok(doc)
    }

    #[test]
    fn the_pause_writes_the_record_and_swaps_only_labels_that_are_exactly_true() {
        for annotated in [false, true] {
            let n = node(&operator_labels(), annotated);
            let done = apply(&n, &pause_patch(&n, &record())).unwrap();
            let labels = &done["metadata"]["labels"];
            assert_eq!(labels["nvidia.com/gpu.deploy.device-plugin"], PAUSED_FOR_MIG_CHANGE);
            assert_eq!(labels["nvidia.com/gpu.deploy.dcgm-exporter"], PAUSED_FOR_MIG_CHANGE);
            assert_eq!(labels["nvidia.com/gpu.deploy.dcgm"], "false");
            assert!(labels.get("nvidia.com/gpu.deploy.client").is_none(), "an absent label is never added");
            let written = done["metadata"]["annotations"][PAUSED_OPERANDS_ANNOTATION].as_str().unwrap();
            assert_eq!(PausedOperands::from_annotation(written).unwrap(), record());
        }
    }

    #[test]
    fn a_label_changed_since_it_was_read_refuses_the_whole_pause() {
        let read = node(&operator_labels(), true);
        let mut now = operator_labels();
        now[1] = ("nvidia.com/gpu.deploy.dcgm-exporter", "false");
        let changed = node(&now, true);
        // The patch's `test` of the label read fails, so none of its operations apply.
        let refused = apply(&changed, &pause_patch(&read, &record())).unwrap_err();
        assert!(matches!(refused.kind, json_patch::PatchErrorKind::TestFailed), "{refused}");
    }

    #[test]
    fn the_restore_gives_back_recorded_values_and_keeps_what_others_set() {
        let mut paused = operator_labels();
        paused[0] =
            ("nvidia.com/gpu.deploy.device-plugin", "paused-for-mig-change_paused-for-driver-upgrade");
        paused[1] = ("nvidia.com/gpu.deploy.dcgm-exporter", "false");
        let mut n = node(&paused, true);
        n.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(PAUSED_OPERANDS_ANNOTATION.into(), record().to_annotation());
        let done = apply(&n, &restore_patch(&n, &record()).unwrap()).unwrap();
        let labels = &done["metadata"]["labels"];
        assert_eq!(labels["nvidia.com/gpu.deploy.device-plugin"], "paused-for-driver-upgrade");
        assert_eq!(labels["nvidia.com/gpu.deploy.dcgm-exporter"], "false", "a person's value stays");
        assert!(done["metadata"]["annotations"].get(PAUSED_OPERANDS_ANNOTATION).is_none());
        let clean = node(&operator_labels(), false);
        assert_eq!(restore_patch(&clean, &record()), None, "nothing to restore, nothing written");
    }

    fn daemonset_pod(selector: &[(&str, &str)], affinity: Option<Value>) -> Pod {
        let selector: serde_json::Map<String, Value> =
            selector.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "gpu-operator",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}]},
            "spec": {"nodeSelector": selector, "affinity": affinity, "containers": []},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    }

    #[test]
    fn the_pods_that_must_leave_are_the_paused_daemonsets_and_never_one_that_tolerates_the_pause() {
        let record = record();
        let mut labels = labels(&node(&operator_labels(), false));
        labels.insert("nvidia.com/gpu.deploy.device-plugin".into(), PAUSED_FOR_MIG_CHANGE.into());
        let plugin = daemonset_pod(&[("nvidia.com/gpu.deploy.device-plugin", "true")], None);
        assert!(must_leave(&plugin, &record, &labels));
        let dcgm = daemonset_pod(&[("nvidia.com/gpu.deploy.dcgm", "false")], None);
        assert!(!must_leave(&dcgm, &record, &labels), "not a paused label");
        let tolerant = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.deploy.device-plugin", "operator": "In", "values": ["true", "paused-for-mig-change"]}]},
        ]}}});
        let agent = daemonset_pod(&[], Some(tolerant));
        assert!(!must_leave(&agent, &record, &labels), "the agent's own pod stays through its pause");
        let mut bare = plugin.clone();
        bare.metadata.owner_references = None;
        assert!(!must_leave(&bare, &record, &labels), "not a DaemonSet's pod");
    }
}
