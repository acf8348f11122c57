//! The whole operator on the real control plane, for end-to-end tests: the manifests of
//! `deploy/base` applied with the real kubectl, the simulated kubelets joined to it,
//! `geometer controller` and one `geometer agent run --simulate` per node as processes with
//! their ServiceAccounts' tokens (so a permission the manifests lack fails the test), and
//! workloads as real Deployments and Jobs ([`workloads`]).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use geometer_api::MigPolicy;
use geometer_simcluster::{ClusterSpec, SimCluster, DEVICE_PLUGIN_NAMESPACE};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

use crate::control_plane::{
    free_port, start_or_skip_for_nodes, ControlPlane, Identity, Process, GEOMETER_NAMESPACE,
};
use crate::deploy::repo;

mod workloads;
pub use workloads::limits;

/// Where the workloads run.
pub const NS: &str = "ml";

pub struct RealCluster {
    pub sim: SimCluster,
    pub admin: kube::Client,
    geometer: PathBuf,
    agents: BTreeMap<String, Process>,
    /// Per node, its agent's kubeconfig: a token bound to the agent's pod on the node.
    agent_kubeconfigs: BTreeMap<String, PathBuf>,
    controllers: BTreeMap<String, Process>,
    /// The webhook port of each controller replica, and the replica the agents' eviction
    /// webhook points at (this control plane has no Service network to choose one).
    webhook_ports: BTreeMap<String, u16>,
    eviction_webhook_at: Option<String>,
    /// The `/metrics` port of each agent (by node) and controller (by replica name).
    metrics_ports: BTreeMap<String, u16>,
    /// Agent and controller starts so far, to keep every log.
    starts: u32,
    /// Dropped last: the processes above stop before the control plane does.
    pub cp: ControlPlane,
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        for (_, p) in
            std::mem::take(&mut self.agents).into_iter().chain(std::mem::take(&mut self.controllers))
        {
            p.stop();
        }
        // Every scenario on the real control plane is also a test of deploy/'s RBAC: a call
        // the controller or an agent made that RBAC refused fails it, even when the code
        // recovered (a cache that never fills, an event never published).
        if !std::thread::panicking() {
            let denied = self.rbac_denials();
            assert!(
                denied.is_empty(),
                "deploy/base's RBAC refused calls Geometer made:\n  {}",
                denied.join("\n  ")
            );
        }
    }
}

impl RealCluster {
    /// The control plane, `deploy/base` applied, the simulated nodes joined and `policy`
    /// created; no controller or agent runs yet. `None` (the test is skipped) when the control
    /// plane is not built and `GEOMETER_REQUIRE_CONTROL_PLANE` is not set.
    pub async fn start(
        test: &str,
        geometer: &Path,
        spec: &ClusterSpec,
        policy: &MigPolicy,
    ) -> Option<RealCluster> {
        RealCluster::start_with(test, geometer, spec, policy, &[]).await
    }

    /// [`RealCluster::start`] with more of kube-controller-manager's controllers.
    pub async fn start_with(
        test: &str,
        geometer: &Path,
        spec: &ClusterSpec,
        policy: &MigPolicy,
        more_controllers: &[&str],
    ) -> Option<RealCluster> {
        let names: Vec<String> = spec.nodes.iter().map(|n| n.name.clone()).collect();
        let cp = start_or_skip_for_nodes(test, more_controllers, &names).await?;
        install(&cp);
        let admin = cp.client(Identity::Admin).await;
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
        Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
        Api::<MigPolicy>::all(admin.clone()).create(&PostParams::default(), policy).await.expect("policy");
        let cluster_side = cp.client(Identity::Kubelet).await;
        let mut kubelets = BTreeMap::new();
        for name in &names {
            kubelets.insert(name.clone(), cp.node_client(name).await);
        }
        let sim = SimCluster::join_as(cluster_side, kubelets, spec, &cp.dir().join("nodes"))
            .await
            .expect("simulated nodes join");
        let mut agent_kubeconfigs = BTreeMap::new();
        for node in sim.node_names() {
            let kubeconfig = cp.agent_kubeconfig(&node).await;
            agent_kubeconfigs.insert(node, kubeconfig);
        }
        Some(RealCluster {
            sim,
            admin,
            geometer: geometer.to_path_buf(),
            agents: BTreeMap::new(),
            agent_kubeconfigs,
            controllers: BTreeMap::new(),
            webhook_ports: BTreeMap::new(),
            eviction_webhook_at: None,
            metrics_ports: BTreeMap::new(),
            starts: 0,
            cp,
        })
    }

    /// `geometer <args>` with `kubeconfig`, its output in a log of its own (`<log>-<start>.log`).
    fn spawn_geometer(&mut self, name: &str, log: &str, kubeconfig: &Path, args: &[String]) -> Process {
        self.starts += 1;
        let log = self.cp.dir().join(format!("{log}-{}.log", self.starts));
        Process::spawn_with_env(name, &self.geometer, args, &log, &[("KUBECONFIG", kubeconfig)])
    }

    /// The kubeconfig node `node`'s agent runs with: a ServiceAccount token bound to its pod
    /// there ([`ControlPlane::agent_kubeconfig`]).
    pub fn agent_kubeconfig(&self, node: &str) -> &Path {
        self.agent_kubeconfigs.get(node).unwrap_or_else(|| panic!("no agent token for node {node}"))
    }

    /// Starts (or restarts) the agent of `node` as `geometer agent run --simulate`, on the
    /// node's GPU state file and PodResources socket, as the agent ServiceAccount.
    pub fn start_agent(&mut self, node: &str) {
        self.start_agent_with(node, &[]);
    }

    /// [`RealCluster::start_agent`] with more flags.
    pub fn start_agent_with(&mut self, node: &str, flags: &[&str]) {
        self.kill_agent(node);
        let spec = self.sim.node(node).unwrap_or_else(|| panic!("no node {node}"));
        let mut args: Vec<String> = vec!["agent".into(), "run".into(), format!("--node={node}")];
        for (model, count) in gpu_counts(&spec.nvml) {
            args.push(format!("--simulate={model}:{count}"));
        }
        args.push(format!("--simulate-state={}", self.sim.state_file(node).unwrap().display()));
        args.push(format!(
            "--pod-resources-socket={}",
            self.sim.pod_resources_socket(node).unwrap().display()
        ));
        args.push(format!("--device-plugin-namespace={DEVICE_PLUGIN_NAMESPACE}"));
        let port = free_port();
        self.metrics_ports.insert(node.to_string(), port);
        args.push(format!("--metrics-addr=127.0.0.1:{port}"));
        for flag in [
            "--poll-interval=1s",
            "--usage-publish-interval=1s",
            "--drain-timeout=2m",
            "--advertise-timeout=1m",
        ] {
            args.push(flag.into());
        }
        args.extend(flags.iter().map(|f| f.to_string()));
        let kubeconfig = self.agent_kubeconfig(node).to_path_buf();
        let process =
            self.spawn_geometer(&format!("agent {node}"), &format!("agent-{node}"), &kubeconfig, &args);
        self.agents.insert(node.to_string(), process);
    }

    /// SIGTERM, as the kubelet stopping the agent's pod does (within its 60 s grace period);
    /// whether it exited by itself in time.
    pub fn terminate_agent(&mut self, node: &str) -> bool {
        self.agents.remove(node).is_some_and(|p| p.terminate(std::time::Duration::from_secs(60)).is_some())
    }

    /// SIGKILL, as a node losing the agent's pod would.
    pub fn kill_agent(&mut self, node: &str) {
        if let Some(p) = self.agents.remove(node) {
            p.stop();
        }
    }

    /// Each call of the controller's or an agent's ServiceAccount that the API server's RBAC
    /// authorizer refused, as `who: access`.
    pub fn rbac_denials(&self) -> Vec<String> {
        [Identity::Controller, Identity::Agent]
            .into_iter()
            .flat_map(|id| {
                self.cp
                    .requests_of(id)
                    .into_iter()
                    .filter(|r| r.denied)
                    .map(move |r| format!("{}: {}", id.username(), r.access))
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    pub fn start_agents(&mut self) {
        for node in self.sim.node_names() {
            self.start_agent(&node);
        }
    }

    /// Starts (or restarts) controller replica `name` as `geometer controller`, with leader
    /// election, as the controller ServiceAccount.
    pub fn start_controller(&mut self, name: &str) {
        self.start_controller_with(name, &[]);
    }

    /// [`RealCluster::start_controller`] with more flags.
    pub fn start_controller_with(&mut self, name: &str, flags: &[String]) {
        self.kill_controller(name);
        let port = free_port();
        self.metrics_ports.insert(name.to_string(), port);
        let mut args: Vec<String> = vec![
            "controller".into(),
            format!("--metrics-addr=127.0.0.1:{port}"),
            format!("--lease-namespace={GEOMETER_NAMESPACE}"),
            format!("--identity={name}"),
        ];
        args.extend(flags.iter().cloned());
        // Every replica serves the webhooks (the agents' evictions need one to answer).
        let port = match flags.iter().find_map(|f| f.strip_prefix("--webhook-addr=")) {
            Some(addr) => {
                addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("--webhook-addr=HOST:PORT")
            }
            None => {
                let port = loopback_port();
                args.push(format!("--webhook-addr=127.0.0.1:{port}"));
                args.push("--webhook-names=127.0.0.1".into());
                port
            }
        };
        self.webhook_ports.insert(name.to_string(), port);
        let kubeconfig = self.cp.kubeconfig(Identity::Controller);
        let process = self.spawn_geometer(
            &format!("controller {name}"),
            &format!("controller-{name}"),
            &kubeconfig,
            &args,
        );
        self.controllers.insert(name.to_string(), process);
        if self.eviction_webhook_at.is_none() {
            self.point_eviction_webhook(Some(name));
        }
    }

    /// Points the agents' eviction webhook of deploy/base at controller replica `replica`'s
    /// port on this machine (in a cluster it names the geometer-webhook Service, which any
    /// live replica answers); `None` leaves it pointing at a replica that is gone, so agents
    /// cannot evict, as in a cluster with no controller running.
    fn point_eviction_webhook(&mut self, replica: Option<&str>) {
        self.eviction_webhook_at = replica.map(str::to_string);
        let Some(port) = replica.and_then(|r| self.webhook_ports.get(r)) else { return };
        let patch = json!({"webhooks": [{
            "name": "evictions.agent.geometer.dev",
            "clientConfig": {"service": null, "url": format!("https://127.0.0.1:{port}/validate/agent-eviction")},
        }]});
        self.cp
            .kubectl(
                Identity::Admin,
                &[
                    "patch",
                    "validatingwebhookconfiguration",
                    "geometer-agent-evictions",
                    "--type=strategic",
                    "-p",
                    &patch.to_string(),
                ],
            )
            .unwrap_or_else(|e| panic!("pointing the eviction webhook at {replica:?}: {e}"));
    }

    /// What the agent of node `process`, or controller replica `process`, serves on `/metrics`.
    pub fn scrape(&self, process: &str) -> String {
        use std::io::{Read, Write};
        let port =
            self.metrics_ports.get(process).unwrap_or_else(|| panic!("no agent or controller {process}"));
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", *port)).expect("the metrics endpoint answers");
        write!(stream, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("a response");
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        body.to_string()
    }

    pub fn kill_controller(&mut self, name: &str) {
        if let Some(p) = self.controllers.remove(name) {
            p.stop();
        }
        if self.eviction_webhook_at.as_deref() == Some(name) {
            let survivor = self.controllers.keys().next().cloned();
            self.point_eviction_webhook(survivor.as_deref());
        }
    }

    /// Waits until a controller wrote its CA into every webhook of deploy/base (right-sizing
    /// and the agents' evictions), so that the API server trusts it.
    pub async fn webhooks_trusted(&self) {
        let mutating = Api::<MutatingWebhookConfiguration>::all(self.admin.clone());
        let validating = Api::<ValidatingWebhookConfiguration>::all(self.admin.clone());
        let trusted = |configs: Vec<&WebhookClientConfig>| {
            configs.iter().all(|c| c.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty()))
        };
        crate::wait::wait_until(
            "the controller wrote its CA into every webhook",
            || async {
                let m = mutating.get("geometer-rightsizing").await.ok()?.webhooks?;
                let v = validating.get("geometer-agent-evictions").await.ok()?.webhooks?;
                let configs = m.iter().map(|w| &w.client_config).chain(v.iter().map(|w| &w.client_config));
                trusted(configs.collect()).then_some(())
            },
            || self.logs(),
        )
        .await;
    }

    /// The port controller replica `name` serves its webhooks on.
    pub fn webhook_port(&self, name: &str) -> u16 {
        *self.webhook_ports.get(name).unwrap_or_else(|| panic!("no controller {name}"))
    }

    /// Panics with its log when an agent or controller process exited on its own.
    pub fn check_alive(&self) {
        for p in self.agents.values().chain(self.controllers.values()) {
            if let Some(status) = p.exited() {
                panic!("{} exited ({status}):\n{}", p.name(), p.log_tail(40));
            }
        }
    }

    /// The logs of every agent and controller started, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for p in self.agents.values().chain(self.controllers.values()) {
            out.push_str(&format!("\n--- {} ---\n{}", p.name(), p.log_tail(30)));
        }
        out
    }
}

/// A loopback port free now, for a process the test starts.
pub fn loopback_port() -> u16 {
    free_port()
}

/// `--simulate` counts: consecutive GPUs of one model, in order (the agent adds them so).
fn gpu_counts(nvml: &geometer_agent::nvml::sim::SimNvml) -> Vec<(String, u32)> {
    use geometer_agent::nvml::NvmlBackend;
    let mut counts: Vec<(String, u32)> = Vec::new();
    for d in nvml.devices().expect("simulated devices") {
        let model = d.name.clone();
        match counts.last_mut() {
            Some((m, n)) if *m == model => *n += 1,
            _ => counts.push((model, 1)),
        }
    }
    counts
}

/// `kubectl apply --server-side -k deploy/base` (the real API server validates the CRDs and
/// RBAC), with the controller's Deployment scaled to 0 (Geometer runs as processes of the test
/// or demo, not as pods), and the CRDs serving.
pub fn install(cp: &ControlPlane) {
    let base = repo().join("deploy/base").display().to_string();
    cp.kubectl(Identity::Admin, &["apply", "--server-side", "-k", &base])
        .unwrap_or_else(|e| panic!("installing deploy/base: {e}"));
    cp.kubectl(
        Identity::Admin,
        &["-n", GEOMETER_NAMESPACE, "scale", "deployment/geometer-controller", "--replicas=0"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    wait_established(cp);
}

/// The CRDs of `deploy/base` serve before anything is created from them: Established, and
/// listed without the 429 "storage is (re)initializing" a new CRD answers for a moment.
fn wait_established(cp: &ControlPlane) {
    for crd in ["migpolicies", "migplans", "mignodes"] {
        let name = format!("crd/{crd}.geometer.dev");
        cp.kubectl(Identity::Admin, &["wait", "--for=condition=Established", "--timeout=60s", &name])
            .unwrap_or_else(|e| panic!("{e}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while let Err(e) = cp.kubectl(Identity::Admin, &["get", crd]) {
            assert!(std::time::Instant::now() < deadline, "{crd} never listed: {e}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}
