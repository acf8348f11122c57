//! A GPU Operator node on the real control plane: the Operator's operand DaemonSets (their
//! `app` labels and node selectors, as NVIDIA/gpu-operator `assets/state-*` has them) run by
//! the real DaemonSet controller on a simulated node whose GPUs refuse destroys while
//! dcgm-exporter, the device plugin or a GPU client runs. The agent pauses them by their deploy
//! labels, the DaemonSet controller takes their pods off the node, both GPUs change inside the
//! one window, and every label gets its value back.

use std::collections::BTreeMap;

use geometer_api::gpu_operator::PAUSED_OPERANDS_ANNOTATION;
use geometer_api::{MigNode, PolicyMode};
use geometer_simcluster::{ClusterSpec, MigPod, NodeSpec, HOLDS_GPUS_LABEL};
use geometer_testkit::agent::operator::{Operand, CLIENTS_NAMESPACE, OPERANDS, OPERATOR_LABELS};
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{RealCluster, NS};
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::support::{geometer, running, WHOLE};

const NODE: &str = "gpu-1";

fn operator_node() -> ClusterSpec {
    let node =
        OPERATOR_LABELS.iter().fold(NodeSpec::new(NODE, "H100-80GB", 2, WHOLE), |n, (k, v)| n.label(k, v));
    ClusterSpec::new(vec![node]).with_plugin_daemonset()
}

/// The operand's DaemonSet, its pods holding the node's GPUs where the operand does.
fn daemonset(operand: &Operand) -> DaemonSet {
    let selector: serde_json::Map<String, serde_json::Value> =
        operand.selector.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let mut labels = json!({"app": operand.app});
    if operand.holds_gpus {
        labels[HOLDS_GPUS_LABEL] = json!("true");
    }
    serde_json::from_value(json!({
        "metadata": {"name": operand.name, "namespace": operand.namespace},
        "spec": {
            "selector": {"matchLabels": {"app": operand.app}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": selector,
                    "tolerations": [{"operator": "Exists"}],
                    // Not 0: that deletes the object at once, before the kubelet has stopped
                    // the containers (and let go of the GPUs), which no real operand does.
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": "nvidia/operand"}],
                },
            },
        },
    }))
    .expect("DaemonSet")
}

async fn node_labels(k8s: &RealCluster) -> (BTreeMap<String, String>, bool) {
    let node = Api::<Node>::all(k8s.admin.clone()).get(NODE).await.unwrap();
    let annotated = node.metadata.annotations.unwrap_or_default().contains_key(PAUSED_OPERANDS_ANNOTATION);
    (node.metadata.labels.unwrap_or_default(), annotated)
}

async fn events(k8s: &RealCluster, reason: &str) -> i32 {
    let list = Api::<Event>::all(k8s.admin.clone()).list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// The node with the Operator's operands running and its device plugin advertising; `None`
/// when the test is skipped.
async fn with_operands(test: &str) -> Option<RealCluster> {
    let k8s = RealCluster::start_with(
        test,
        geometer(),
        &operator_node(),
        &policy(PolicyMode::Auto, false),
        &["daemonset-controller"],
    )
    .await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": CLIENTS_NAMESPACE}})).unwrap();
    Api::<Namespace>::all(k8s.admin.clone()).create(&PostParams::default(), &ns).await.unwrap();
    for operand in OPERANDS.iter().filter(|o| o.app != "nvidia-operator-validator") {
        Api::<DaemonSet>::namespaced(k8s.admin.clone(), operand.namespace)
            .create(&PostParams::default(), &daemonset(operand))
            .await
            .unwrap();
    }
    // The operands whose selectors the node's labels match and that hold the GPUs open.
    let runs = |o: &&Operand| o.selector.iter().all(|s| OPERATOR_LABELS.contains(s));
    let holders = OPERANDS.iter().filter(runs).filter(|o| o.holds_gpus).count();
    wait_until(
        "the operands running, the device plugin advertising",
        || async {
            k8s.check_alive();
            let pods = Api::<Pod>::all(k8s.admin.clone()).list(&ListParams::default()).await.ok()?.items;
            let running = pods
                .iter()
                .filter(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.metadata.labels.as_ref().is_some_and(|l| l.contains_key(HOLDS_GPUS_LABEL))
                })
                .count();
            let node = Api::<Node>::all(k8s.admin.clone()).get(NODE).await.ok()?;
            let advertised = node.status?.allocatable?.get("nvidia.com/mig-7g.80gb").map(|q| q.0.clone());
            (running == holders && advertised.as_deref() == Some("2")).then_some(())
        },
        || k8s.logs(),
    )
    .await;
    Some(k8s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_gpus_change_inside_one_pause_of_the_operators_daemonsets_and_every_label_comes_back() {
    let Some(mut k8s) = with_operands("gpu operator: one window").await else { return };
    // All four pods wait before the controller starts, so that one plan changes both GPUs.
    k8s.deploy("infer", 4, MigPod::new(NS, "infer").slice("3g.40gb", 1).build()).await;
    wait_until(
        "4 pods of infer unschedulable",
        || async {
            let pods = k8s.pods_of("infer").await;
            let waiting = pods.iter().filter(|p| {
                let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
                conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
            });
            (waiting.count() == 4).then_some(())
        },
        || k8s.logs(),
    )
    .await;
    k8s.start_agents();
    k8s.start_controller("controller-0");
    running(&k8s, "infer", 4).await;
    wait_until("the node settled", || async { k8s.settled().await.then_some(()) }, || k8s.logs()).await;

    assert_eq!(k8s.geometry(NODE, 0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_eq!(k8s.geometry(NODE, 1), vec!["3g.40gb@0", "3g.40gb@4"]);
    let (labels, annotated) = node_labels(&k8s).await;
    for (key, value) in OPERATOR_LABELS {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
    }
    assert!(!annotated, "the pause record is cleared");
    assert_eq!(
        (events(&k8s, "OperandsPaused").await, events(&k8s, "OperandsRestored").await),
        (1, 1),
        "both GPUs changed inside one window"
    );
    // The API server's own record: one patch pauses the four operand labels that were `true`,
    // one gives them back, and nothing else touches them.
    let transitions: Vec<Vec<(String, String)>> = k8s
        .cp
        .agent_node_patches()
        .iter()
        .map(deploy_label_writes)
        .filter(|writes| !writes.is_empty())
        .collect();
    let paused = ["device-plugin", "gpu-feature-discovery", "dcgm-exporter", "client"];
    let expect = |value: &str| -> Vec<(String, String)> {
        let mut labels: Vec<(String, String)> =
            paused.iter().map(|o| (format!("nvidia.com/gpu.deploy.{o}"), value.to_string())).collect();
        labels.sort();
        labels
    };
    assert_eq!(transitions, vec![expect("paused-for-mig-change"), expect("true")]);
}

/// The deploy labels a JSON patch writes (`replace` ops), sorted, as (label, value).
fn deploy_label_writes(patch: &serde_json::Value) -> Vec<(String, String)> {
    let mut writes: Vec<(String, String)> = patch
        .as_array()
        .into_iter()
        .flatten()
        .filter(|op| op["op"] == "replace")
        .filter_map(|op| {
            let label = op["path"].as_str()?.strip_prefix("/metadata/labels/")?.replace("~1", "/");
            label
                .starts_with("nvidia.com/gpu.deploy.")
                .then(|| (label, op["value"].as_str().unwrap_or_default().to_string()))
        })
        .collect();
    writes.sort();
    writes
}

/// What happens without the pause, as before Geometer knew the Operator: the destroy meets the
/// GPU clients of another process (the node's dcgm-exporter) and is refused, again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_pause_the_operands_hold_the_gpus_and_the_change_is_refused() {
    let Some(mut k8s) = with_operands("gpu operator: no pause").await else { return };
    k8s.start_agent_with(NODE, &["--gpu-operator=off"]);
    k8s.start_controller("controller-0");
    k8s.deploy("infer", 4, MigPod::new(NS, "infer").slice("3g.40gb", 1).build()).await;
    let failed = wait_until(
        "a GpuHeldByClient failure",
        || async {
            k8s.check_alive();
            let mignode = Api::<MigNode>::all(k8s.admin.clone()).get_opt(NODE).await.ok()??;
            mignode
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Failed" && c.reason == "GpuHeldByClient")
        },
        || k8s.logs(),
    )
    .await;
    assert!(failed.message.contains("another NVML client holds the GPU"), "{}", failed.message);
    assert_eq!(k8s.geometry(NODE, 0), vec!["7g.80gb@0"], "nothing destroyed");
    let (labels, annotated) = node_labels(&k8s).await;
    assert_eq!(labels["nvidia.com/gpu.deploy.dcgm-exporter"], "true", "nothing paused");
    assert!(!annotated);
}

async fn paused(k8s: &RealCluster) -> bool {
    let (labels, _) = node_labels(k8s).await;
    labels.get("nvidia.com/gpu.deploy.dcgm-exporter").is_some_and(|v| v == "paused-for-mig-change")
}

/// The four pods of `infer` run and the node has settled (uncordoned, MigNode converged).
async fn infer_settled(k8s: &RealCluster) {
    wait_until(
        "4 pods of infer running, the node settled",
        || async {
            k8s.check_alive();
            (k8s.running_of("infer").await.len() == 4 && k8s.settled().await).then_some(())
        },
        || k8s.logs(),
    )
    .await;
}

async fn settled_and_restored(k8s: &RealCluster, what: &str) {
    infer_settled(k8s).await;
    let (labels, annotated) = node_labels(k8s).await;
    for (key, value) in OPERATOR_LABELS {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{what}: {key}");
    }
    assert!(!annotated, "{what}: the pause record is cleared");
}

/// SIGKILL inside the window: the next agent gives the labels back first, then finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_inside_the_window_is_restored_by_the_next_one() {
    let Some(mut k8s) = window_open("gpu operator: killed").await else { return };
    k8s.kill_agent(NODE);
    hold_clients(&k8s, false).await;
    k8s.start_agent(NODE);
    settled_and_restored(&k8s, "after the kill").await;
    assert_eq!(k8s.geometry(NODE, 0), vec!["3g.40gb@0", "3g.40gb@4"]);
}

/// A GPU client whose pod never goes (a finalizer nobody removes): the window ends at the
/// operand timeout with the labels restored and nothing changed; once it can go, the change
/// is retried and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_leaves_ends_the_window_and_the_retry_completes() {
    let Some(mut k8s) = with_operands("gpu operator: stuck client").await else { return };
    hold_clients(&k8s, true).await;
    k8s.start_agent_with(NODE, &["--operand-timeout=3s"]);
    k8s.start_controller("controller-0");
    k8s.deploy("infer", 4, MigPod::new(NS, "infer").slice("3g.40gb", 1).build()).await;
    wait_until(
        "an OperandsTimeout naming the client",
        || async {
            k8s.check_alive();
            let list = Api::<Event>::all(k8s.admin.clone()).list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| e.reason.as_deref() == Some("OperandsTimeout"))
        },
        || k8s.logs(),
    )
    .await;
    wait_until("the labels restored", || async { (!paused(&k8s).await).then_some(()) }, || k8s.logs()).await;
    assert_eq!(k8s.geometry(NODE, 0), vec!["7g.80gb@0"], "nothing changed on the GPUs");

    hold_clients(&k8s, false).await;
    settled_and_restored(&k8s, "after the retry").await;
    assert_eq!(k8s.geometry(NODE, 1), vec!["3g.40gb@0", "3g.40gb@4"]);
}

/// Holds the window open: the GPU client's pods get a finalizer, so they never leave.
async fn hold_clients(k8s: &RealCluster, hold: bool) {
    let client = Api::<Pod>::namespaced(k8s.admin.clone(), CLIENTS_NAMESPACE);
    let finalizers = if hold { json!(["sim.geometer.dev/hold"]) } else { json!(null) };
    for pod in client.list(&ListParams::default()).await.unwrap().items {
        let name = pod.metadata.name.unwrap();
        let patch = json!({"metadata": {"finalizers": finalizers}});
        client.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }
}

/// The operators' agents and controller started, the demand deployed, and the window open
/// (held by the GPU client).
async fn window_open(test: &str) -> Option<RealCluster> {
    let mut k8s = with_operands(test).await?;
    hold_clients(&k8s, true).await;
    k8s.start_agents();
    k8s.start_controller("controller-0");
    k8s.deploy("infer", 4, MigPod::new(NS, "infer").slice("3g.40gb", 1).build()).await;
    wait_until("the operands paused", || async { paused(&k8s).await.then_some(()) }, || k8s.logs()).await;
    Some(k8s)
}

async fn label(k8s: &RealCluster, labels: serde_json::Value) {
    let patch = json!({"metadata": {"labels": labels}});
    Api::<Node>::all(k8s.admin.clone())
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_stopped_by_sigterm_inside_the_window_restores_the_labels_before_it_exits() {
    let Some(mut k8s) = window_open("gpu operator: SIGTERM").await else { return };
    assert!(k8s.terminate_agent(NODE), "the agent exits within its grace period");
    let (labels, annotated) = node_labels(&k8s).await;
    for (key, value) in OPERATOR_LABELS {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
    }
    assert!(!annotated, "the pause record is cleared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_a_person_sets_inside_the_window_is_kept_and_the_others_come_back() {
    let Some(k8s) = window_open("gpu operator: a person's label").await else { return };
    label(&k8s, json!({"nvidia.com/gpu.deploy.gpu-feature-discovery": "false"})).await;
    hold_clients(&k8s, false).await;
    infer_settled(&k8s).await;
    let (labels, annotated) = node_labels(&k8s).await;
    assert_eq!(labels["nvidia.com/gpu.deploy.gpu-feature-discovery"], "false", "the person's value stays");
    assert_eq!(labels["nvidia.com/gpu.deploy.dcgm-exporter"], "true");
    assert_eq!(labels["nvidia.com/gpu.deploy.device-plugin"], "true");
    assert!(!annotated);
}

/// NVIDIA's driver-upgrade manager pauses the same labels on top of ours (it appends its
/// token, NVIDIA/k8s-driver-manager `cmd/driver-manager/main.go`): the window closes at once,
/// its pause stays, and the change goes ahead once the upgrade ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_upgrade_pausing_on_top_closes_the_window_and_keeps_its_pause() {
    let Some(k8s) = window_open("gpu operator: driver upgrade").await else { return };
    label(
        &k8s,
        json!({
            "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change_paused-for-driver-upgrade",
            "nvidia.com/gpu-driver-upgrade-state": "pod-deletion-required",
        }),
    )
    .await;
    wait_until(
        "the window closed",
        || async {
            let (labels, annotated) = node_labels(&k8s).await;
            (!annotated && labels["nvidia.com/gpu.deploy.dcgm-exporter"] == "true").then_some(labels)
        },
        || k8s.logs(),
    )
    .await;
    let (labels, _) = node_labels(&k8s).await;
    assert_eq!(
        labels["nvidia.com/gpu.deploy.device-plugin"], "paused-for-driver-upgrade",
        "the upgrade's pause holds"
    );
    assert_eq!(k8s.geometry(NODE, 0), vec!["7g.80gb@0"]);

    hold_clients(&k8s, false).await;
    label(
        &k8s,
        json!({"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}),
    )
    .await;
    running(&k8s, "infer", 4).await;
}

/// An A100 in whole mode turns MIG on only through a GPU reset: with the policy's
/// `allowGpuReset` and the agent's `--allow-gpu-reset`, the plan changes its mode and the agent
/// resets that GPU itself (`nvidia-smi -r` on hardware, the simulated reset here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_resets_allowed_an_idle_whole_a100_is_reset_into_mig_for_slice_demand() {
    let spec = ClusterSpec::new(vec![NodeSpec::new(NODE, "A100-40GB", 1, &[("whole", 0)])]);
    let mut allowed = policy(PolicyMode::Auto, false);
    allowed.spec.disruption.allow_gpu_reset = true;
    let Some(mut k8s) = RealCluster::start("gpu reset", geometer(), &spec, &allowed).await else { return };
    k8s.start_agent_with(NODE, &["--allow-gpu-reset"]);
    k8s.start_controller("controller-0");
    k8s.deploy("infer", 1, MigPod::new(NS, "infer").slice("7g.40gb", 1).build()).await;
    running(&k8s, "infer", 1).await;
    assert_eq!(k8s.geometry(NODE, 0), vec!["7g.40gb@0"]);
    assert_eq!(events(&k8s, "GpuReset").await, 1, "one reset, of that GPU");
}

/// Rounds the controller ended without a plan to publish, from its metrics.
fn skipped_rounds(k8s: &RealCluster) -> f64 {
    let metrics = k8s.scrape("controller-0");
    let line = metrics.lines().find(|l| l.starts_with("geometer_rounds_total{outcome=\"skipped\"}"));
    line.and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
}

/// The Operator's default `single` MIG strategy would make the device plugin fail on a GPU
/// with two profiles: the node is refused before anything is touched, the agent says why, and
/// the controller's rounds plan nothing for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_device_plugin_uses_the_single_strategy_is_never_touched() {
    let Some(mut k8s) = with_operands("gpu operator: single strategy").await else { return };
    label(&k8s, json!({"nvidia.com/mig.strategy": "single"})).await;
    k8s.deploy("infer", 4, MigPod::new(NS, "infer").slice("3g.40gb", 1).build()).await;
    k8s.start_agents();
    k8s.start_controller("controller-0");
    wait_until(
        "the agent's refusal",
        || async {
            k8s.check_alive();
            let mignode = Api::<MigNode>::all(k8s.admin.clone()).get_opt(NODE).await.ok()??;
            let conditions = mignode.status?.conditions;
            conditions
                .iter()
                .any(|c| c.type_ == "Refused" && c.status == "True" && c.reason == "MigStrategyNotMixed")
                .then_some(())
        },
        || k8s.logs(),
    )
    .await;
    // More demand: a round that sees the node's inventory and its labels.
    let before = skipped_rounds(&k8s);
    k8s.scale("infer", 5).await;
    wait_until(
        "a controller round that planned nothing",
        || async { (skipped_rounds(&k8s) > before).then_some(()) },
        || k8s.logs(),
    )
    .await;
    assert!(k8s.plans().await.iter().all(|p| p.spec.nodes.is_empty()), "no plan changes the node");
    let (labels, annotated) = node_labels(&k8s).await;
    assert_eq!(labels["nvidia.com/gpu.deploy.dcgm-exporter"], "true", "nothing paused");
    assert!(!annotated);
    let node = Api::<Node>::all(k8s.admin.clone()).get(NODE).await.unwrap();
    assert!(!node.spec.and_then(|s| s.unschedulable).unwrap_or(false), "never cordoned");
    assert_eq!(k8s.geometry(NODE, 0), vec!["7g.80gb@0"]);
}
