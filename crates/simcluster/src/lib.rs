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
//! ```
//! # fn main() -> anyhow::Result<()> {
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! use geometer_apiserver::ApiServer;
//! use geometer_simcluster::{ClusterSpec, MigPod, SimCluster, SimEvent};
//!
//! let server = ApiServer::new();
//! // Two nodes, gpu-1 and gpu-2, each with one A100-80GB cut as one 7g.80gb instance.
//! let spec = ClusterSpec::uniform("gpu", 2, "A100-80GB", 1, &[("7g.80gb", 0)]);
//! let cluster = SimCluster::start(&server, &spec).await?;
//! assert_eq!(cluster.node_names(), ["gpu-1", "gpu-2"]);
//! let agent = cluster.spawn_agent("gpu-1", cluster.agent_config("gpu-1"));
//!
//! let mut events = cluster.ledger().subscribe();
//! let pods = kube::Api::namespaced(server.client(), "default");
//! pods.create(&Default::default(), &MigPod::new("default", "p").slice("7g.80gb", 1).build()).await?;
//! // The scheduler binds the pod and the kubelet runs it on the node's 7g.80gb device.
//! let devices = tokio::time::timeout(std::time::Duration::from_secs(30), async {
//!     loop {
//!         if let Ok(SimEvent::Started { pod, devices, .. }) = events.recv().await {
//!             assert_eq!(pod, "default/p");
//!             return devices;
//!         }
//!     }
//! })
//! .await?;
//! assert_eq!(devices.len(), 1);
//! assert!(devices[0].starts_with("7g.80gb"), "{devices:?}");
//! agent.abort();
//! # Ok(()) })
//! # }
//! ```

mod claims;
pub mod dra;
mod fit;
mod heartbeat;
mod kubelet;
mod latency;
mod ledger;
mod node;
mod objects;
mod pod_resources;
mod scheduler;
mod spec;

pub mod demo;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use geometer_solver::catalog::Catalog;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use thiserror::Error;
use tokio::task::JoinHandle;

pub use fit::{describe as describe_requests, pod_requests, Misfit, Resources};
pub use kubelet::delete_stopped_pod;
pub use latency::SlowNvml;
pub use ledger::{Ending, Ledger, PodRun, SimEvent};
pub use node::{AdmitError, Device, DraPublication, SimNode, SliceUnits};
pub use objects::{
    gpu_usage, is_device_plugin, run_seconds, MigPod, GPU_USAGE_ANNOTATION, HOLDS_GPUS_LABEL,
    RELEASES_ANNOTATION, RUN_SECONDS_ANNOTATION,
};
pub use scheduler::SCHEDULER_NAME;
pub use spec::{ClusterSpec, DeviceStack, GpuSpec, NodeSpec, DEVICE_PLUGIN_LABEL, DEVICE_PLUGIN_NAMESPACE};

use geometer_agent::nvml::sim::{SimError, SimGpuOptions, SimNvml};
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
    #[error("node {0} uses the DRA driver, which needs the real control plane's scheduler; join one with SimCluster::join")]
    DraNeedsControlPlane(String),
    #[error("the device plugin on node {0} never started (its NVML could not be read)")]
    PluginNeverStarted(String),
    #[error("node {node}: cannot serve PodResources on {socket}: {source}")]
    PodResources {
        node: String,
        socket: String,
        #[source]
        source: std::io::Error,
    },
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
    /// The cluster's side: watching pods, the plugin DaemonSet's pods, the DRA driver's slices.
    client: kube::Client,
    /// Each node's kubelet identity (`system:node:<name>`), for what a kubelet writes: its Node,
    /// its lease, and the status and final deletion of the pods bound to it. Nodes without one
    /// use `client`.
    kubelets: BTreeMap<String, kube::Client>,
    nodes: BTreeMap<String, Arc<SimNode>>,
    catalog: Arc<Catalog>,
    ledger: Arc<Ledger>,
    nvml_latency: std::time::Duration,
    /// Where each node keeps its GPUs and PodResources socket, for a cluster that joined a
    /// control plane ([`SimCluster::join`]).
    state_dir: Option<PathBuf>,
}

/// A running simulated cluster. Dropping it stops the scheduler, kubelet and device plugin (and
/// nothing else: agents and controllers belong to whoever started them).
pub struct SimCluster {
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
        if let Some(n) = spec.nodes.iter().find(|n| n.stack != DeviceStack::DevicePlugin) {
            return Err(SimClusterError::DraNeedsControlPlane(n.name.clone()));
        }
        let nodes = build_nodes(spec, &catalog, None)?;
        let seed_err = |what: String| move |source| SimClusterError::Seed { what, source };
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": DEVICE_PLUGIN_NAMESPACE}}))
                .expect("namespace");
        server.seed(&ns).map_err(seed_err(format!("namespace {DEVICE_PLUGIN_NAMESPACE}")))?;
        for n in &spec.nodes {
            server.seed(&objects::node(n, &catalog)).map_err(seed_err(format!("node {}", n.name)))?;
        }
        // The simulated kubelets finish pod deletions, as real ones do.
        server.set_graceful_pod_deletion(true);
        let shared = Shared::new(server.client(), BTreeMap::new(), nodes, catalog, spec, None);
        let mut events = shared.ledger.subscribe();
        let tasks =
            vec![tokio::spawn(kubelet::run(shared.clone())), tokio::spawn(scheduler::run(shared.clone()))];
        let cluster = SimCluster { shared, tasks };
        cluster.start_plugins(Duration::ZERO).await?;
        cluster.plugins_advertised(&mut events).await?;
        Ok(cluster)
    }

    /// The simulated nodes join a running control plane (a real kube-apiserver with its
    /// scheduler and controllers): they register their Nodes and renew their leases, advertise
    /// their MIG slices, run the pods the control plane's scheduler binds to them, keep their
    /// GPUs in `state_dir/<node>/gpus.json` (for agents in other processes, which may be killed
    /// and restarted) and serve PodResources on `state_dir/<node>/kubelet.sock`. Nothing here
    /// schedules: that is the control plane's.
    pub async fn join(
        client: kube::Client,
        spec: &ClusterSpec,
        state_dir: &Path,
    ) -> Result<SimCluster, SimClusterError> {
        SimCluster::join_as(client, BTreeMap::new(), spec, state_dir).await
    }

    /// [`SimCluster::join`] with a kubelet identity per node (`kubelets`, by node name): each
    /// node registers itself, renews its lease and reports and deletes its own pods with it,
    /// as a kubelet does under the Node authorizer and the NodeRestriction admission plugin;
    /// `client` keeps the cluster's side (the pod watch, plugin pods, the DRA driver's slices).
    pub async fn join_as(
        client: kube::Client,
        kubelets: BTreeMap<String, kube::Client>,
        spec: &ClusterSpec,
        state_dir: &Path,
    ) -> Result<SimCluster, SimClusterError> {
        let catalog = Catalog::builtin().clone();
        let nodes = build_nodes(spec, &catalog, Some(state_dir))?;
        let api_err = |what: String| move |source| SimClusterError::Api { what, source };
        for name in [DEVICE_PLUGIN_NAMESPACE, dra::DRA_PLUGIN_NAMESPACE] {
            let ns: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
            create_if_missing(&Api::all(client.clone()), &ns)
                .await
                .map_err(api_err(format!("namespace {name}")))?;
        }
        let shared =
            Shared::new(client.clone(), kubelets, nodes, catalog, spec, Some(state_dir.to_path_buf()));
        let mut registered = Vec::new();
        for n in &spec.nodes {
            let kubelet = shared.kubelet(&n.name);
            let node = register(&kubelet, &objects::node(n, &shared.catalog))
                .await
                .map_err(api_err(format!("node {}", n.name)))?;
            registered.push((kubelet, node));
        }
        let mut events = shared.ledger.subscribe();
        let mut tasks =
            vec![tokio::spawn(kubelet::run(shared.clone())), tokio::spawn(heartbeat::run(registered))];
        for (name, node) in &shared.nodes {
            let socket = state_dir.join(name).join("kubelet.sock");
            let served = pod_resources::serve(&socket, name, node.assignments.clone()).map_err(|source| {
                SimClusterError::PodResources {
                    node: name.clone(),
                    socket: socket.display().to_string(),
                    source,
                }
            })?;
            tasks.push(served);
        }
        let cluster = SimCluster { shared, tasks };
        if spec.plugin_daemonset {
            return Ok(cluster);
        }
        // The namespace's ServiceAccount, which pods need, comes from the controller manager.
        cluster.start_plugins(Duration::from_secs(60)).await?;
        cluster.plugins_advertised(&mut events).await?;
        Ok(cluster)
    }

    /// Creates every node's device plugin pod, retrying refusals for up to `patience`.
    async fn start_plugins(&self, patience: Duration) -> Result<(), SimClusterError> {
        let deadline = tokio::time::Instant::now() + patience;
        for (name, node) in &self.shared.nodes {
            let pod = objects::plugin_pod(node.stack, name, 0);
            let plugins: Api<Pod> = Api::namespaced(
                self.shared.client.clone(),
                pod.metadata.namespace.as_deref().unwrap_or_default(),
            );
            loop {
                match plugins.create(&PostParams::default(), &pod).await {
                    Ok(_) => break,
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(node = %name, error = %e, "device plugin pod refused; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(source) => {
                        return Err(SimClusterError::Api {
                            what: format!("the device plugin pod of node {name}"),
                            source,
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Returns once every node's device plugin advertised its slices.
    async fn plugins_advertised(
        &self,
        events: &mut tokio::sync::broadcast::Receiver<SimEvent>,
    ) -> Result<(), SimClusterError> {
        let mut waiting: std::collections::BTreeSet<&String> = self.shared.nodes.keys().collect();
        while !waiting.is_empty() {
            match events.recv().await {
                Ok(SimEvent::Advertised { node, .. }) => {
                    waiting.remove(&node);
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    waiting.retain(|n| self.shared.nodes[*n].plugin_starts() == 0);
                }
                Err(_) => {
                    let first = waiting.iter().next().map(|n| n.to_string()).unwrap_or_default();
                    return Err(SimClusterError::PluginNeverStarted(first));
                }
            }
        }
        Ok(())
    }

    /// The client the simulated components use.
    pub fn client(&self) -> &kube::Client {
        &self.shared.client
    }

    /// The file that holds `node`'s GPUs, for a cluster that joined a control plane: give it to
    /// `geometer agent run --simulate-state`.
    pub fn state_file(&self, node: &str) -> Option<PathBuf> {
        Some(self.shared.state_dir.as_ref()?.join(node).join("gpus.json"))
    }

    /// `node`'s PodResources socket, for a cluster that joined a control plane: give it to
    /// `geometer agent run --pod-resources-socket`.
    pub fn pod_resources_socket(&self, node: &str) -> Option<PathBuf> {
        Some(self.shared.state_dir.as_ref()?.join(node).join("kubelet.sock"))
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

    /// GPUs with MIG mode off (whole GPUs), over every node, as NVML says.
    pub fn whole_gpus(&self) -> usize {
        let off = |d: &geometer_agent::nvml::DeviceInfo| d.mig_mode.is_some_and(|m| !m.current);
        self.shared
            .nodes
            .values()
            .map(|n| n.nvml.devices().unwrap_or_default().iter().filter(|d| off(d)).count())
            .sum()
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
        let agent = self.agent(node, self.shared.client.clone(), cfg);
        tokio::spawn(agent.run())
    }
}

impl Shared {
    /// The client node `node`'s kubelet writes with.
    pub(crate) fn kubelet(&self, node: &str) -> kube::Client {
        self.kubelets.get(node).unwrap_or(&self.client).clone()
    }

    fn new(
        client: kube::Client,
        kubelets: BTreeMap<String, kube::Client>,
        nodes: BTreeMap<String, Arc<SimNode>>,
        catalog: Catalog,
        spec: &ClusterSpec,
        state_dir: Option<PathBuf>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            client,
            kubelets,
            nodes,
            catalog: Arc::new(catalog),
            ledger: Arc::new(Ledger::new()),
            nvml_latency: spec.nvml_latency,
            state_dir,
        })
    }
}

/// The nodes of `spec` with their GPUs in their initial geometry; with a `state_dir`, each
/// node's GPUs live in `state_dir/<node>/gpus.json` from now on.
fn build_nodes(
    spec: &ClusterSpec,
    catalog: &Catalog,
    state_dir: Option<&Path>,
) -> Result<BTreeMap<String, Arc<SimNode>>, SimClusterError> {
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
        let mut nvml = SimNvml::with_catalog(n.name.clone(), catalog.clone());
        for (g, gpu) in n.gpus.iter().enumerate() {
            let gpu_error = |source| SimClusterError::Gpu { node: n.name.clone(), gpu: g, source };
            if gpu.is_whole() {
                nvml.add_gpu_with(&gpu.model, SimGpuOptions::MIG_OFF).map_err(gpu_error)?;
                continue;
            }
            let index = nvml.add_gpu(&gpu.model).map_err(gpu_error)?;
            let geometry: Vec<(&str, u8)> = gpu.geometry.iter().map(|(p, s)| (p.as_str(), *s)).collect();
            nvml.set_geometry(index, &geometry).map_err(gpu_error)?;
        }
        if let Some(dir) = state_dir {
            let gpu_error = |source| SimClusterError::Gpu { node: n.name.clone(), gpu: 0, source };
            let node_dir = dir.join(&n.name);
            std::fs::create_dir_all(&node_dir).map_err(|e| {
                gpu_error(SimError::StateFile { path: node_dir.display().to_string(), reason: e.to_string() })
            })?;
            nvml = nvml.with_state_file(&node_dir.join("gpus.json")).map_err(gpu_error)?;
        }
        let models: Vec<&str> = n.gpus.iter().map(|g| g.model.as_str()).collect();
        let node =
            SimNode::new(&n.name, &node_ip(i), nvml, SliceUnits::of(catalog, &models)).with_stack(n.stack);
        let node = Arc::new(node);
        if nodes.insert(n.name.clone(), node).is_some() {
            return Err(SimClusterError::DuplicateNode(n.name.clone()));
        }
    }
    Ok(nodes)
}

async fn create_if_missing<K>(api: &Api<K>, object: &K) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Registers a Node as a kubelet does: the object, then its status (capacity, Ready).
async fn register(client: &kube::Client, node: &Node) -> Result<Node, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    let created = nodes.create(&PostParams::default(), node).await?;
    let status = serde_json::json!({"status": node.status});
    nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(created)
}
