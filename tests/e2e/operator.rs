//! The whole operator end to end on the simulated cluster: in-memory API server, simulated
//! nodes, device plugin, scheduler and kubelet, the real controller and a real agent per node.

use std::path::PathBuf;

use geometer_testkit::e2e as e2e_support;

use e2e_support::{policy, wait_for, E2e, NS};
use geometer_api::{MigPlanPhase, PolicyMode};
use geometer_simcluster::{ClusterSpec, MigPod, NodeSpec};
use geometer_testkit::control_plane::kubectl_or_skip;

const WHOLE: &[(&str, u8)] = &[("7g.80gb", 0)];

fn two_nodes() -> ClusterSpec {
    ClusterSpec::new(vec![
        NodeSpec::new("gpu-1", "H100-80GB", 2, WHOLE),
        NodeSpec::new("gpu-2", "H100-80GB", 2, WHOLE),
    ])
}

/// The control plane's kubectl against the in-memory API server over HTTP.
struct Kubectl {
    path: PathBuf,
    dir: tempfile::TempDir,
    _serving: geometer_apiserver::ServeHandle,
}

impl Kubectl {
    async fn serve(e2e: &E2e, path: PathBuf) -> Kubectl {
        let dir = tempfile::tempdir().unwrap();
        let (_addr, serving) = e2e.server.serve_http("127.0.0.1:0").await.unwrap();
        e2e.server.write_kubeconfig(dir.path().join("kubeconfig")).unwrap();
        Kubectl { path, dir, _serving: serving }
    }

    /// kubectl's output; fails the test with kubectl's error output when kubectl fails.
    async fn ok(&self, args: &[&str]) -> String {
        let mut cmd = std::process::Command::new(&self.path);
        cmd.args(args)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("HOME", self.dir.path())
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"));
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        assert!(
            out.status.success(),
            "kubectl {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

async fn submit_small(e2e: &E2e, names: &[&str]) {
    for name in names {
        e2e.submit(MigPod::new(NS, name).slice("1g.10gb", 1).run_seconds(3600.0).build()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demand_shift_is_planned_applied_and_the_pods_run() {
    let e2e = E2e::new(&two_nodes(), policy(PolicyMode::Auto, false)).await;
    // Whole-GPU slices are free; pods wanting 1g.10gb cannot run until GPUs are repartitioned.
    let pods = ["small-0", "small-1", "small-2", "small-3"];
    submit_small(&e2e, &pods).await;
    wait_for("the pods running", || e2e.running(&pods).then_some(())).await;
    let plan = wait_for("a succeeded plan", || {
        e2e.plans().into_iter().find(|p| p.phase() == MigPlanPhase::Succeeded)
    })
    .await;
    assert!(plan.spec.summary.pods_helped >= 1);
    // Only as many GPUs changed as the pods needed (7 x 1g.10gb fit on one GPU).
    let changed: usize = ["gpu-1", "gpu-2"]
        .iter()
        .map(|n| (0..2).filter(|g| e2e.geometry(n, *g) != ["7g.80gb@0"]).count())
        .sum();
    assert_eq!(changed, 1, "one GPU repartitioned for four 1g.10gb pods");
    wait_for("nodes settled and uncordoned", || e2e.settled().then_some(())).await;
    assert!(e2e.evictions().is_empty(), "{:?}", e2e.evictions());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_leaves_gpus_alone_and_kubectl_shows_the_plan() {
    let Some(kubectl) = kubectl_or_skip() else { return };
    let e2e = E2e::new(&two_nodes(), policy(PolicyMode::DryRun, false)).await;
    submit_small(&e2e, &["small-0"]).await;
    // The pass after publishing says why the plan stays Proposed.
    let plan = wait_for("a plan that says it is DryRun", || {
        e2e.plans().into_iter().find(|p| {
            p.status.as_ref().and_then(|s| s.message.as_deref()).is_some_and(|m| m.starts_with("DryRun"))
        })
    })
    .await;
    let name = plan.metadata.name.clone().unwrap();
    for node in ["gpu-1", "gpu-2"] {
        for gpu in 0..2 {
            assert_eq!(e2e.geometry(node, gpu), ["7g.80gb@0"], "DryRun never changes a GPU");
        }
    }
    let kubectl = Kubectl::serve(&e2e, kubectl).await;
    let table = kubectl.ok(&["get", "migplans"]).await;
    assert!(table.contains("PODS-HELPED") && table.contains(&name), "{table}");
    let described = kubectl.ok(&["describe", "migplan", &name]).await;
    assert!(described.contains("1g.10gb") && described.contains("DryRun"), "{described}");
    assert_eq!(e2e.plans()[0].phase(), MigPlanPhase::Proposed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_waits_for_kubectl_patch_then_applies() {
    let Some(kubectl) = kubectl_or_skip() else { return };
    let e2e = E2e::new(&two_nodes(), policy(PolicyMode::Approve, false)).await;
    submit_small(&e2e, &["small-0"]).await;
    let plan = wait_for("a proposed plan", || e2e.plans().into_iter().next()).await;
    let name = plan.metadata.name.clone().unwrap();
    assert!(!e2e.running(&["small-0"]));
    let kubectl = Kubectl::serve(&e2e, kubectl).await;
    let patched =
        kubectl.ok(&["patch", "migplan", &name, "--type=merge", "-p", r#"{"spec":{"approved":true}}"#]).await;
    assert!(patched.contains(&format!("migplan.geometer.dev/{name} patched")), "{patched}");
    wait_for("the pod running", || e2e.running(&["small-0"]).then_some(())).await;
    let done =
        wait_for("Succeeded", || e2e.plans().into_iter().find(|p| p.phase() == MigPlanPhase::Succeeded))
            .await;
    assert_eq!(done.metadata.name.as_deref(), Some(name.as_str()));
}

/// One node, two H100s split in halves, with a 3g pod on the first half of each GPU and the
/// second halves free; then a pod wanting a whole GPU. Only moving one half-GPU pod to the other
/// GPU's free half makes room for it, so a plan with eviction evicts unless the pods are
/// protected. Kubelet admission takes the lowest free GPU and placement first, which is what
/// puts the pods where they are.
async fn fragmented(protected: bool) -> E2e {
    let spec =
        ClusterSpec::new(vec![NodeSpec::new("gpu-1", "H100-80GB", 2, &[("3g.40gb", 0), ("3g.40gb", 4)])]);
    let e2e = E2e::new(&spec, policy(PolicyMode::Auto, true)).await;
    for name in ["a", "b", "c", "d"] {
        let mut pod = MigPod::new(NS, name).slice("3g.40gb", 1).run_seconds(3600.0);
        if protected {
            pod = pod.annotation("geometer.dev/do-not-disrupt", "true");
        }
        e2e.submit(pod.build()).await;
        wait_for("the half-GPU pod running", || e2e.running(&[name]).then_some(())).await;
    }
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(e2e.server.client(), NS);
    for name in ["b", "d"] {
        pods.delete(name, &Default::default()).await.unwrap();
        wait_for("the pod gone", || e2e.phase(name).is_none().then_some(())).await;
    }
    e2e.submit(MigPod::new(NS, "whole").slice("7g.80gb", 1).run_seconds(3600.0).build()).await;
    e2e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_protection_the_plan_moves_a_pod_to_make_room() {
    let e2e = fragmented(false).await;
    wait_for("the whole-GPU pod running", || e2e.running(&["whole"]).then_some(())).await;
    let evicted = e2e.evictions();
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    assert!(["ml/a", "ml/c"].contains(&evicted[0].as_str()), "{evicted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_not_disrupt_pod_is_never_evicted() {
    let e2e = fragmented(true).await;
    // The controller says on the pod why it cannot help.
    let note = wait_for("the waiting pod's event", || {
        e2e.server.objects::<k8s_openapi::api::events::v1::Event>().into_iter().find_map(|e| {
            (e.regarding.as_ref()?.name.as_deref() == Some("whole")
                && e.reason.as_deref() == Some("NoSlicePlanned"))
            .then(|| e.note.unwrap_or_default())
        })
    })
    .await;
    assert!(note.contains("7g.80gb"), "{note}");
    assert!(e2e.evictions().is_empty(), "{:?}", e2e.evictions());
    assert!(e2e.running(&["a", "c"]));
    assert_eq!(e2e.phase("whole").as_deref(), Some("Pending"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_the_controller_and_an_agent_mid_rollout_still_converges() {
    let e2e_spec = two_nodes().with_nvml_latency(std::time::Duration::from_millis(200));
    let mut e2e = E2e::new(&e2e_spec, policy(PolicyMode::Auto, false)).await;
    let pods =
        ["small-0", "small-1", "small-2", "small-3", "small-4", "small-5", "small-6", "small-7", "small-8"];
    submit_small(&e2e, &pods).await;
    // As soon as a node starts reconfiguring, kill both the controller and that node's agent.
    let node = wait_for("a node reconfiguring", || {
        e2e.cluster.node_names().into_iter().find(|n| e2e.mignode(n).and_then(|m| m.spec.plan).is_some())
    })
    .await;
    e2e.kill_controller();
    e2e.kill_agent(&node);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    e2e.start_agent(&node, None);
    e2e.start_controller();
    wait_for("every pod running", || e2e.running(&pods).then_some(())).await;
    wait_for("nodes settled and uncordoned", || e2e.settled().then_some(())).await;
    assert!(e2e.plans().iter().all(|p| p.phase() != MigPlanPhase::Failed), "{:?}", e2e.plans());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_node_scenario_finishes() {
    let spec = ClusterSpec::uniform("gpu", 100, "A100-80GB", 8, WHOLE);
    let mut wide = policy(PolicyMode::Auto, false);
    wide.spec.disruption.max_nodes_reconfiguring = 20;
    let e2e = E2e::with_poll(&spec, wide, std::time::Duration::from_secs(1)).await;
    let names: Vec<String> = (0..60).map(|i| format!("p-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let profile = ["1g.10gb", "2g.20gb", "3g.40gb"][i % 3];
        e2e.submit(MigPod::new(NS, name).slice(profile, 1).run_seconds(3600.0).build()).await;
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    wait_for("all 60 pods running", || e2e.running(&refs).then_some(())).await;
    wait_for("nodes settled", || e2e.settled().then_some(())).await;
}
