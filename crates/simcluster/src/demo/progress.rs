//! The demo's clock: samples slice usage, prints a progress line every tick, decides when the
//! workload is over; and two helpers that watch the API: when nodes start and stop changing,
//! and (in Approve mode) a reviewer who approves each proposed plan.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, ResourceExt};

use super::display::{counts, Console};
use super::scenario::Scenario;
use super::summary::UsageSample;
use super::workload::{Arrival, WORKLOAD_LABEL};
use super::{DemoOptions, NAMESPACE};
use crate::{pod_requests, SimCluster};
use geometer_api::{MigNode, MigNodePhase, MigPlan, MigPlanPhase, PolicyMode};

/// When nodes started and finished changing, for the before/after utilisation.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Milestones {
    pub first_change: Option<Instant>,
    /// When the first node finished its first reconfiguration.
    pub first_ready: Option<Instant>,
}

/// What the clock gathered.
pub(super) struct Progress {
    pub samples: Vec<UsageSample>,
    /// When the last pod of the workload was due.
    pub last_arrival: Instant,
}

const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Pending pods of the workload's arrivals per MIG resource, and running ones (the `chat`
/// service runs on after the workload, so it is not counted).
async fn pod_counts(client: &kube::Client) -> (BTreeMap<String, u64>, usize) {
    let mut pending = BTreeMap::new();
    let mut running = 0;
    let arrivals = ListParams::default().labels(&format!("{}={}", WORKLOAD_LABEL.0, WORKLOAD_LABEL.1));
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE).list(&arrivals).await;
    for pod in pods.map(|l| l.items).unwrap_or_default().iter() {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some();
        if phase == Some("Running") {
            running += 1;
        } else if !bound && matches!(phase, None | Some("Pending")) {
            for (k, v) in
                pod_requests(pod).into_iter().filter(|(k, _)| geometer_api::resources::is_mig_resource(k))
            {
                *pending.entry(k).or_insert(0) += (v / 1000) as u64;
            }
        }
    }
    (pending, running)
}

fn phase_name(scenario: &Scenario, scenario_s: f64, duration_s: f64) -> &'static str {
    let mut end = 0.0;
    for p in &scenario.phases {
        end += p.share * duration_s;
        if scenario_s < end {
            return p.name;
        }
    }
    "winding down"
}

/// Runs until the workload is over: the last pod arrived and nothing runs or waits any more
/// (in DryRun, nothing runs: waiting pods never get slices), or a deadline passes.
pub(super) async fn watch(
    client: &kube::Client,
    cluster: &SimCluster,
    scenario: &Scenario,
    options: &DemoOptions,
    arrivals: &[Arrival],
    console: &Console,
) -> Progress {
    let start = Instant::now();
    let last_at = arrivals.last().map_or(0.0, |a| a.at);
    let last_arrival = start + Duration::from_secs_f64(last_at / options.speed);
    let longest_run = scenario.phases.iter().map(|p| p.run_seconds.1).fold(0.0, f64::max);
    let grace = if options.wait_for_approval { 600.0 } else { 30.0 };
    let deadline = last_arrival + Duration::from_secs_f64(longest_run / options.speed + grace);
    let mut samples = Vec::new();
    let mut next_tick = start + options.tick;
    let mut last_tick = start;
    loop {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let now = Instant::now();
        let usage = cluster.slice_usage();
        samples.push(UsageSample { at: now, used: usage.used, total: usage.total });
        let (pending, running) = pod_counts(client).await;
        let waiting: u64 = pending.values().sum();
        let over = now >= last_arrival
            && running == 0
            && (waiting == 0
                || options.mode == PolicyMode::DryRun
                || (options.mode == PolicyMode::Approve
                    && !options.wait_for_approval
                    && no_plan_in_flight(client).await));
        if now >= next_tick || over {
            let runs = cluster.ledger().runs();
            let started = runs.values().filter(|r| r.started >= last_tick).count();
            let ended = runs.values().filter(|r| r.ended.is_some_and(|(t, _)| t >= last_tick)).count();
            let scenario_s = now.duration_since(start).as_secs_f64() * options.speed;
            console.say(format!(
                "-- {:<15} running {running:>3}, waiting {waiting:>3} ({}), +{started} started, +{ended} ended, memory slices in use {}/{} ({:.0}%)",
                phase_name(scenario, scenario_s, options.duration_s),
                counts(&pending),
                usage.used,
                usage.total,
                usage.fraction() * 100.0
            ));
            last_tick = now;
            next_tick = now + options.tick;
        }
        if over || now >= deadline {
            if now >= deadline && !over {
                console.say("deadline reached; stopping with pods still running or waiting");
            }
            return Progress { samples, last_arrival };
        }
    }
}

async fn no_plan_in_flight(client: &kube::Client) -> bool {
    let plans = Api::<MigPlan>::all(client.clone()).list(&Default::default()).await;
    plans.is_ok_and(|l| l.items.iter().all(|p| p.status.as_ref().is_some_and(|s| s.phase.is_final())))
}

/// Notes when the first node starts changing and when the last change ends.
pub(super) async fn track_milestones(client: kube::Client, milestones: Arc<Mutex<Milestones>>) {
    let mut changing: BTreeMap<String, bool> = BTreeMap::new();
    let stream = watcher(Api::<MigNode>::all(client), watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let Ok(Event::Apply(node) | Event::InitApply(node)) = event else { continue };
        let Some(phase) = node.status.as_ref().map(|s| s.phase) else { continue };
        let busy = !matches!(phase, MigNodePhase::Ready | MigNodePhase::Observing | MigNodePhase::Failed);
        let was = changing.insert(node.name_any(), busy).unwrap_or(false);
        let mut m = milestones.lock().unwrap_or_else(|p| p.into_inner());
        if busy {
            m.first_change.get_or_insert_with(Instant::now);
        } else if was {
            m.first_ready.get_or_insert_with(Instant::now);
        }
    }
}

/// Plays the reviewer in Approve mode: approves each proposed plan a moment after it was
/// printed, with the same merge patch as the printed kubectl command.
pub(super) async fn approve_plans(client: kube::Client, console: Console) {
    let api: Api<MigPlan> = Api::all(client);
    let stream = watcher(api.clone(), watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut done = std::collections::BTreeSet::new();
    while let Some(event) = stream.next().await {
        let Ok(Event::Apply(plan) | Event::InitApply(plan)) = event else { continue };
        let phase = plan.phase();
        let name = plan.name_any();
        if plan.spec.approved || phase != MigPlanPhase::Proposed || !done.insert(name.clone()) {
            continue;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let patch = serde_json::json!({"spec": {"approved": true}});
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => console.say(format!(
                "plan {name}: approved by the demo's reviewer (use --wait-for-approval to do it yourself)"
            )),
            Err(e) => console.say(format!("plan {name}: could not approve: {e}")),
        }
    }
}
