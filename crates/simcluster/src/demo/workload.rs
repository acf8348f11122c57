//! The demo's workload: pods asking for MIG slices, arriving as a seeded Poisson process whose
//! profile mix follows the scenario's phases, and a player that submits them on time and, like
//! a Job controller, submits a replacement for a pod evicted while it ran.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::broadcast::error::RecvError;

use super::scenario::Scenario;
use crate::{Ledger, MigPod, SimEvent};

/// Label on every demo workload pod.
pub const WORKLOAD_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "geometer-demo");

/// One pod to submit.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// Scenario seconds from the start.
    pub at: f64,
    pub name: String,
    pub profile: &'static str,
    /// Scenario seconds the pod runs.
    pub run_seconds: f64,
    pub phase: usize,
}

/// Every arrival of the workload, in order: the same seed gives the same list.
pub fn arrivals(scenario: &Scenario, nodes: usize, duration_s: f64, seed: u64) -> Vec<Arrival> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut start = 0.0;
    for (index, phase) in scenario.phases.iter().enumerate() {
        let end = start + phase.share * duration_s;
        let rate = phase.arrivals_per_node_second * nodes as f64;
        let total_weight: u32 = phase.mix.iter().map(|(_, w)| w).sum();
        let prefix = phase.name.split_whitespace().next().unwrap_or("pod");
        let mut t = start;
        let mut n = 0;
        loop {
            // Exponential gaps: a Poisson process at `rate`.
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            t += -u.ln() / rate;
            if t >= end {
                break;
            }
            let mut pick = rng.random_range(0..total_weight);
            let profile = phase
                .mix
                .iter()
                .find(|(_, w)| {
                    (pick < *w) || {
                        pick -= w;
                        false
                    }
                })
                .map(|(p, _)| *p)
                .expect("weights");
            let run_seconds = rng.random_range(phase.run_seconds.0..=phase.run_seconds.1);
            n += 1;
            out.push(Arrival { at: t, name: format!("{prefix}-{n:03}"), profile, run_seconds, phase: index });
        }
        start = end;
    }
    out
}

/// A pod the player created.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    pub name: String,
    /// Name of the arrival this pod (or the pod it replaces) came from.
    pub original: String,
    pub profile: &'static str,
    pub phase: usize,
    pub at: Instant,
    /// Replaces a pod that was evicted (the n-th replacement of the original).
    pub retry: u32,
}

/// Every pod submitted, by uid.
#[derive(Debug, Clone, Default)]
pub struct Submissions(Arc<Mutex<BTreeMap<String, Submitted>>>);

impl Submissions {
    fn insert(&self, uid: String, s: Submitted) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(uid, s);
    }

    pub fn all(&self) -> BTreeMap<String, Submitted> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn by_key(&self, key: &str, namespace: &str) -> Option<Submitted> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find(|s| geometer_solver::PodKey::new(namespace, &s.name) == key)
            .cloned()
    }
}

/// Submits the arrivals at their time (scenario seconds / `speed`), and replacements for
/// evicted pods, until the last arrival; replacements keep coming until the task is dropped.
pub async fn play(
    client: kube::Client,
    namespace: String,
    arrivals: Vec<Arrival>,
    speed: f64,
    ledger: Arc<Ledger>,
    submissions: Submissions,
) {
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let started = tokio::time::Instant::now();
    let mut events = ledger.subscribe();
    let mut queue = arrivals.into_iter().peekable();
    let mut run_time: BTreeMap<String, f64> = BTreeMap::new();
    loop {
        let next_at = queue.peek().map(|a| started + Duration::from_secs_f64(a.at / speed));
        tokio::select! {
            _ = sleep_until(next_at) => {
                let a = queue.next().expect("peeked");
                run_time.insert(a.name.clone(), a.run_seconds);
                let s = Submitted { name: a.name.clone(), original: a.name, profile: a.profile, phase: a.phase, at: Instant::now(), retry: 0 };
                submit(&pods, &namespace, &submissions, s, a.run_seconds / speed).await;
            }
            event = events.recv() => match event {
                Ok(SimEvent::Stopped { pod, .. }) => {
                    let Some(gone) = submissions.by_key(&pod, &namespace) else { continue };
                    let retry = gone.retry + 1;
                    let seconds = run_time.get(&gone.original).copied().unwrap_or(10.0) / speed;
                    let name = format!("{}-r{retry}", gone.original);
                    let s = Submitted { name, original: gone.original, profile: gone.profile, phase: gone.phase, at: Instant::now(), retry };
                    submit(&pods, &namespace, &submissions, s, seconds).await;
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn submit(
    pods: &Api<Pod>,
    namespace: &str,
    submissions: &Submissions,
    mut s: Submitted,
    run_seconds: f64,
) {
    let pod = whole_gpu_workload(MigPod::new(namespace, &s.name), s.profile)
        .slice(s.profile, 1)
        .resources("2", "16Gi")
        .run_seconds((run_seconds * 1000.0).round() / 1000.0)
        .label(WORKLOAD_LABEL.0, WORKLOAD_LABEL.1)
        .label("geometer.dev/profile", s.profile)
        .build();
    s.at = Instant::now();
    match pods.create(&PostParams::default(), &pod).await {
        Ok(created) => submissions.insert(created.uid().unwrap_or_default(), s),
        Err(e) => tracing::warn!(pod = %s.name, error = %e, "demo workload: cannot create pod"),
    }
}

/// Whole-GPU jobs run on the Hopper nodes (see [`super::scenario::WHOLE_GPU_MODEL`]): training
/// jobs that use most of their GPU.
fn whole_gpu_workload(pod: MigPod, profile: &str) -> MigPod {
    if profile != geometer_solver::catalog::WHOLE {
        return pod;
    }
    pod.node_selector("geometer.dev/gpu-model", super::scenario::WHOLE_GPU_MODEL).uses(60_000, 85)
}

/// The over-provisioned Deployment of the demo and its ReplicaSet's hash.
pub const CHAT: (&str, &str) = ("chat", "5f6d8c");
/// Its replicas.
pub const CHAT_REPLICAS: i32 = 2;

/// The `chat` service: a small model that uses 7,000 MiB and 5% of the whole GPU each replica
/// asks for (right-sizing finds it). It runs for the whole demo and after, as a service does,
/// on the Hopper nodes, and is not evicted. Where the cluster runs a Deployment controller (a
/// real control plane) it is a real Deployment; the in-memory API server serves no `apps/v1`,
/// so there its replicas are pods that name a ReplicaSet of it.
pub async fn start_chat(client: &kube::Client, namespace: &str) -> Result<(), String> {
    let replica = |name: &str| {
        MigPod::new(namespace, name)
            .gpus(1)
            .node_selector("geometer.dev/gpu-model", super::scenario::WHOLE_GPU_MODEL)
            .uses(7_000, 5)
            .resources("2", "16Gi")
            .annotation(geometer_api::DO_NOT_DISRUPT_ANNOTATION, "true")
            .label("app", CHAT.0)
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = deployment(namespace, replica(CHAT.0).build())?;
    match deployments.create(&PostParams::default(), &deployment).await {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(format!("cannot create deployment/{}: {e}", CHAT.0)),
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for i in 0..CHAT_REPLICAS {
        let name = format!("{}-{}-{i}", CHAT.0, CHAT.1);
        let pod = replica(&name).of_deployment(CHAT.0, CHAT.1).build();
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| format!("cannot create pod {name}: {e}"))?;
    }
    Ok(())
}

/// The Deployment of [`CHAT_REPLICAS`] pods like `template`.
fn deployment(namespace: &str, template: Pod) -> Result<Deployment, String> {
    let mut spec = serde_json::to_value(template.spec.unwrap_or_default()).map_err(|e| e.to_string())?;
    spec["restartPolicy"] = serde_json::json!("Always");
    let deployment = serde_json::json!({
        "metadata": {"name": CHAT.0, "namespace": namespace},
        "spec": {
            "replicas": CHAT_REPLICAS,
            "selector": {"matchLabels": {"app": CHAT.0}},
            "template": {"metadata": {"labels": template.metadata.labels, "annotations": template.metadata.annotations}, "spec": spec},
        },
    });
    serde_json::from_value(deployment).map_err(|e| format!("the chat Deployment does not read back: {e}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_workload_and_the_mix_shifts() {
        let s = Scenario::default_with(4, Duration::ZERO);
        let a = arrivals(&s, 4, 120.0, 7);
        assert_eq!(a, arrivals(&s, 4, 120.0, 7));
        assert_ne!(a, arrivals(&s, 4, 120.0, 8));
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at) && a.last().unwrap().at < 120.0);
        // The inference burst is mostly 1g.10gb; training has none of it as its main profile.
        let share = |phase: usize, profile: &str| {
            let of_phase: Vec<_> = a.iter().filter(|x| x.phase == phase).collect();
            of_phase.iter().filter(|x| x.profile == profile).count() as f64 / of_phase.len() as f64
        };
        assert!(share(1, "1g.10gb") > 0.5, "{}", share(1, "1g.10gb"));
        assert!(share(0, "3g.40gb") > 0.3, "{}", share(0, "3g.40gb"));
        assert!(share(2, "7g.80gb") > 0.25, "{}", share(2, "7g.80gb"));
    }
}
