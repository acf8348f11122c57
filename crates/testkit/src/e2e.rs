//! The whole operator on the simulated cluster, for end-to-end tests: the in-memory API server,
//! the simulated nodes, the real controller and one real agent per node, each of which a test
//! can kill and start again.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use geometer_agent::Backoff;
use geometer_agent::{AgentConfig, StepHook};
use geometer_api::{
    Batching, Disruption, MigNode, MigPlan, MigPolicy, MigPolicySpec, PolicyMode, SolverLimits,
};
use geometer_apiserver::ApiServer;
use geometer_simcluster::{ClusterSpec, SimCluster};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::PostParams;
use kube::Api;
use serde_json::json;
use tokio::task::JoinHandle;

pub const NS: &str = "ml";

/// A policy over every node with short windows, so that tests plan within a second or two.
pub fn policy(mode: PolicyMode, eviction_allowed: bool) -> MigPolicy {
    MigPolicy::new(
        "e2e",
        MigPolicySpec {
            node_selector: Default::default(),
            mode,
            allowed_profiles: Vec::new(),
            headroom: BTreeMap::new(),
            allowed_modes: Vec::new(),
            min_whole_gpus: None,
            forecast_window_seconds: 0,
            batching: Batching { idle_seconds: 1, max_seconds: 2 },
            stabilisation_seconds: 0,
            shape_empty_gpus: true,
            disruption: Disruption {
                eviction_allowed,
                max_nodes_reconfiguring: 2,
                drain_timeout_seconds: 60,
                ..Disruption::default()
            },
            solver: SolverLimits { time_limit_ms: 5000, ..SolverLimits::default() },
            rightsizing: None,
            dynamic_mig: None,
        },
    )
}

pub struct E2e {
    pub server: ApiServer,
    pub cluster: SimCluster,
    pub agents: BTreeMap<String, JoinHandle<()>>,
    pub controller: Option<JoinHandle<()>>,
    /// What the controller counts (across restarts).
    pub controller_metrics: Arc<geometer_controller::Metrics>,
    /// How often agents re-read their GPUs when nothing watched changes.
    pub poll: Duration,
}

impl Drop for E2e {
    fn drop(&mut self) {
        for a in self.agents.values() {
            a.abort();
        }
        if let Some(c) = &self.controller {
            c.abort();
        }
    }
}

impl E2e {
    /// Cluster, policy, an agent per node and the controller, all started.
    pub async fn new(spec: &ClusterSpec, policy: MigPolicy) -> E2e {
        E2e::with_poll(spec, policy, Duration::from_millis(50)).await
    }

    /// As [`E2e::new`], with agents polling every `poll` (large clusters poll less often).
    pub async fn with_poll(spec: &ClusterSpec, policy: MigPolicy, poll: Duration) -> E2e {
        let server = ApiServer::new();
        for crd in geometer_api::crds() {
            server.seed(&crd).expect("CRD");
        }
        server
            .seed(&serde_json::from_value::<Namespace>(json!({"metadata": {"name": NS}})).unwrap())
            .expect("namespace");
        let cluster = SimCluster::start(&server, spec).await.expect("simulated cluster starts");
        Api::<MigPolicy>::all(server.client()).create(&PostParams::default(), &policy).await.expect("policy");
        let mut e2e = E2e {
            server,
            cluster,
            agents: BTreeMap::new(),
            controller: None,
            controller_metrics: Arc::new(geometer_controller::Metrics::new()),
            poll,
        };
        for node in e2e.cluster.node_names() {
            e2e.start_agent(&node, None);
        }
        e2e.start_controller();
        e2e
    }

    pub fn agent_config(&self, node: &str) -> AgentConfig {
        let mut cfg = self.cluster.agent_config(node);
        cfg.poll_interval = self.poll;
        cfg.usage_publish_interval = self.poll;
        cfg.backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
        cfg.eviction_backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
        cfg.drain.timeout = Duration::from_secs(60);
        cfg.advertise_timeout = Duration::from_secs(60);
        cfg
    }

    /// Starts (or restarts) the agent of `node`, with a hook at its step boundaries if given.
    pub fn start_agent(&mut self, node: &str, hook: Option<StepHook>) {
        self.kill_agent(node);
        let mut agent = self.cluster.agent(node, self.server.client(), self.agent_config(node));
        if let Some(hook) = hook {
            agent = agent.with_hook(hook);
        }
        self.agents.insert(node.to_string(), tokio::spawn(agent.run()));
    }

    /// Kills the agent between two awaits, as a crash or a pod deletion would.
    pub fn kill_agent(&mut self, node: &str) {
        if let Some(a) = self.agents.remove(node) {
            a.abort();
        }
    }

    pub fn start_controller(&mut self) {
        self.kill_controller();
        self.controller = Some(geometer_simcluster::demo::start_controller_with(
            self.server.client(),
            self.controller_metrics.clone(),
        ));
    }

    /// Waits until the controller has finished `passes` more passes over the cluster: a test
    /// that checks that nothing happens checks it after the controller had its chances to act.
    pub async fn wait_for_controller_passes(&self, passes: u64) {
        let target = self.controller_metrics.passes() + passes;
        wait_for(&format!("{passes} more controller passes"), || {
            (self.controller_metrics.passes() >= target).then_some(())
        })
        .await
    }

    pub fn kill_controller(&mut self) {
        if let Some(c) = self.controller.take() {
            c.abort();
        }
    }

    pub async fn submit(&self, pod: Pod) -> Pod {
        Api::<Pod>::namespaced(self.server.client(), NS)
            .create(&PostParams::default(), &pod)
            .await
            .expect("create pod")
    }

    pub fn plans(&self) -> Vec<MigPlan> {
        self.server.objects::<MigPlan>()
    }

    pub fn mignode(&self, node: &str) -> Option<MigNode> {
        self.server.object::<MigNode>("", node)
    }

    /// Instances on a simulated GPU as `profile@start`, sorted.
    pub fn geometry(&self, node: &str, gpu: u32) -> Vec<String> {
        let mut g: Vec<String> =
            self.cluster.nvml(node).unwrap().geometry(gpu).unwrap().iter().map(|p| p.to_string()).collect();
        g.sort();
        g
    }

    pub fn phase(&self, pod: &str) -> Option<String> {
        self.server.object::<Pod>(NS, pod).and_then(|p| p.status?.phase)
    }

    pub fn running(&self, pods: &[&str]) -> bool {
        pods.iter().all(|p| self.phase(p).as_deref() == Some("Running"))
    }

    /// Evictions of workload pods (namespace [`NS`]) so far, as `namespace/name`; the agent's
    /// restarts of the device plugin are not counted.
    pub fn evictions(&self) -> Vec<String> {
        self.server
            .requests()
            .iter()
            .filter(|r| {
                r.resource.as_deref() == Some("pods/eviction")
                    && r.status < 300
                    && r.namespace.as_deref() == Some(NS)
            })
            .map(|r| {
                format!("{}/{}", r.namespace.clone().unwrap_or_default(), r.name.clone().unwrap_or_default())
            })
            .collect()
    }

    /// Every node Ready for its latest spec, none cordoned.
    pub fn settled(&self) -> bool {
        self.cluster.node_names().iter().all(|n| {
            let Some(m) = self.mignode(n) else { return false };
            let Some(s) = &m.status else { return false };
            s.phase == geometer_api::MigNodePhase::Ready
                && s.observed_generation == m.metadata.generation
                && !s.cordoned_by_geometer
        })
    }
}

pub use crate::wait::wait_for;
