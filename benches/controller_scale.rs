//! The controller at the upstream scalability envelope: 5,000 nodes x 8 H100-80GB and 150,000
//! pods (Kubernetes' "Considerations for large clusters": at most 5,000 nodes and 150,000
//! pods), seeded into the in-memory API server from the same generator as the `plan_snapshot`
//! bench (`geometer_testkit::kubectl_snapshot`: kubelet-shaped Nodes, the agents' MigNodes,
//! Running pods on their slices). The controller runs as its own process over HTTP. No agents
//! and no rollout: the policy is DryRun, so this measures what the controller itself holds and
//! how fast it plans, not the nodes' reconfiguration (`operator_scale` does that at 1,000 nodes).
//!
//! Once the controller is ready, the pending pods (one in fifteen, marked Unschedulable as the
//! scheduler would) arrive at once; the batch window then closes `IDLE` seconds later.
//!
//! Prints: the cache fill time and RSS, the time from the window closing to the plan being
//! published, and the controller's peak RSS.
//!
//! Run: `cargo bench --bench controller_scale` (env `SCALE_NODES`, `SCALE_PODS`).
#![allow(clippy::unwrap_used)] // benchmark code: a failed unwrap is a failed run

use std::time::{Duration, Instant};

use geometer_api::{MigPlan, MigPolicy};
use geometer_apiserver::ApiServer;
use serde_json::{json, Value};

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

const IDLE: u32 = 2;

fn policy() -> MigPolicy {
    serde_json::from_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "scale"},
        "spec": {"mode": "DryRun", "batching": {"idleSeconds": IDLE, "maxSeconds": 10}, "stabilisationSeconds": 0,
            "solver": {"timeLimitMs": 10_000}}}))
    .unwrap()
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // Cargo passes `--bench` only under `cargo bench`; `cargo test --all-targets` runs this as a
    // smoke test on a small cluster.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let nodes = env_or("SCALE_NODES", if smoke { 20 } else { 5_000 });
    let pods = env_or("SCALE_PODS", nodes * 30);
    let pending = pods / 15;
    let running = pods - pending;

    let t = Instant::now();
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).unwrap();
    }
    for n in 0..20 {
        server
            .seed_value(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("team-{n}")}}),
            )
            .unwrap();
    }
    let Value::Array(items) =
        geometer_testkit::kubectl_snapshot::kubectl_list(nodes, 1, running, pending)["items"].take()
    else {
        panic!("a List")
    };
    let is_pending = |item: &Value| item["status"]["phase"] == "Pending";
    let (later, now): (Vec<Value>, Vec<Value>) = items.into_iter().partition(is_pending);
    for item in now {
        server.seed_value(item).unwrap();
    }
    server.seed(&policy()).unwrap();
    let seeded = t.elapsed();

    let controller = Controller::start(&server).await;
    let pid = controller.pid();
    let cache_fill = controller.ready(Duration::from_secs(600)).await;
    let (ready_rss, _) = memory(pid);

    let first = Instant::now();
    for item in later {
        server.seed_value(item).unwrap();
    }
    let last = Instant::now();
    let window_closes = (last + Duration::from_secs(IDLE.into())).min(first + Duration::from_secs(10));
    let published =
        wait("a plan", Duration::from_secs(300), || !server.objects::<MigPlan>().is_empty()).await;
    let plan = server.objects::<MigPlan>().remove(0);
    let (peak, rss) = memory(pid);
    let mut table = report::Report::new(
        "controller_scale",
        "cargo bench --bench controller_scale",
        format!("{nodes} nodes x 8 H100-80GB, {running} running and {pending} pending pods in the in-memory API server; the controller in its own process"),
    );
    table.line("| measure | value |");
    table.line("|---|---|");
    table.line(format!(
        "| cluster | {nodes} nodes x 8 H100-80GB = {} GPUs, {running} running + {pending} pending pods, {nodes} MigNodes |",
        nodes * 8
    ));
    table.line(format!("| seeding the in-memory API server | {:.2} s |", seeded.as_secs_f64()));
    table.line(format!("| controller cache fill to /readyz | {:.2} s |", cache_fill.as_secs_f64()));
    table.line(format!("| controller RSS when ready | {ready_rss:.0} MiB |"));
    table.line(format!("| pending pods seeded in | {:.2} s |", (last - first).as_secs_f64()));
    table.line(format!(
        "| batch window closes (last pod + idle {IDLE} s) -> plan published | {} |",
        signed(published, window_closes)
    ));
    table.line(format!("| plan: solver time | {} ms |", plan.spec.solve_ms));
    table.line(format!(
        "| plan: GPUs changed / nodes / pods helped | {} / {} / {} |",
        plan.spec.summary.gpus_changed, plan.spec.summary.nodes_changed, plan.spec.summary.pods_helped
    ));
    table.line(format!("| controller peak RSS (VmHWM) / RSS at end | {peak:.0} MiB / {rss:.0} MiB |"));
    assert!(plan.spec.summary.pods_helped > 0, "the plan helps no pending pod");
    table.write();
    drop(controller);
}
