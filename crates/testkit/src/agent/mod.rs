//! A simulated node for agent tests: the in-memory API server, simulated GPUs, and a small
//! simulated kubelet (device assignments, processes, the device plugin's restart).
//!
//! Pods are deleted as on a real cluster: an eviction or a delete only marks a pod on the node
//! (`deletionTimestamp`); it stays listed, its processes keep running on its MIG device and the
//! kubelet keeps reporting the device as its own until the kubelet has stopped its containers.
//! Then the kubelet deletes the pod for good and releases the device. Containers stop
//! [`SHUTDOWN`] after the deletion, or at the end of the grace period for a pod whose
//! containers a test keeps running ([`Harness::hold_termination`]).
#![allow(dead_code)]

mod kubelet;
pub mod nvml;
pub mod operator;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use geometer_agent::nvml::sim::SimGpuOptions;
use geometer_agent::nvml::sim::SimNvml;
use geometer_agent::nvml::{GpuIndex, NvmlBackend};
use geometer_agent::pod_resources::DeviceAssignment;
use geometer_agent::Backoff;
use geometer_agent::{Agent, AgentConfig, SharedAssignments, StepHook, StepPoint};
use geometer_api::{
    GpuGeometry, MigNode, MigNodePhase, MigNodeSpec, PlacedInstance, StepAction, CORDONED_BY_ANNOTATION,
};
use geometer_apiserver::{ApiServer, Verb};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use tokio::task::JoinHandle;

pub const NODE: &str = "gpu-1";
pub const WORKLOADS: &str = "ml";
pub const PLUGIN_NAMESPACE: &str = "gpu-operator";
pub const PLUGIN_LABEL: (&str, &str) = ("app", "nvidia-device-plugin-daemonset");
/// How long a deleted pod's containers take to stop once the kubelet sees the deletion (unless
/// a test keeps them running): the pod is terminating, on its device, for that long.
pub const SHUTDOWN: Duration = Duration::from_millis(50);

/// One simulated GPU: model, initial geometry (`profile`, `start`), options.
pub type SimGpuSetup<'a> = (&'a str, &'a [(&'a str, u8)], SimGpuOptions);

/// A workload pod the simulated kubelet runs on a MIG device.
#[derive(Debug, Clone)]
pub struct Workload {
    pub gpu: GpuIndex,
    pub uuid: String,
    pub pid: u32,
    pub placed: PlacedInstance,
}

pub struct Harness {
    pub server: ApiServer,
    pub client: kube::Client,
    pub sim: SimNvml,
    pub assignments: SharedAssignments,
    /// MIG device UUIDs of the instances the test set up, by (gpu, profile@start).
    pub devices: BTreeMap<(GpuIndex, String), String>,
    /// Pods the kubelet runs, by `namespace/name`.
    pub workloads: Arc<Mutex<BTreeMap<String, Workload>>>,
    /// With [`Harness::with_gpu_operator`]: what the GPU Operator stand-in did.
    pub operator_log: Arc<Mutex<operator::OperatorLog>>,
    /// Operands whose pods never leave the node (by operand name).
    pub stuck_operands: Arc<Mutex<Vec<String>>>,
    /// Pods (`namespace/name`) whose containers keep running when the pod is deleted, until the
    /// test lets them stop or their grace period ends.
    held_terminations: Arc<Mutex<BTreeSet<String>>>,
    kubelet: JoinHandle<()>,
    operator: Option<JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.kubelet.abort();
        if let Some(operator) = &self.operator {
            operator.abort();
        }
    }
}

fn ready_pod(
    namespace: &str,
    name: &str,
    labels: serde_json::Value,
    annotations: serde_json::Value,
    resources: serde_json::Value,
) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox", "resources": {"limits": resources}}]},
        "status": {
            "phase": "Running",
            "startTime": jiff::Timestamp::now().to_string(),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .expect("pod")
}

impl Harness {
    /// A node with GPUs of the given models, each with its initial geometry.
    pub async fn new(gpus: &[(&str, &[(&str, u8)])]) -> Harness {
        let with_options: Vec<_> = gpus.iter().map(|&(m, g)| (m, g, SimGpuOptions::default())).collect();
        Harness::new_with(&with_options).await
    }

    /// GPUs with chosen simulation options (e.g. MIG mode off).
    pub async fn new_with(gpus: &[SimGpuSetup<'_>]) -> Harness {
        Harness::build(gpus, false).await
    }

    /// A stock NVIDIA GPU Operator node handed to Geometer: its deploy labels, and its operand
    /// DaemonSets' pods run by a stand-in ([`operator`]) that holds the GPUs open while
    /// dcgm-exporter, the device plugin or a GPU client runs, as NVML does.
    pub async fn with_gpu_operator(gpus: &[SimGpuSetup<'_>]) -> Harness {
        Harness::build(gpus, true).await
    }

    async fn build(gpus: &[SimGpuSetup<'_>], gpu_operator: bool) -> Harness {
        let server = ApiServer::new();
        // A deleted pod on the node stays until the simulated kubelet has stopped it.
        server.set_graceful_pod_deletion(true);
        for crd in geometer_api::crds() {
            server.seed(&crd).expect("CRD");
        }
        for ns in [WORKLOADS, PLUGIN_NAMESPACE, operator::CLIENTS_NAMESPACE] {
            server
                .seed(&serde_json::from_value::<Namespace>(json!({"metadata": {"name": ns}})).unwrap())
                .expect("namespace");
        }
        let sim = SimNvml::new(NODE);
        let mut devices = BTreeMap::new();
        for (model, geometry, options) in gpus {
            let gpu = sim.add_gpu_with(model, *options).expect("simulated GPU");
            let created = sim.set_geometry(gpu, geometry).expect("initial geometry");
            for (&(profile, start), device) in geometry.iter().zip(created) {
                devices.insert((gpu, format!("{profile}@{start}")), device.uuid);
            }
        }
        let labels: serde_json::Map<String, serde_json::Value> = match gpu_operator {
            true => operator::OPERATOR_LABELS.iter().map(|(k, v)| (k.to_string(), json!(v))).collect(),
            false => serde_json::Map::new(),
        };
        server
            .seed(
                &serde_json::from_value::<Node>(
                    json!({"metadata": {"name": NODE, "uid": "node-uid-1", "labels": labels}}),
                )
                .unwrap(),
            )
            .expect("node");
        let operator_log = Arc::new(Mutex::new(operator::OperatorLog::default()));
        let stuck_operands = Arc::new(Mutex::new(Vec::new()));
        let operator = gpu_operator.then(|| {
            tokio::spawn(operator::run(
                server.clone(),
                sim.clone(),
                operator_log.clone(),
                stuck_operands.clone(),
            ))
        });
        if !gpu_operator {
            advertise(&server, &sim).await;
            let labels = json!({ PLUGIN_LABEL.0: PLUGIN_LABEL.1 });
            server
                .seed(&ready_pod(PLUGIN_NAMESPACE, "nvidia-device-plugin-0", labels, json!({}), json!({})))
                .expect("device plugin pod");
        }
        let workloads = Arc::new(Mutex::new(BTreeMap::new()));
        let assignments = SharedAssignments::default();
        let held_terminations = Arc::new(Mutex::new(BTreeSet::new()));
        let client = server.client();
        let kubelet = tokio::spawn(kubelet::run(kubelet::Kubelet {
            server: server.clone(),
            sim: sim.clone(),
            assignments: assignments.clone(),
            workloads: workloads.clone(),
            held: held_terminations.clone(),
            restarts_plugin: !gpu_operator,
        }));
        let harness = Harness {
            server,
            client,
            sim,
            assignments,
            devices,
            workloads,
            operator_log,
            stuck_operands,
            held_terminations,
            kubelet,
            operator,
        };
        if gpu_operator {
            harness
                .wait_for("the GPU Operator's operands running", |h| {
                    h.operator_log.lock().unwrap().started.contains_key("gpu-client").then_some(())
                })
                .await;
        }
        harness
    }

    /// Agent settings for tests: tiny waits so that nothing takes long, and a drain timeout
    /// long enough that only tests about it ever reach it.
    pub fn config(&self) -> AgentConfig {
        let mut cfg = AgentConfig::new(NODE);
        cfg.poll_interval = Duration::from_millis(5);
        cfg.backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(40));
        cfg.eviction_backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(40));
        cfg.drain.timeout = Duration::from_secs(600);
        cfg.advertise_timeout = Duration::from_secs(600);
        cfg.device_plugin_namespace = Some(PLUGIN_NAMESPACE.into());
        cfg
    }

    pub fn agent(&self, cfg: AgentConfig, nvml: Arc<dyn NvmlBackend>) -> Agent {
        Agent::new(cfg, self.client.clone(), nvml, Arc::new(self.assignments.clone()))
    }

    /// Starts an agent on the simulated GPUs, optionally with a hook.
    pub fn spawn_agent(&self, cfg: AgentConfig, hook: Option<StepHook>) -> JoinHandle<()> {
        let mut agent = self.agent(cfg, Arc::new(self.sim.clone()));
        if let Some(hook) = hook {
            agent = agent.with_hook(hook);
        }
        tokio::spawn(agent.run())
    }

    /// Runs a pod on the instance `profile@start` of `gpu` (set up by the test), with a process.
    pub fn run_pod(
        &self,
        name: &str,
        gpu: GpuIndex,
        profile: &str,
        start: u8,
        annotations: &[(&str, &str)],
        labels: &[(&str, &str)],
    ) {
        let key = (gpu, format!("{profile}@{start}"));
        let uuid = self.devices.get(&key).unwrap_or_else(|| panic!("no instance {key:?} was set up")).clone();
        let annotations: serde_json::Map<_, _> =
            annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let labels: serde_json::Map<_, _> = labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let resource = format!("nvidia.com/mig-{profile}");
        let pod =
            ready_pod(WORKLOADS, name, json!(labels), json!(annotations), json!({ resource.clone(): "1" }));
        self.server.seed(&pod).expect("pod");
        let pid = self.sim.start_process(gpu, &uuid).expect("process");
        self.assignments.update(|list| {
            list.push(DeviceAssignment {
                namespace: WORKLOADS.into(),
                pod: name.into(),
                container: "main".into(),
                resource,
                device_id: uuid.clone(),
                claim: None,
            })
        });
        let placed = PlacedInstance::new(profile, start);
        self.workloads
            .lock()
            .unwrap()
            .insert(format!("{WORKLOADS}/{name}"), Workload { gpu, uuid, pid, placed });
    }

    /// Runs a pod that holds the whole of `gpu` (`nvidia.com/gpu`), with a process on it.
    pub fn run_whole_gpu_pod(&self, name: &str, gpu: GpuIndex, gpu_uuid: &str) {
        self.run_whole_gpu_pod_as(name, gpu, gpu_uuid, gpu_uuid);
    }

    /// A pod holding the whole GPU under the device id the device plugin gave it (a
    /// time-slicing replica `<uuid>::<n>`, for one).
    pub fn run_whole_gpu_pod_as(&self, name: &str, gpu: GpuIndex, gpu_uuid: &str, device_id: &str) {
        let pod = ready_pod(WORKLOADS, name, json!({}), json!({}), json!({"nvidia.com/gpu": "1"}));
        self.server.seed(&pod).expect("pod");
        let pid = self.sim.start_gpu_process(gpu).expect("process");
        self.assignments.update(|list| {
            list.push(DeviceAssignment {
                namespace: WORKLOADS.into(),
                pod: name.into(),
                container: "main".into(),
                resource: "nvidia.com/gpu".into(),
                device_id: device_id.into(),
                claim: None,
            })
        });
        let placed = PlacedInstance::new("whole-gpu", 0);
        self.workloads
            .lock()
            .unwrap()
            .insert(format!("{WORKLOADS}/{name}"), Workload { gpu, uuid: gpu_uuid.into(), pid, placed });
    }

    /// Writes the MigNode's spec (creating the MigNode if needed) and returns its generation.
    pub async fn set_spec(&self, gpus: &[(u32, &[(&str, u8)])]) -> i64 {
        let spec = MigNodeSpec {
            plan: Some("plan-1".into()),
            gpus: gpus
                .iter()
                .map(|(index, g)| GpuGeometry {
                    index: *index,
                    geometry: g.iter().map(|&(p, s)| PlacedInstance::new(p, s)).collect(),
                })
                .collect(),
            compaction: None,
        };
        let api: Api<MigNode> = Api::all(self.client.clone());
        // The agent creates the MigNode when it starts; whoever is first, the spec is patched in.
        match api.create(&PostParams::default(), &MigNode::new(NODE, spec.clone())).await {
            Ok(created) => return created.metadata.generation.expect("generation"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("create MigNode: {e}"),
        }
        let stored = api
            .patch(NODE, &PatchParams::default(), &Patch::Merge(json!({ "spec": spec })))
            .await
            .expect("patch MigNode spec");
        stored.metadata.generation.expect("generation")
    }

    /// A MigPolicy `gpu-pool` with the given disruption rules, and the MigPlan `plan-1` (which
    /// [`Harness::set_spec`]'s MigNode spec names) belonging to it.
    pub fn seed_policy(&self, disruption: serde_json::Value) {
        self.server
            .seed_value(json!({
                "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy",
                "metadata": {"name": "gpu-pool"},
                "spec": {"mode": "Auto", "disruption": disruption},
            }))
            .expect("MigPolicy");
        self.server
            .seed_value(json!({
                "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlan",
                "metadata": {"name": "plan-1"},
                "spec": {"policy": "gpu-pool"},
            }))
            .expect("MigPlan");
    }

    pub fn mignode(&self) -> MigNode {
        self.server.object::<MigNode>("", NODE).expect("MigNode exists")
    }

    /// The MigNode's `Failed` condition while it is true.
    pub fn failed_condition(&self) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        let status = self.mignode().status?;
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == geometer_api::MigNodeStatus::FAILED && c.status == "True")
    }

    pub fn node(&self) -> Node {
        self.server.object::<Node>("", NODE).expect("node exists")
    }

    pub fn cordon_by_hand(&self) {
        let mut node = self.node();
        node.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        self.server.seed(&node).expect("cordon");
    }

    /// Whether the node is cordoned, and whether it carries Geometer's mark.
    pub fn cordon_state(&self) -> (bool, bool) {
        let node = self.node();
        let unschedulable = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let marked = node.metadata.annotations.is_some_and(|a| a.contains_key(CORDONED_BY_ANNOTATION));
        (unschedulable, marked)
    }

    /// Waits (a failsafe of a minute, never a measured time) until the MigNode is Ready for
    /// `generation`.
    pub async fn wait_ready(&self, generation: i64) -> MigNode {
        self.wait_for(&format!("MigNode Ready at generation {generation}"), |h| {
            let m = h.server.object::<MigNode>("", NODE)?;
            let s = m.status.as_ref()?;
            (s.phase == MigNodePhase::Ready
                && s.observed_generation == Some(generation)
                && m.metadata.generation == Some(generation))
            .then_some(m)
        })
        .await
    }

    /// Polls `check` until it gives a value; a failure shows the MigNode status.
    pub async fn wait_for<T>(&self, what: &str, check: impl Fn(&Harness) -> Option<T>) -> T {
        crate::wait::wait_for_or(
            what,
            || check(self),
            || format!("; MigNode status: {:#?}", self.server.object::<MigNode>("", NODE).map(|m| m.status)),
        )
        .await
    }

    /// The geometry on a simulated GPU as `profile@start`, sorted.
    pub fn geometry(&self, gpu: GpuIndex) -> Vec<String> {
        let mut g: Vec<String> = self.sim.geometry(gpu).unwrap().iter().map(|p| p.to_string()).collect();
        g.sort();
        g
    }

    pub fn events(&self) -> Vec<Event> {
        self.server.objects::<Event>()
    }

    pub fn events_with_reason(&self, reason: &str) -> Vec<Event> {
        self.events().into_iter().filter(|e| e.reason.as_deref() == Some(reason)).collect()
    }

    pub fn pod_exists(&self, name: &str) -> bool {
        self.server.object::<Pod>(WORKLOADS, name).is_some()
    }

    /// Whether the workload pod `name` is being deleted but still there (`deletionTimestamp`).
    pub fn terminating(&self, name: &str) -> bool {
        self.server.object::<Pod>(WORKLOADS, name).is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    }

    /// The workload pod `name`'s containers ignore SIGTERM: once it is deleted it stays
    /// terminating, its process running on its device, until [`Harness::end_termination`] or
    /// the end of its grace period (30 s unless the pod says otherwise).
    pub fn hold_termination(&self, name: &str) {
        self.held_terminations.lock().unwrap().insert(format!("{WORKLOADS}/{name}"));
    }

    /// Lets the containers of a pod held by [`Harness::hold_termination`] stop: the kubelet
    /// then finishes its deletion.
    pub fn end_termination(&self, name: &str) {
        self.held_terminations.lock().unwrap().remove(&format!("{WORKLOADS}/{name}"));
    }

    /// Rounds the agent has begun so far: each begins with one GET of its MigNode (besides it,
    /// the agent writes the MigNode with patches, and reads it again only after a create that
    /// found it there or to report a failure). Counted in the server's request log, which keeps
    /// the last 10,000 requests: for tests that make fewer.
    pub fn agent_rounds(&self) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| {
                r.verb == Some(Verb::Get)
                    && r.resource.as_deref() == Some("mignodes")
                    && r.name.as_deref() == Some(NODE)
            })
            .count()
    }

    /// Waits until the agent has begun `rounds` more rounds than when called: a test that
    /// checks that nothing happens checks it after the agent had its chances to act.
    pub async fn wait_for_agent_rounds(&self, rounds: usize) {
        let target = self.agent_rounds() + rounds;
        self.wait_for(&format!("{rounds} more agent rounds"), |h| (h.agent_rounds() >= target).then_some(()))
            .await
    }

    /// Pods the kubelet still runs, by name.
    pub fn running(&self) -> Vec<String> {
        self.workloads.lock().unwrap().keys().map(|k| k.split('/').nth(1).unwrap().to_string()).collect()
    }

    /// Eviction requests for workload pods (the device plugin is restarted by eviction too).
    pub fn evictions(&self) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| {
                r.resource.as_deref() == Some("pods/eviction") && r.namespace.as_deref() == Some(WORKLOADS)
            })
            .count()
    }

    /// Eviction requests for device plugin pods: one per restart.
    pub fn plugin_restarts(&self) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| {
                r.resource.as_deref() == Some("pods/eviction")
                    && r.namespace.as_deref() == Some(PLUGIN_NAMESPACE)
            })
            .count()
    }
}

/// A hook that records every step written to status, checking each time that status already
/// shows the step when the hook runs (the step is recorded before it is taken).
pub fn recording_hook(server: ApiServer) -> (StepHook, Arc<Mutex<Vec<StepAction>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let hook: StepHook = Arc::new(move |point: &StepPoint| {
        if let StepPoint::Recorded(step) = point {
            let status = server.object::<MigNode>("", NODE).and_then(|m| m.status).expect("status");
            assert_eq!(
                status.step.as_ref().map(|s| s.action),
                Some(step.action),
                "status shows the step before it is taken"
            );
            log.lock().unwrap().push(step.action);
        }
        Box::pin(async {})
    });
    (hook, seen)
}

async fn advertise(server: &ApiServer, sim: &SimNvml) {
    advertise_checked(server, sim, true).await
}

/// The device plugin starting: allocatable per profile. `only_after_verify`: it may only start
/// on GPUs the agent verified (no bare GPU instance; counting per profile is exact then). The
/// GPU Operator's DaemonSet starts it whenever its label allows, half-built GPUs included
/// (a window closed by a failure): a bare GPU instance is then counted with its profile, a
/// device the plugin would not find, until the next window restarts it.
pub(crate) async fn advertise_checked(server: &ApiServer, sim: &SimNvml, only_after_verify: bool) {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut gpu = 0;
    while let Ok(geometry) = sim.geometry(gpu) {
        let bare = sim.gpu_instances_without_compute(gpu).unwrap().len();
        if only_after_verify {
            assert_eq!(bare, 0, "the device plugin restarted while GPU {gpu} is half built");
        }
        for p in geometry {
            *counts.entry(format!("nvidia.com/mig-{}", p.profile)).or_default() += 1;
        }
        gpu += 1;
    }
    let node = server.object::<Node>("", NODE).expect("node");
    let mut alloc = serde_json::Map::new();
    // The kubelet keeps resources it saw before, at 0.
    for k in node
        .status
        .and_then(|s| s.allocatable)
        .unwrap_or_default()
        .into_keys()
        .filter(|k| geometer_api::resources::is_mig_resource(k))
    {
        alloc.insert(k, json!("0"));
    }
    for (k, v) in counts {
        alloc.insert(k, json!(v.to_string()));
    }
    // Through the status subresource, as the kubelet does: a cordon made meanwhile stays.
    Api::<Node>::all(server.client())
        .patch_status(NODE, &PatchParams::default(), &Patch::Merge(json!({"status": {"allocatable": alloc}})))
        .await
        .expect("node allocatable");
}
