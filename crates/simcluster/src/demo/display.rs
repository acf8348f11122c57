//! What the demo prints while it runs: every plan (with its GPU changes), each node's
//! progress through the agent's phases, evictions, re-advertised slices, and every couple of
//! seconds a line with running pods, pending demand per profile and memory slices in use.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, ResourceExt};

use crate::SimEvent;
use geometer_api::{MigNode, MigNodePhase, MigPlan, MigPlanPhase, PolicyMode, StepAction};

/// Where the demo's lines go, each with the time since the demo started.
#[derive(Clone)]
pub struct Console {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
    start: Instant,
}

impl Console {
    pub fn new(out: Box<dyn Write + Send>) -> Console {
        Console { out: Arc::new(Mutex::new(out)), start: Instant::now() }
    }

    pub fn stdout() -> Console {
        Console::new(Box::new(std::io::stdout()))
    }

    /// One line, prefixed with the elapsed time.
    pub fn say(&self, line: impl AsRef<str>) {
        let elapsed = self.start.elapsed().as_secs_f64();
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "[{elapsed:6.1}s] {}", line.as_ref());
        let _ = out.flush();
    }

    /// Text as it is, without a time prefix (headers, the summary).
    pub fn raw(&self, text: impl AsRef<str>) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = write!(out, "{}", text.as_ref());
        let _ = out.flush();
    }
}

/// `1g.10gb×3 2g.20gb×1`.
pub fn counts(map: &BTreeMap<String, u64>) -> String {
    if map.values().all(|v| *v == 0) {
        return "none".into();
    }
    map.iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{}×{v}", geometer_api::resources::device_profile(k).unwrap_or(k)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn geometry(list: &[geometer_api::PlacedInstance]) -> String {
    if list.is_empty() {
        return "(empty)".into();
    }
    list.iter().map(|p| p.profile.as_str()).collect::<Vec<_>>().join("+")
}

/// A changed GPU before and after, each as a row of its placement units (as `geometer plan`
/// draws them); the profile lists where the catalog cannot draw the model.
fn before_after(g: &geometer_api::GpuChange) -> Vec<String> {
    let names = |list: &[geometer_api::PlacedInstance]| -> Vec<geometer_solver::plan::PlacedName> {
        list.iter()
            .map(|p| geometer_solver::plan::PlacedName { profile: p.profile.clone(), start: p.start })
            .collect()
    };
    let model = geometer_solver::catalog::Catalog::builtin().find(&g.model);
    let rows = model.and_then(|m| {
        let before = geometer_solver::plan::slots::row(m, &names(&g.from))?;
        let after = geometer_solver::plan::slots::row(m, &names(&g.to))?;
        Some(vec![format!("      before: {before}"), format!("      after:  {after}")])
    });
    rows.unwrap_or_else(|| vec![format!("      {} -> {}", geometry(&g.from), geometry(&g.to))])
}

/// Prints each plan when it appears and each change of its phase.
pub async fn follow_plans(
    client: kube::Client,
    console: Console,
    mode: PolicyMode,
    kubeconfig: Option<String>,
) {
    let mut phases: BTreeMap<String, MigPlanPhase> = BTreeMap::new();
    let stream = watcher(Api::<MigPlan>::all(client), watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let plan = match event {
            Ok(Event::Apply(p)) | Ok(Event::InitApply(p)) => p,
            _ => continue,
        };
        let name = plan.name_any();
        let phase = plan.phase();
        match phases.insert(name.clone(), phase) {
            None => {
                let s = plan.spec.summarize();
                console.say(format!(
                    "plan {name}: helps {} pending pods, changes {} GPUs on {} nodes, evicts {}{}  (solved in {} ms)",
                    s.pods_helped,
                    s.gpus_changed,
                    s.nodes_changed,
                    s.evictions,
                    if s.pods_unmet > 0 { format!(", leaves {} unmet", s.pods_unmet) } else { String::new() },
                    plan.spec.solve_ms
                ));
                for node in &plan.spec.nodes {
                    for g in node.gpus.iter().filter(|g| g.changes()) {
                        console.say(format!("    {} GPU {} ({}):", node.node, g.index, g.model));
                        for line in before_after(g) {
                            console.say(line);
                        }
                    }
                }
                for e in &plan.spec.evictions {
                    console.say(format!("    evict {}/{} on {}: {}", e.namespace, e.name, e.node, e.reason));
                }
                if mode == PolicyMode::Approve && phase == MigPlanPhase::Proposed {
                    let env = kubeconfig.as_deref().map(|k| format!("KUBECONFIG={k} ")).unwrap_or_default();
                    console.say(format!("    approve with: {env}kubectl patch migplan {name} --type=merge -p '{{\"spec\":{{\"approved\":true}}}}'"));
                }
            }
            Some(old) if old != phase => {
                let message = plan
                    .status
                    .as_ref()
                    .and_then(|s| s.message.clone())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                console.say(format!("plan {name}: {phase:?}{message}"));
            }
            Some(_) => {}
        }
    }
}

/// Prints each node's phase changes and its evictions.
pub async fn follow_nodes(client: kube::Client, console: Console) {
    let mut seen: BTreeMap<String, (MigNodePhase, Option<String>)> = BTreeMap::new();
    let stream = watcher(Api::<MigNode>::all(client), watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let node = match event {
            Ok(Event::Apply(n)) | Ok(Event::InitApply(n)) => n,
            _ => continue,
        };
        let Some(status) = &node.status else { continue };
        let name = node.name_any();
        let evicting =
            status.step.as_ref().filter(|s| s.action == StepAction::Evict).and_then(|s| s.pod.clone());
        let now = (status.phase, evicting.clone());
        let before = seen.insert(name.clone(), now.clone());
        if before.as_ref() == Some(&now) {
            continue;
        }
        if let Some(pod) = evicting {
            console.say(format!("node {name}: evicting {pod}"));
            continue;
        }
        let first = before.is_none();
        match status.phase {
            MigNodePhase::Ready if first => {}
            MigNodePhase::Ready => console
                .say(format!("node {name}: Ready ({})", node.spec.plan.as_deref().unwrap_or("no plan"))),
            MigNodePhase::Observing => {}
            MigNodePhase::Failed => {
                let why = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Failed")
                    .map(|c| c.message.clone())
                    .unwrap_or_default();
                console.say(format!("node {name}: Failed: {why}"));
            }
            phase => console.say(format!("node {name}: {phase:?}")),
        }
    }
}

/// Prints slices the device plugins (or NVIDIA's DRA driver's kubelet plugins) advertise after
/// a restart (the first start is the initial state, shown once at the top).
pub async fn follow_cluster(mut events: tokio::sync::broadcast::Receiver<SimEvent>, console: Console) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match events.recv().await {
            Ok(SimEvent::Advertised { node, resources, start }) if start > 1 => {
                console.say(format!("node {node}: GPU plugin restarted, advertises {}", counts(&resources)));
            }
            Ok(SimEvent::AdmissionFailed { pod, node, message }) => {
                console.say(format!("kubelet on {node} refused {pod}: {message}"))
            }
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}
