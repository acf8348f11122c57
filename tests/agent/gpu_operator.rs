//! A stock NVIDIA GPU Operator node: the agent pauses the operands that keep the GPUs open
//! (as the Operator's mig-manager does), changes every GPU inside one pause window, restores
//! each label to exactly its recorded value on every way out, and refuses a node whose labels
//! say the change cannot work. The Operator is a stand-in ([`agent_support::operator`]): its
//! deploy labels, its operands' pods run while their selectors match, and NVML refusing
//! destroys and MIG mode changes while dcgm-exporter, the device plugin or a GPU client runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use geometer_testkit::agent as agent_support;

use agent_support::operator::OPERATOR_LABELS;
use agent_support::{recording_hook, Harness, SimGpuOptions};
use geometer_agent::{AgentConfig, OperandMode, StepHook, StepPoint};
use geometer_api::gpu_operator::PAUSED_OPERANDS_ANNOTATION;
use geometer_api::MigNodePhase;
use geometer_api::StepAction::{self, *};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

const DEVICE_PLUGIN: &str = "nvidia.com/gpu.deploy.device-plugin";
const DCGM_EXPORTER: &str = "nvidia.com/gpu.deploy.dcgm-exporter";
const ONE_7G: &[(&str, u8)] = &[("7g.80gb", 0)];
const TWO_3G: &[(&str, u8)] = &[("3g.40gb", 0), ("3g.40gb", 4)];

async fn operator_node(gpus: usize) -> Harness {
    let setup: Vec<_> = (0..gpus).map(|_| ("H100-80GB", ONE_7G, SimGpuOptions::default())).collect();
    Harness::with_gpu_operator(&setup).await
}

fn labels(h: &Harness) -> BTreeMap<String, String> {
    h.node().metadata.labels.unwrap_or_default()
}

/// The Operator's labels exactly as they were before the change.
fn assert_labels_restored(h: &Harness, what: &str) {
    let labels = labels(h);
    for (key, value) in OPERATOR_LABELS {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{what}: {key}");
    }
    let annotations = h.node().metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key(PAUSED_OPERANDS_ANNOTATION), "{what}: the record is cleared");
    assert_eq!(h.mignode().status.unwrap().paused_operands, None, "{what}: the status record is cleared");
}

fn paused(h: &Harness) -> bool {
    labels(h).get(DEVICE_PLUGIN).is_some_and(|v| v.starts_with("paused-for-mig-change"))
}

/// How often an event was published (repeats of the same event are one object with a count).
fn occurrences(h: &Harness, reason: &str) -> i32 {
    h.events_with_reason(reason).iter().map(|e| e.series.as_ref().map_or(1, |s| s.count)).sum()
}

fn started(h: &Harness, operand: &str) -> usize {
    h.operator_log.lock().unwrap().started.get(operand).copied().unwrap_or(0)
}

async fn label_node(h: &Harness, labels: serde_json::Value) {
    Api::<Node>::all(h.client.clone())
        .patch(
            agent_support::NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
}

fn config(h: &Harness) -> AgentConfig {
    let mut cfg = h.config();
    cfg.operand_timeout = Duration::from_secs(600);
    cfg
}

/// Waits until the window is open and a client that never leaves holds it open.
async fn window_held_open(h: &Harness) {
    h.stuck_operands.lock().unwrap().push("gpu-client".into());
    h.wait_for("the operands paused", |h| paused(h).then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pausing_the_operands_dcgm_exporter_holds_the_gpu_and_the_change_never_completes() {
    let h = operator_node(1).await;
    let mut cfg = config(&h);
    cfg.operands = OperandMode::Off;
    let agent = h.spawn_agent(cfg, None);
    h.set_spec(&[(0, TWO_3G)]).await;

    let failed = h.wait_for("Failed: GpuHeldByClient", Harness::failed_condition).await;
    assert_eq!(failed.reason, "GpuHeldByClient");
    assert!(failed.message.contains("another NVML client holds the GPU"), "{}", failed.message);
    // Retried, and refused again: nothing lets go of the GPU.
    h.wait_for("a retry", |h| (h.mignode().status?.step?.attempt >= 3).then_some(())).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
    assert_labels_restored(&h, "nothing paused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gpus_change_inside_one_pause_window_and_every_label_gets_its_value_back() {
    let h = operator_node(2).await;
    let (hook, steps) = recording_hook(h.server.clone());
    let agent = h.spawn_agent(config(&h), Some(hook));
    let generation = h.set_spec(&[(0, TWO_3G), (1, TWO_3G)]).await;
    h.wait_ready(generation).await;
    agent.abort();

    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_eq!(h.geometry(1), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_labels_restored(&h, "after the change");
    let steps = steps.lock().unwrap().clone();
    let count = |a: StepAction| steps.iter().filter(|s| **s == a).count();
    assert_eq!((count(PauseOperands), count(RestoreOperands)), (1, 1), "one window: {steps:?}");
    let at = |a: StepAction| steps.iter().position(|s| *s == a).unwrap();
    assert!(at(PauseOperands) < at(DestroyComputeInstance), "{steps:?}");
    assert!(at(Verify) < at(RestoreOperands) && at(RestoreOperands) < at(WaitForAllocatable), "{steps:?}");
    assert_eq!(count(RestartDevicePlugin), 0, "the restored DaemonSet starts a new plugin: {steps:?}");
    // One stop and one start of each paused operand for both GPUs; the validator re-ran.
    for operand in
        ["nvidia-dcgm-exporter", "nvidia-device-plugin-daemonset", "gpu-feature-discovery", "gpu-client"]
    {
        assert_eq!(started(&h, operand), 2, "{operand}");
    }
    // The validator's evicted pod terminates before its DaemonSet starts it again; the agent
    // does not wait for that.
    h.wait_for("the validator running again on the new geometry", |h| {
        (started(h, "nvidia-operator-validator") >= 2).then_some(())
    })
    .await;
    assert_eq!(started(&h, "nvidia-operator-validator"), 2, "the validator runs again, once");
    assert_eq!((occurrences(&h, "OperandsPaused"), occurrences(&h, "OperandsRestored")), (1, 1));
    let alloc = h.node().status.unwrap().allocatable.unwrap();
    assert_eq!(alloc["nvidia.com/mig-3g.40gb"].0, "4", "the new plugin advertises the new slices");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_leaves_ends_the_window_restored_failed_and_retried() {
    let h = operator_node(1).await;
    h.stuck_operands.lock().unwrap().push("gpu-client".into());
    let mut cfg = config(&h);
    cfg.operand_timeout = Duration::from_millis(300);
    let agent = h.spawn_agent(cfg, None);
    let generation = h.set_spec(&[(0, TWO_3G)]).await;

    let failed =
        h.wait_for("an OperandsTimeout event", |h| h.events_with_reason("OperandsTimeout").pop()).await;
    let note = failed.note.unwrap_or_default();
    assert!(note.contains("monitoring/gpu-client"), "the pod is named: {note}");
    assert!(note.contains("labels were restored"), "{note}");
    h.wait_for("labels restored", |h| (!paused(h)).then_some(())).await;
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"], "nothing changed on the GPU");

    h.stuck_operands.lock().unwrap().clear();
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_labels_restored(&h, "after the retry");
}

/// A hook that stops the agent (as SIGKILL would: nothing after it runs) the first time a
/// step of `action` is recorded.
fn kill_at(action: StepAction, killed: tokio::sync::mpsc::UnboundedSender<()>) -> StepHook {
    let done = Arc::new(Mutex::new(false));
    Arc::new(move |point: &StepPoint| {
        let hit = matches!(point, StepPoint::Taken(step) if step.action == action);
        let mut done = done.lock().unwrap();
        if hit && !*done {
            *done = true;
            let _ = killed.send(());
            return Box::pin(std::future::pending());
        }
        Box::pin(async {})
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_at_every_step_inside_the_window_is_restored_by_the_next_agent_first() {
    for action in [
        PauseOperands,
        DestroyComputeInstance,
        DestroyGpuInstance,
        CreateGpuInstance,
        CreateComputeInstance,
        Verify,
        RestoreOperands,
    ] {
        let h = operator_node(1).await;
        let generation = h.set_spec(&[(0, TWO_3G)]).await;
        let (tx, mut killed) = tokio::sync::mpsc::unbounded_channel();
        let agent = h.spawn_agent(config(&h), Some(kill_at(action, tx)));
        killed.recv().await;
        agent.abort();
        let _ = agent.await;

        let (hook, steps) = recording_hook(h.server.clone());
        let again = h.spawn_agent(config(&h), Some(hook));
        h.wait_ready(generation).await;
        again.abort();
        assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"], "killed after {action:?}");
        assert_labels_restored(&h, &format!("killed after {action:?}"));
        let steps = steps.lock().unwrap().clone();
        let (opened, closed) = (occurrences(&h, "OperandsPaused"), occurrences(&h, "OperandsRestored"));
        assert!(opened <= 2, "killed after {action:?}: at most one new window: {steps:?}");
        assert_eq!(opened, closed, "killed after {action:?}: every window is closed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_stopped_by_sigterm_inside_the_window_restores_the_labels_before_it_exits() {
    let h = operator_node(1).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = h.agent(config(&h), Arc::new(h.sim.clone()));
    let running = tokio::spawn(agent.run_until(async {
        let _ = stopped.await;
    }));
    h.set_spec(&[(0, TWO_3G)]).await;
    window_held_open(&h).await;
    stop.send(()).unwrap();
    running.await.unwrap();
    assert_labels_restored(&h, "after SIGTERM");
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_a_person_sets_inside_the_window_is_never_overwritten() {
    let h = operator_node(1).await;
    let agent = h.spawn_agent(config(&h), None);
    let generation = h.set_spec(&[(0, TWO_3G)]).await;
    window_held_open(&h).await;
    label_node(&h, json!({ DCGM_EXPORTER: "false" })).await;
    h.stuck_operands.lock().unwrap().clear();
    h.wait_ready(generation).await;
    agent.abort();

    let labels = labels(&h);
    assert_eq!(labels[DCGM_EXPORTER], "false", "the person's value stays");
    assert_eq!(labels[DEVICE_PLUGIN], "true", "the others get their value back");
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_upgrade_pausing_on_top_closes_the_window_and_keeps_its_own_pause() {
    let h = operator_node(1).await;
    let agent = h.spawn_agent(config(&h), None);
    let generation = h.set_spec(&[(0, TWO_3G)]).await;
    window_held_open(&h).await;
    // NVIDIA/k8s-driver-manager appends its token to a value that is not `true`.
    label_node(
        &h,
        json!({
            DEVICE_PLUGIN: "paused-for-mig-change_paused-for-driver-upgrade",
            "nvidia.com/gpu-driver-upgrade-state": "pod-deletion-required",
        }),
    )
    .await;

    h.wait_for("a DriverUpgrade event", |h| h.events_with_reason("DriverUpgrade").pop()).await;
    h.wait_for("the window closed", |h| {
        let annotations = h.node().metadata.annotations.unwrap_or_default();
        (!annotations.contains_key(PAUSED_OPERANDS_ANNOTATION)).then_some(())
    })
    .await;
    let labels = labels(&h);
    assert_eq!(labels[DEVICE_PLUGIN], "paused-for-driver-upgrade", "the upgrade's pause holds");
    assert_eq!(labels[DCGM_EXPORTER], "true", "our own pause is lifted");
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);

    // The upgrade ends: the driver manager strips its token, and the change goes ahead.
    h.stuck_operands.lock().unwrap().clear();
    label_node(&h, json!({ DEVICE_PLUGIN: "true", "nvidia.com/gpu-driver-upgrade-state": "upgrade-done" }))
        .await;
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_withdrawn_inside_the_window_restores_the_operands() {
    let h = operator_node(1).await;
    let agent = h.spawn_agent(config(&h), None);
    h.set_spec(&[(0, TWO_3G)]).await;
    window_held_open(&h).await;
    let generation = h.set_spec(&[(0, ONE_7G)]).await;
    h.wait_ready(generation).await;
    agent.abort();
    assert_labels_restored(&h, "after the withdrawal");
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_preflight_refusal_leaves_the_node_untouched_and_says_why() {
    let cases: [(serde_json::Value, &str, &str); 4] = [
        (json!({"nvidia.com/mig.strategy": "single"}), "MigStrategyNotMixed", "\"single\""),
        (json!({"nvidia.com/gpu.deploy.mig-manager": "true"}), "MigManagerOwnsNode", "mig-manager=false"),
        (json!({"nvidia.com/mig.config.state": "pending"}), "MigManagerChanging", "\"pending\""),
        (json!({ DCGM_EXPORTER: "paused-for-driver-upgrade" }), "DriverUpgrade", "dcgm-exporter"),
    ];
    for (extra, reason, text) in cases {
        let h = operator_node(1).await;
        label_node(&h, extra.clone()).await;
        let before = labels(&h);
        let agent = h.spawn_agent(config(&h), None);
        h.set_spec(&[(0, TWO_3G)]).await;
        let refused = h
            .wait_for("Refused", |h| {
                h.mignode()
                    .status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "Refused" && c.status == "True")
            })
            .await;
        h.wait_for("the event", |h| (!h.events_with_reason(reason).is_empty()).then_some(())).await;
        agent.abort();
        assert_eq!(refused.reason, reason, "{extra}");
        assert!(refused.message.contains(text), "{extra}: {}", refused.message);
        let failed = h.failed_condition().expect("a refused change is not taken for done");
        assert_eq!(
            (h.mignode().status.unwrap().phase, failed.reason.as_str()),
            (MigNodePhase::Failed, reason)
        );
        assert_eq!(h.cordon_state(), (false, false), "{extra}: never cordoned");
        assert_eq!(labels(&h), before, "{extra}: no label touched");
        assert_eq!(h.geometry(0), vec!["7g.80gb@0"], "{extra}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nvml_failure_inside_the_window_restores_the_operands_before_the_retry() {
    use geometer_agent::nvml::sim::Fault;
    use geometer_agent::nvml::{NvmlCall, Reason};
    let h = operator_node(1).await;
    h.sim.inject(Fault::on(NvmlCall::CreateGpuInstance).nth(1).reason(Reason::GpuLost));
    let agent = h.spawn_agent(config(&h), None);
    let generation = h.set_spec(&[(0, TWO_3G)]).await;
    h.wait_for("the failure", |h| h.events_with_reason("NvmlError").pop()).await;
    h.wait_ready(generation).await;
    agent.abort();

    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_labels_restored(&h, "after the retry");
    assert_eq!(
        (occurrences(&h, "OperandsPaused"), occurrences(&h, "OperandsRestored")),
        (2, 2),
        "the failed attempt's window was closed, and the retry opened its own"
    );
}
