//! Geometer itself inside the demo: the MigPolicy, the real controller and one real agent per
//! simulated node, each with its own in-process client as if it ran in its own pod.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use geometer_solver::catalog::Catalog;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::PostParams;
use kube::Api;
use tokio::task::JoinHandle;

use super::display::Console;
use super::{DemoError, DemoOptions};
use crate::SimCluster;
use geometer_agent::Backoff;
use geometer_api::{Batching, Disruption, MigPolicy, MigPolicySpec, PolicyMode, SolverLimits};
use geometer_controller::Health;
use geometer_controller::Metrics;
use geometer_controller::{self as controller, Settings};

pub const POLICY_NAME: &str = "demo";

/// The demo's policy: every node of the `mig` pool, evictions allowed (so that plans can
/// reshape busy GPUs), short batching and stabilisation windows to fit a one-minute demo.
pub fn demo_policy(mode: PolicyMode) -> MigPolicy {
    MigPolicy::new(
        POLICY_NAME,
        MigPolicySpec {
            node_selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("geometer.dev/pool".to_string(), "mig".to_string())])),
                ..LabelSelector::default()
            },
            mode,
            allowed_profiles: Vec::new(),
            headroom: BTreeMap::new(),
            allowed_modes: Vec::new(),
            min_whole_gpus: None,
            forecast_window_seconds: 0,
            batching: Batching { idle_seconds: 2, max_seconds: 6 },
            stabilisation_seconds: 10,
            shape_empty_gpus: true,
            disruption: Disruption {
                eviction_allowed: true,
                max_nodes_reconfiguring: 2,
                drain_timeout_seconds: 60,
                ..Disruption::default()
            },
            solver: SolverLimits { time_limit_ms: 2000, ..SolverLimits::default() },
            rightsizing: None,
            dynamic_mig: None,
        },
    )
}

/// The running operator; dropping it stops the controller and every agent.
pub struct OperatorHandles {
    pub agents: BTreeMap<String, JoinHandle<()>>,
    pub controller: Option<JoinHandle<()>>,
    /// The controller's and each agent's metrics (for `--metrics-addr`).
    pub controller_metrics: Arc<Metrics>,
    pub agent_metrics: BTreeMap<String, Arc<geometer_agent::AgentMetrics>>,
}

impl Drop for OperatorHandles {
    fn drop(&mut self) {
        for a in self.agents.values() {
            a.abort();
        }
        if let Some(c) = &self.controller {
            c.abort();
        }
    }
}

/// Agent settings for the demo: quick polls and retries, the policy's drain timeout.
pub(super) fn agent_config(cluster: &SimCluster, node: &str) -> geometer_agent::AgentConfig {
    let mut cfg = cluster.agent_config(node);
    cfg.poll_interval = Duration::from_millis(500);
    cfg.usage_publish_interval = Duration::from_secs(1);
    cfg.backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    cfg.eviction_backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    cfg.drain.timeout = Duration::from_secs(60);
    cfg.advertise_timeout = Duration::from_secs(30);
    cfg
}

pub(super) async fn start(
    client: &kube::Client,
    cluster: &SimCluster,
    options: &DemoOptions,
    console: &Console,
) -> Result<OperatorHandles, DemoError> {
    Api::<MigPolicy>::all(client.clone())
        .create(&PostParams::default(), &demo_policy(options.mode))
        .await
        .map_err(|e| DemoError::Setup(format!("cannot create the MigPolicy: {e}")))?;
    let mut agents = BTreeMap::new();
    let mut agent_metrics = BTreeMap::new();
    for node in cluster.node_names() {
        let metrics = Arc::new(geometer_agent::AgentMetrics::new());
        let agent =
            cluster.agent(&node, client.clone(), agent_config(cluster, &node)).with_metrics(metrics.clone());
        agents.insert(node.clone(), tokio::spawn(agent.run()));
        agent_metrics.insert(node, metrics);
    }
    let _ = console;
    let controller_metrics = Arc::new(Metrics::new());
    let controller = start_controller_with(client.clone(), controller_metrics.clone());
    Ok(OperatorHandles { agents, controller: Some(controller), controller_metrics, agent_metrics })
}

/// The real controller on `client`, without leader election (one replica), as a task.
pub fn start_controller(client: kube::Client) -> JoinHandle<()> {
    start_controller_with(client, Arc::new(Metrics::new()))
}

/// As [`start_controller`], counting into `metrics`.
pub fn start_controller_with(client: kube::Client, metrics: Arc<Metrics>) -> JoinHandle<()> {
    let mut settings = Settings::new("demo-controller", Arc::new(Catalog::builtin().clone()));
    settings.resync = Duration::from_secs(5);
    tokio::spawn(async move {
        let health = Arc::new(Health::default());
        if let Err(e) = controller::run(client, settings, metrics, health, std::future::pending()).await {
            tracing::error!(error = %e, "demo controller stopped");
        }
    })
}
