//! The whole operator at scale: 1,000 simulated nodes x 8 H100s, 9,000 running pods, then a
//! demand shift of 1,000 pods for a profile no GPU offers. The controller runs as its own
//! process (`geometer controller`) against the in-memory API server over HTTP, so its memory is
//! its own; the simulated cluster and one real agent per node run in this process.
//!
//! Prints: the controller's peak RSS, the time from the batch window closing to the plan being
//! published, and from the shift to every shifted pod running.
//!
//! Run: `cargo bench --bench operator_scale` (env `SCALE_NODES` to change the node count).
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use geometer_api::{Batching, Disruption, MigPlan, MigPolicy, MigPolicySpec, PolicyMode, SolverLimits};
use geometer_apiserver::ApiServer;
use geometer_simcluster::{ClusterSpec, MigPod, SimCluster};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::PostParams;
use kube::Api;

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/proc_memory.rs"]
mod proc_memory;
#[path = "support/report.rs"]
mod report;
#[path = "support/timing.rs"]
mod timing;
use controller_process::Controller;
use proc_memory::memory;
use timing::{signed, wait};

const GPUS_PER_NODE: usize = 8;
const SEVEN_SMALL: &[(&str, u8)] = &[
    ("1g.10gb", 0),
    ("1g.10gb", 1),
    ("1g.10gb", 2),
    ("1g.10gb", 3),
    ("1g.10gb", 4),
    ("1g.10gb", 5),
    ("1g.10gb", 6),
];
const IDLE: u32 = 2;

fn policy() -> MigPolicy {
    MigPolicy::new(
        "scale",
        MigPolicySpec {
            node_selector: Default::default(),
            mode: PolicyMode::Auto,
            allowed_profiles: Vec::new(),
            headroom: BTreeMap::new(),
            allowed_modes: Vec::new(),
            min_whole_gpus: None,
            forecast_window_seconds: 0,
            batching: Batching { idle_seconds: IDLE, max_seconds: 10 },
            stabilisation_seconds: 0,
            shape_empty_gpus: true,
            disruption: Disruption {
                eviction_allowed: false,
                max_nodes_reconfiguring: 100,
                drain_timeout_seconds: 120,
                ..Disruption::default()
            },
            solver: SolverLimits { time_limit_ms: 10_000, ..SolverLimits::default() },
            rightsizing: None,
            dynamic_mig: None,
        },
    )
}

fn unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // Cargo passes `--bench` only under `cargo bench`; `cargo test --all-targets` runs this as a
    // smoke test on a small cluster.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let default_nodes = if smoke { 10 } else { 1_000 };
    let nodes: usize =
        std::env::var("SCALE_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(default_nodes);
    let running_pods = nodes * 9;
    let shifted_pods = nodes;
    let t = Instant::now();
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).unwrap();
    }
    server
        .seed(&serde_json::from_value::<Namespace>(serde_json::json!({"metadata": {"name": "ml"}})).unwrap())
        .unwrap();
    let spec = ClusterSpec::uniform("gpu", nodes, "H100-80GB", GPUS_PER_NODE, SEVEN_SMALL);
    let cluster = SimCluster::start(&server, &spec).await.expect("cluster");
    Api::<MigPolicy>::all(server.client()).create(&PostParams::default(), &policy()).await.unwrap();
    let mut agents = Vec::new();
    for node in cluster.node_names() {
        let mut cfg = cluster.agent_config(&node);
        cfg.poll_interval = Duration::from_secs(5);
        agents.push(cluster.spawn_agent(&node, cfg));
    }
    let pods: Api<Pod> = Api::namespaced(server.client(), "ml");
    for i in 0..running_pods {
        pods.create(
            &PostParams::default(),
            &MigPod::new("ml", &format!("small-{i:05}"))
                .slice("1g.10gb", 1)
                .resources("1", "4Gi")
                .run_seconds(1e6)
                .build(),
        )
        .await
        .unwrap();
    }
    wait("the first pods running", Duration::from_secs(900), || {
        server
            .objects::<Pod>()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some("ml") && phase(p) == Some("Running"))
            .count()
            == running_pods
    })
    .await;
    let inventories = wait("every agent's inventory", Duration::from_secs(600), || {
        server
            .objects::<geometer_api::MigNode>()
            .iter()
            .filter(|m| m.status.as_ref().is_some_and(|s| !s.gpus.is_empty()))
            .count()
            == nodes
    })
    .await;
    let setup = inventories - t;

    let controller = Controller::start(&server).await;
    let pid = controller.pid();
    // Ready once its caches hold the whole cluster.
    let cache_fill = controller.ready(Duration::from_secs(300)).await;
    let (idle_rss, _) = memory(pid);

    // The shift: pods for 3g.40gb, which no GPU offers.
    let shift = Instant::now();
    for i in 0..shifted_pods {
        pods.create(
            &PostParams::default(),
            &MigPod::new("ml", &format!("big-{i:05}"))
                .slice("3g.40gb", 1)
                .resources("4", "32Gi")
                .run_seconds(1e6)
                .build(),
        )
        .await
        .unwrap();
    }
    let is_big = |p: &Pod| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("big-"));
    // Demand appears as the scheduler marks each pod; a round may start (max window) and pods
    // may be bound before the last is marked, so count each pod once it was marked or bound.
    let mut marked: std::collections::BTreeSet<String> = Default::default();
    let mut first_marked = None;
    let all_marked = wait("the shifted pods marked Unschedulable", Duration::from_secs(600), || {
        for p in server.objects::<Pod>().iter().filter(|p| {
            is_big(p) && (unschedulable(p) || p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        }) {
            if marked.insert(p.metadata.name.clone().unwrap_or_default()) && first_marked.is_none() {
                first_marked = Some(Instant::now());
            }
        }
        marked.len() == shifted_pods
    })
    .await;
    let all_unschedulable = all_marked;
    // The batch opens with the first marked pod and closes idle seconds after the last change,
    // or max seconds after it opened, whichever comes first.
    let window_closes = (all_marked + Duration::from_secs(IDLE.into()))
        .min(first_marked.unwrap_or(all_marked) + Duration::from_secs(10));
    let published =
        wait("a plan", Duration::from_secs(300), || !server.objects::<MigPlan>().is_empty()).await;
    let plan = server.objects::<MigPlan>().remove(0);
    let succeeded = wait("the plan Succeeded", Duration::from_secs(1800), || {
        server.objects::<MigPlan>().iter().any(|p| p.phase() == geometer_api::MigPlanPhase::Succeeded)
    })
    .await;
    let plans = server.objects::<MigPlan>().len();
    let running = wait("the shifted pods running", Duration::from_secs(1800), || {
        server.objects::<Pod>().iter().filter(|p| is_big(p) && phase(p) == Some("Running")).count()
            == shifted_pods
    })
    .await;
    let (peak, rss) = memory(pid);
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let mut table = report::Report::new(
        "operator_scale",
        "cargo bench --bench operator_scale",
        format!("{nodes} simulated nodes x {GPUS_PER_NODE} H100-80GB, {running_pods} running pods, then {shifted_pods} pods of a new shape; the controller in its own process, one agent per node"),
    );
    table.line("| measure | value |");
    table.line("|---|---|");
    table.line(format!("| cluster | {nodes} nodes x {GPUS_PER_NODE} H100-80GB = {} GPUs, {running_pods} running pods + {shifted_pods} shifted pods |", nodes * GPUS_PER_NODE));
    table.line(format!("| setup (cluster, pods running, agent inventories) | {} |", secs(setup)));
    table.line(format!("| controller cache fill to /readyz | {} |", secs(cache_fill)));
    table.line(format!("| controller RSS when ready | {idle_rss:.0} MiB |"));
    table.line(format!(
        "| shift submitted -> last pod marked Unschedulable | {} |",
        secs(all_unschedulable - shift)
    ));
    table.line(format!("| batch window closes (last change + idle {IDLE} s, or first + max 10 s) -> first plan published | {} |", signed(published, window_closes)));
    table.line(format!("| first plan: solver time | {} ms |", plan.spec.solve_ms));
    table.line(format!(
        "| first plan: GPUs changed / nodes / pods helped | {} / {} / {} |",
        plan.spec.summary.gpus_changed, plan.spec.summary.nodes_changed, plan.spec.summary.pods_helped
    ));
    table.line(format!("| plans published in all | {plans} |"));
    table.line(format!("| first plan published -> a plan Succeeded (every node cordoned, repartitioned, re-advertised, uncordoned) | {} |", secs(succeeded - published)));
    table.line(format!(
        "| plan Succeeded -> every shifted pod running (simulated scheduler and kubelet) | {} |",
        secs(running - succeeded)
    ));
    table.line(format!("| shift submitted -> every shifted pod running | {} |", secs(running - shift)));
    table.line(format!("| controller peak RSS (VmHWM) / RSS at end | {peak:.0} MiB / {rss:.0} MiB |"));
    table.write();
    drop(controller);
    for a in agents {
        a.abort();
    }
}
