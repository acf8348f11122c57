//! A simulated GPU cluster on the in-memory API server, for the demo, end-to-end tests and
//! benchmarks: nodes with simulated GPUs (one [`SimNvml`] per node), the NVIDIA device plugin
//! (advertises each node's MIG devices as `nvidia.com/mig-<profile>` and enumerates them again
//! when its pod is restarted), a scheduler (binds pending pods where they fit or marks them
//! `Unschedulable`) and a kubelet (runs bound pods on specific MIG devices with a process on
//! each, answers PodResources, ends pods after their run time).
//!
//! The real controller and agents run against it unchanged: an agent gets the node's
//! [`SimNvml`] as its NVML and the node's [`SharedAssignments`] as its PodResources source.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use geometer::apiserver::ApiServer;
//! use geometer::simcluster::{ClusterSpec, MigPod, SimCluster};
//!
//! let server = ApiServer::new();
//! let cluster = SimCluster::start(&server, &ClusterSpec::uniform("gpu", 2, "A100-80GB", 8, &[("7g.80gb", 0)])).await?;
//! let _agent = cluster.spawn_agent("gpu-1", cluster.agent_config("gpu-1"));
//! let pods = kube::Api::namespaced(server.client(), "default");
//! pods.create(&Default::default(), &MigPod::new("default", "p").slice("1g.10gb", 1).build()).await?;
//! # Ok(()) }
//! ```

mod fit;
mod kubelet;
mod latency;
mod ledger;
mod node;
mod objects;
mod scheduler;
mod spec;

pub mod demo;

use std::collections::BTreeMap;
use std::sync::Arc;

use geometer_solver::catalog::Catalog;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::PostParams;
use kube::Api;
use thiserror::Error;
use tokio::task::JoinHandle;

pub use fit::{describe as describe_requests, pod_requests, Misfit, Resources};
pub use latency::SlowNvml;
pub use ledger::{Ending, Ledger, PodRun, SimEvent};
pub use node::{AdmitError, Device, SimNode, SliceUnits};
pub use objects::{is_device_plugin, run_seconds, MigPod, RELEASES_ANNOTATION, RUN_SECONDS_ANNOTATION};
pub use scheduler::SCHEDULER_NAME;
pub use spec::{ClusterSpec, GpuSpec, NodeSpec, DEVICE_PLUGIN_LABEL, DEVICE_PLUGIN_NAMESPACE};

use geometer_agent::nvml::sim::{SimError, SimNvml};
use geometer_agent::nvml::NvmlBackend;
use geometer_agent::{Agent, AgentConfig, SharedAssignments};
use geometer_apiserver::{ApiError, ApiServer};

#[derive(Debug, Error)]
pub enum SimClusterError {
    #[error("the cluster has no nodes; give at least one")]
    NoNodes,
    #[error("node name {0:?} appears twice; node names must be unique")]
    DuplicateNode(String),
    #[error("node {node}, GPU {gpu}: {source}")]
    Gpu {
        node: String,
        gpu: usize,
        #[source]
        source: SimError,
    },
    #[error("node {node}: {field} {source}")]
    Quantity {
        node: String,
        field: &'static str,
        #[source]
        source: geometer_api::quantity::QuantityError,
    },
    #[error("cannot store {what} in the API server: {source}")]
    Seed {
        what: String,
        #[source]
        source: ApiError,
    },
    #[error("cannot create {what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("the device plugin on node {0} never started (its NVML could not be read)")]
    PluginNeverStarted(String),
}

/// Memory slices (placement units) in use by running pods, of all there are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SliceUsage {
    pub used: u64,
    pub total: u64,
}

impl SliceUsage {
    pub fn fraction(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.used as f64 / self.total as f64
        }
    }
}

/// What the simulated components share.
pub(crate) struct Shared {
    client: kube::Client,
    nodes: BTreeMap<String, Arc<SimNode>>,
    catalog: Arc<Catalog>,
    ledger: Arc<Ledger>,
    nvml_latency: std::time::Duration,
}

/// A running simulated cluster. Dropping it stops the scheduler, kubelet and device plugin (and
/// nothing else: agents and controllers belong to whoever started them).
pub struct SimCluster {
    server: ApiServer,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn node_ip(i: usize) -> String {
    format!("10.{}.{}.{}", 16 + i / 62_500, (i / 250) % 250, i % 250 + 1)
}

impl SimCluster {
    /// Builds the nodes, starts the simulated components, and returns once every node's device
    /// plugin has advertised its slices.
    pub async fn start(server: &ApiServer, spec: &ClusterSpec) -> Result<SimCluster, SimClusterError> {
        SimCluster::start_with_catalog(server, spec, Catalog::builtin().clone()).await
    }

    pub async fn start_with_catalog(
        server: &ApiServer,
        spec: &ClusterSpec,
        catalog: Catalog,
    ) -> Result<SimCluster, SimClusterError> {
        if spec.nodes.is_empty() {
            return Err(SimClusterError::NoNodes);
        }
        let mut nodes = BTreeMap::new();
        for (i, n) in spec.nodes.iter().enumerate() {
            for (field, value) in [("cpu", &n.cpu), ("memory", &n.memory)] {
                geometer_api::quantity::milli(value).map_err(|source| SimClusterError::Quantity {
                    node: n.name.clone(),
                    field,
                    source,
                })?;
            }
            let nvml = SimNvml::with_catalog(n.name.clone(), catalog.clone());
            for (g, gpu) in n.gpus.iter().enumerate() {
                let gpu_error = |source| SimClusterError::Gpu { node: n.name.clone(), gpu: g, source };
                let index = nvml.add_gpu(&gpu.model).map_err(gpu_error)?;
                let geometry: Vec<(&str, u8)> = gpu.geometry.iter().map(|(p, s)| (p.as_str(), *s)).collect();
                nvml.set_geometry(index, &geometry).map_err(gpu_error)?;
            }
            let models: Vec<&str> = n.gpus.iter().map(|g| g.model.as_str()).collect();
            let node = Arc::new(SimNode::new(&n.name, &node_ip(i), nvml, SliceUnits::of(&catalog, &models)));
            if nodes.insert(n.name.clone(), node).is_some() {
                return Err(SimClusterError::DuplicateNode(n.name.clone()));
            }
        }
        let seed_err = |what: String| move |source| SimClusterError::Seed { what, source };
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": DEVICE_PLUGIN_NAMESPACE}}))
                .expect("namespace");
        server.seed(&ns).map_err(seed_err(format!("namespace {DEVICE_PLUGIN_NAMESPACE}")))?;
        for n in &spec.nodes {
            server.seed(&objects::node(n, &catalog)).map_err(seed_err(format!("node {}", n.name)))?;
        }

        let ledger = Arc::new(Ledger::new());
        let shared = Arc::new(Shared {
            client: server.client(),
            nodes,
            catalog: Arc::new(catalog),
            ledger: ledger.clone(),
            nvml_latency: spec.nvml_latency,
        });
        let mut events = ledger.subscribe();
        let tasks =
            vec![tokio::spawn(kubelet::run(shared.clone())), tokio::spawn(scheduler::run(shared.clone()))];
        let cluster = SimCluster { server: server.clone(), shared, tasks };

        let plugins: Api<Pod> = Api::namespaced(cluster.shared.client.clone(), DEVICE_PLUGIN_NAMESPACE);
        for n in &spec.nodes {
            plugins.create(&PostParams::default(), &objects::device_plugin_pod(&n.name, 0)).await.map_err(
                |source| SimClusterError::Api {
                    what: format!("the device plugin pod of node {}", n.name),
                    source,
                },
            )?;
        }
        let mut waiting: std::collections::BTreeSet<&String> = cluster.shared.nodes.keys().collect();
        while !waiting.is_empty() {
            match events.recv().await {
                Ok(SimEvent::Advertised { node, .. }) => {
                    waiting.remove(&node);
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    waiting.retain(|n| cluster.shared.nodes[*n].plugin_starts() == 0);
                }
                Err(_) => {
                    let first = waiting.iter().next().map(|n| n.to_string()).unwrap_or_default();
                    return Err(SimClusterError::PluginNeverStarted(first));
                }
            }
        }
        Ok(cluster)
    }

    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    /// Node names, sorted.
    pub fn node_names(&self) -> Vec<String> {
        self.shared.nodes.keys().cloned().collect()
    }

    pub fn node(&self, name: &str) -> Option<&SimNode> {
        self.shared.nodes.get(name).map(|n| n.as_ref())
    }

    /// The node's simulated GPUs (a handle sharing state with the agent's).
    pub fn nvml(&self, node: &str) -> Option<SimNvml> {
        self.node(node).map(|n| n.nvml.clone())
    }

    /// What the node's kubelet reports through PodResources.
    pub fn assignments(&self, node: &str) -> Option<SharedAssignments> {
        self.node(node).map(|n| n.assignments.clone())
    }

    pub fn catalog(&self) -> &Catalog {
        &self.shared.catalog
    }

    /// Pods' runs and the live event stream.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.shared.ledger
    }

    /// Agent settings for a node of this cluster: its catalog and where the device plugin
    /// runs; everything else as `geometer agent run` defaults.
    pub fn agent_config(&self, node: &str) -> AgentConfig {
        let mut cfg = AgentConfig::new(node);
        cfg.catalog = self.shared.catalog.clone();
        cfg.device_plugin_namespace = Some(DEVICE_PLUGIN_NAMESPACE.to_string());
        cfg
    }

    /// The real node agent for `node`, on that node's simulated GPUs and kubelet. Panics when
    /// the node is not part of the cluster (a programming error in the caller).
    pub fn agent(&self, node: &str, client: kube::Client, cfg: AgentConfig) -> Agent {
        let sim =
            self.node(node).unwrap_or_else(|| panic!("node {node} is not part of the simulated cluster"));
        let nvml: Arc<dyn NvmlBackend> = Arc::new(sim.nvml.clone());
        let nvml: Arc<dyn NvmlBackend> = if self.shared.nvml_latency.is_zero() {
            nvml
        } else {
            Arc::new(SlowNvml::new(nvml, self.shared.nvml_latency))
        };
        Agent::new(cfg, client, nvml, Arc::new(sim.assignments.clone()))
    }

    /// Memory slices (placement units) held by running pods, and in all, over every GPU.
    pub fn slice_usage(&self) -> SliceUsage {
        let mut usage = SliceUsage::default();
        for node in self.shared.nodes.values() {
            let (used, total) = node.slice_usage();
            usage.used += used;
            usage.total += total;
        }
        usage
    }

    /// Starts the agent for `node` with its own in-process client; abort the handle to kill it.
    pub fn spawn_agent(&self, node: &str, cfg: AgentConfig) -> JoinHandle<()> {
        let agent = self.agent(node, self.server.client(), cfg);
        tokio::spawn(agent.run())
    }
}
