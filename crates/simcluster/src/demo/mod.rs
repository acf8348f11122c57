//! `geometer demo`: the whole operator in one process on a simulated cluster. The in-memory API
//! server (also served over HTTP for `kubectl`), the simulated nodes, device plugin, scheduler
//! and kubelet, the real controller and one real agent per node; then a seeded workload whose
//! profile mix shifts, shown as it goes, and a summary at the end.

mod baseline;
pub mod display;
mod dra_classes;
mod metrics;
mod operator;
mod progress;
mod rightsizing;
pub mod scenario;
pub mod summary;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use thiserror::Error;

use crate::{NodeSpec, SimCluster, SimClusterError};
use geometer_api::{MigPlan, MigPlanPhase, PolicyMode};
use geometer_apiserver::ApiServer;

pub use display::Console;
pub use operator::{demo_policy, start_controller, start_controller_with, OperatorHandles, POLICY_NAME};
pub use scenario::Scenario;
pub use summary::Summary;

/// Namespace of the demo's workload pods.
pub const NAMESPACE: &str = "ml";

/// How the demo runs; [`DemoOptions::default`] is `geometer demo` without flags.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub mode: PolicyMode,
    pub seed: u64,
    /// Scenario seconds per wall-clock second.
    pub speed: f64,
    pub nodes: usize,
    /// Length of the workload in scenario seconds.
    pub duration_s: f64,
    /// In Approve mode, wait for a person to approve each plan instead of approving it after
    /// printing the command.
    pub wait_for_approval: bool,
    /// How long each NVML call that changes a GPU takes.
    pub nvml_latency: Duration,
    /// Serve the API over HTTP for kubectl (and write a kubeconfig).
    pub serve_http: bool,
    /// Where the kubeconfig goes; a fresh temporary directory when unset.
    pub kubeconfig: Option<PathBuf>,
    /// Keep the API server up after the summary until Ctrl-C.
    pub keep_serving: bool,
    /// Seconds between progress lines.
    pub tick: Duration,
    /// Serve the controller's and the agents' metrics on `/metrics` here.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The nodes' GPUs are advertised by NVIDIA's DRA driver in static MIG mode, not by the
    /// device plugin (a joined cluster only: the in-memory API server has no DRA scheduler).
    pub dra: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            mode: PolicyMode::Auto,
            seed: 1,
            speed: 3.0,
            nodes: 4,
            duration_s: 120.0,
            wait_for_approval: false,
            nvml_latency: Duration::from_millis(40),
            serve_http: true,
            kubeconfig: None,
            keep_serving: false,
            tick: Duration::from_secs(3),
            metrics_addr: None,
            dra: false,
        }
    }
}

#[derive(Debug, Error)]
pub enum DemoError {
    #[error("--speed {0} must be above 0 (1 plays the workload in real time, 3 three times faster)")]
    Speed(f64),
    #[error("--nodes {0} must be between 1 and 1000")]
    Nodes(usize),
    #[error("--duration {0} must be above 0 seconds")]
    Duration(f64),
    #[error("cannot serve the API on 127.0.0.1: {0}")]
    Serve(std::io::Error),
    #[error("--metrics-addr {addr}: cannot listen: {source}")]
    Metrics { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("cannot write the kubeconfig to {path}: {source}")]
    Kubeconfig { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Cluster(#[from] SimClusterError),
    #[error("cannot set up the demo in the API server: {0}")]
    Setup(String),
    #[error("--dra needs a real control plane, where kube-scheduler allocates claims: run `make demo-k8s ARGS=--dra` (geometer demo --join)")]
    DraInMemory,
}

impl DemoOptions {
    pub fn validate(&self) -> Result<(), DemoError> {
        if !(self.speed > 0.0 && self.speed.is_finite()) {
            return Err(DemoError::Speed(self.speed));
        }
        if self.nodes == 0 || self.nodes > 1000 {
            return Err(DemoError::Nodes(self.nodes));
        }
        if !(self.duration_s > 0.0 && self.duration_s.is_finite()) {
            return Err(DemoError::Duration(self.duration_s));
        }
        Ok(())
    }
}

/// Runs the demo to its summary, on the in-memory API server.
pub async fn run(options: DemoOptions, console: Console) -> Result<Summary, DemoError> {
    options.validate()?;
    if options.dra {
        return Err(DemoError::DraInMemory);
    }
    let scenario = Scenario::default_with(options.nodes, options.nvml_latency);
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).map_err(|e| DemoError::Setup(e.to_string()))?;
    }
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}})).expect("namespace");
    server.seed(&ns).map_err(|e| DemoError::Setup(e.to_string()))?;

    let mut _http = None;
    let mut kubeconfig_path = None;
    if options.serve_http {
        let (addr, handle) = server.serve_http("127.0.0.1:0").await.map_err(DemoError::Serve)?;
        _http = Some(handle);
        let path = match &options.kubeconfig {
            Some(p) => p.clone(),
            None => {
                std::env::temp_dir().join(format!("geometer-demo-{}", std::process::id())).join("kubeconfig")
            }
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|source| DemoError::Kubeconfig { path: path.clone(), source })?;
        }
        server
            .write_kubeconfig(&path)
            .map_err(|source| DemoError::Kubeconfig { path: path.clone(), source })?;
        console.raw(format!(
            "Geometer demo: API server on http://{addr}\n  kubeconfig: {}\n  watch from another terminal:\n    export KUBECONFIG={}\n    kubectl get migplans,mignodes -w\n\n",
            path.display(),
            path.display()
        ));
        kubeconfig_path = Some(path.display().to_string());
    }

    let cluster = SimCluster::start(&server, &scenario.cluster).await?;
    let summary = play(server.client(), cluster, &scenario, &options, &console, kubeconfig_path).await?;
    if options.keep_serving && options.serve_http {
        console.raw("\nThe API server keeps serving for kubectl; press Ctrl-C to stop.\n");
        let _ = tokio::signal::ctrl_c().await;
    }
    Ok(summary)
}

/// Runs the demo to its summary on the cluster `client` reaches (a real control plane with
/// `deploy/base` applied, for one): the simulated nodes join it, keeping their GPUs and
/// PodResources sockets under `state_dir`, and the controller and agents run in this process.
pub async fn run_joined(
    client: kube::Client,
    state_dir: &std::path::Path,
    options: DemoOptions,
    console: Console,
) -> Result<Summary, DemoError> {
    options.validate()?;
    let scenario = Scenario::default_with(options.nodes, options.nvml_latency);
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}})).expect("namespace");
    match kube::Api::<Namespace>::all(client.clone()).create(&Default::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(DemoError::Setup(format!("cannot create namespace {NAMESPACE}: {e}"))),
    }
    console.raw(
        "Geometer demo on the cluster of KUBECONFIG: watch it with kubectl get migplans,mignodes -w\n\n",
    );
    // The comparison without Geometer runs in memory on the scenario's nodes as they are.
    let mut joined = scenario.cluster.clone();
    if options.dra {
        joined.nodes = joined.nodes.into_iter().map(NodeSpec::dra).collect();
        dra_classes::create(&client, &scenario).await?;
    }
    let cluster = SimCluster::join(client.clone(), &joined, state_dir).await?;
    play(client, cluster, &scenario, &options, &console, None).await
}

/// The operator and the workload on a started cluster, to the summary.
async fn play(
    client: kube::Client,
    cluster: SimCluster,
    scenario: &Scenario,
    options: &DemoOptions,
    console: &Console,
    kubeconfig_path: Option<String>,
) -> Result<Summary, DemoError> {
    introduce(console, scenario, options, &cluster);
    let operator = operator::start(&client, &cluster, options, console).await?;
    let _metrics = match options.metrics_addr {
        Some(addr) => Some(serve_metrics(addr, &operator).await?),
        None => None,
    };
    let milestones = Arc::new(Mutex::new(progress::Milestones::default()));
    let mut background = watchers(&client, &cluster, options, console, kubeconfig_path, &milestones);
    let arrivals = workload::arrivals(scenario, options.nodes, options.duration_s, options.seed);
    let submissions = workload::Submissions::default();
    workload::start_chat(&client, NAMESPACE).await.map_err(DemoError::Setup)?;
    let without_geometer = baseline::start(scenario, options, &arrivals).await?;
    let recommended = rightsizing::Seen::default();
    background.push(tokio::spawn(rightsizing::follow(client.clone(), NAMESPACE, recommended.clone())));
    background.push(tokio::spawn(workload::play(
        client.clone(),
        NAMESPACE.to_string(),
        arrivals.clone(),
        options.speed,
        cluster.ledger().clone(),
        submissions.clone(),
    )));
    let samples = progress::watch(&client, &cluster, scenario, options, &arrivals, console).await;
    for task in &background {
        task.abort();
    }
    drop(operator);
    let m = *milestones.lock().unwrap_or_else(|p| p.into_inner());
    let mut summary = summarize_run(&client, &cluster, &submissions, &samples, m).await;
    summary.utilisation = summary::mean_utilisation(&samples.samples, None, Some(samples.last_arrival));
    summary.without_geometer = Some(Box::new(without_geometer.finish(samples.last_arrival)));
    let recommended = recommended.lock().unwrap_or_else(|p| p.into_inner());
    summary.rightsizing = summary::rightsizing_lines(recommended.values());
    console.raw("\n");
    console.raw(summary.render());
    Ok(summary)
}

/// Serves the operator's metrics on `addr` until the returned task is dropped.
async fn serve_metrics(
    addr: std::net::SocketAddr,
    operator: &OperatorHandles,
) -> Result<AbortOnDrop, DemoError> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|source| DemoError::Metrics { addr, source })?;
    let (controller, agents) = (operator.controller_metrics.clone(), operator.agent_metrics.clone());
    let text: geometer_controller::MetricsText = Arc::new(move || metrics::merged(&controller, &agents));
    let health = Arc::new(geometer_controller::Health::default());
    Ok(AbortOnDrop(tokio::spawn(async move {
        let _ = geometer_controller::serve_health(listener, text, health, std::future::pending()).await;
    })))
}

/// A task stopped when its handle goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The cluster, the mode and the workload's length, and what each node advertises.
fn introduce(console: &Console, scenario: &Scenario, options: &DemoOptions, cluster: &SimCluster) {
    let models: std::collections::BTreeSet<&str> =
        scenario.cluster.nodes.iter().map(|n| n.gpus[0].model.as_str()).collect();
    console.raw(format!(
        "{} nodes x {} GPUs ({}), policy mode {:?}, seed {}, {:.0} scenario seconds at {}x speed\n",
        scenario.cluster.nodes.len(),
        scenario::GPUS_PER_NODE,
        models.into_iter().collect::<Vec<_>>().join(" and "),
        options.mode,
        options.seed,
        options.duration_s,
        options.speed,
    ));
    for name in cluster.node_names() {
        let advertised: BTreeMap<String, u64> = cluster
            .node(&name)
            .map(|n| n.advertised().into_iter().map(|(k, v)| (k, v.len() as u64)).collect())
            .unwrap_or_default();
        console.raw(format!("  {name}: {}\n", display::counts(&advertised)));
    }
    console.raw("\n");
}

/// What runs beside the workload: the plan, node and cluster printers, the milestones, and in
/// Approve mode (unless a person approves) the demo's reviewer.
fn watchers(
    client: &kube::Client,
    cluster: &SimCluster,
    options: &DemoOptions,
    console: &Console,
    kubeconfig_path: Option<String>,
    milestones: &Arc<Mutex<progress::Milestones>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut background = vec![
        tokio::spawn(display::follow_plans(client.clone(), console.clone(), options.mode, kubeconfig_path)),
        tokio::spawn(display::follow_nodes(client.clone(), console.clone())),
        tokio::spawn(display::follow_cluster(cluster.ledger().subscribe(), console.clone())),
        tokio::spawn(progress::track_milestones(client.clone(), milestones.clone())),
    ];
    if options.mode == PolicyMode::Approve && !options.wait_for_approval {
        background.push(tokio::spawn(progress::approve_plans(client.clone(), console.clone())));
    }
    background
}

/// The summary: pods served and their waits, plans, GPUs reconfigured (from the NVML call
/// logs), slice usage before the first change and after the first node finished.
async fn summarize_run(
    client: &kube::Client,
    cluster: &SimCluster,
    submissions: &workload::Submissions,
    samples: &progress::Progress,
    m: progress::Milestones,
) -> Summary {
    let mut summary = summary::summarize(&submissions.all(), &cluster.ledger().runs());
    let plans = kube::Api::<MigPlan>::all(client.clone())
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    summary.plans = plans.len();
    summary.plans_applied = plans.iter().filter(|p| p.phase() == MigPlanPhase::Succeeded).count();
    let mut calls = Vec::new();
    for name in cluster.node_names() {
        for c in cluster.nvml(&name).map(|nvml| nvml.calls()).unwrap_or_default() {
            let changes = matches!(
                c.call,
                geometer_agent::nvml::NvmlCall::CreateGpuInstance
                    | geometer_agent::nvml::NvmlCall::DestroyGpuInstance
            );
            calls.push((name.clone(), c.gpu, changes));
        }
    }
    summary.gpus_reconfigured =
        summary::reconfigured_gpus(calls.iter().map(|(n, g, c)| (n.as_str(), *g, *c)));
    let last_arrival = samples.last_arrival;
    summary.utilisation_before =
        summary::mean_utilisation(&samples.samples, None, m.first_change.or(Some(last_arrival)));
    summary.utilisation_after =
        m.first_ready.and_then(|r| summary::mean_utilisation(&samples.samples, Some(r), Some(last_arrival)));
    summary
}
