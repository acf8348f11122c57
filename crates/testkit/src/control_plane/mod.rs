//! The real Kubernetes control plane for end-to-end tests: etcd, kube-apiserver,
//! kube-scheduler and kube-controller-manager as processes on loopback ports chosen at run
//! time, built from their Go modules by `scripts/k8s-control-plane.sh`. Only kubelets and GPUs
//! are simulated. Everything runs in a temporary folder (certificates, etcd data, one
//! kubeconfig per identity, logs) and stops when the [`ControlPlane`] is dropped, also when a
//! test panics.
//!
//! The flags follow what kubernetes-sigs/controller-runtime `pkg/internal/testing/controlplane`
//! (envtest) and kubernetes-sigs/kwok `pkg/kwokctl/components` give these binaries.
#![allow(dead_code)]

mod audit;
mod binaries;
mod identity;
pub(crate) mod process;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::PostParams;
use kube::Api;

pub use audit::{Audited, Eviction};
pub use binaries::{binaries, helm, kubectl, kubectl_or_skip, promtool, tool_or_skip, Binaries, REQUIRE_ENV};
pub use identity::{Identity, GEOMETER_NAMESPACE};
pub(crate) use process::{free_port, Process};

/// How long the control plane may take to become ready before the test fails.
const READY_WITHIN: Duration = Duration::from_secs(180);

/// How many ports kube-apiserver is started on before a lost port fails the test.
const BIND_ATTEMPTS: u32 = 3;

/// kube-apiserver could not bind the port chosen for it.
struct PortTaken;

pub struct ControlPlane {
    dir: tempfile::TempDir,
    server: String,
    /// Stopped in reverse order of starting.
    processes: Vec<Process>,
    /// From the first process started to the `default` ServiceAccount's existence.
    pub startup: Duration,
    /// The control plane's own kubectl (same Kubernetes release).
    kubectl: PathBuf,
}

/// Set to `1` to keep the control plane's folder (logs, kubeconfigs, etcd data) after a test.
pub const KEEP_ENV: &str = "GEOMETER_KEEP_CONTROL_PLANE";

impl Drop for ControlPlane {
    fn drop(&mut self) {
        while let Some(p) = self.processes.pop() {
            p.stop();
        }
        if std::env::var(KEEP_ENV).as_deref() == Ok("1") {
            let kept = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir")).keep();
            eprintln!("kept the control plane's folder {}", kept.display());
        }
    }
}

/// Starts the control plane, or says on stderr why a test is skipped and returns `None`.
/// With `GEOMETER_REQUIRE_CONTROL_PLANE=1` (as `make test` and `.ci/run` set it) missing
/// binaries fail the test instead.
pub async fn start_or_skip(test: &str) -> Option<ControlPlane> {
    start_or_skip_with(test, &[]).await
}

/// [`start_or_skip`] with more of kube-controller-manager's controllers (`daemonset-controller`
/// for tests with DaemonSets of their own; `deploy/` holds the agent's, which no other test
/// wants run).
pub async fn start_or_skip_with(test: &str, more_controllers: &[&str]) -> Option<ControlPlane> {
    start_or_skip_for_nodes(test, more_controllers, &[]).await
}

/// [`start_or_skip_with`] with a kubelet identity for each of `nodes`.
pub async fn start_or_skip_for_nodes(
    test: &str,
    more_controllers: &[&str],
    nodes: &[String],
) -> Option<ControlPlane> {
    match binaries() {
        Ok(bins) => Some(ControlPlane::start_for_nodes(&bins, more_controllers, nodes).await),
        Err(why) => {
            assert!(std::env::var(REQUIRE_ENV).as_deref() != Ok("1"), "{test}: {why}");
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

impl ControlPlane {
    /// Starts etcd, then kube-apiserver, then the scheduler and controller manager; returns
    /// once the API server is ready and the controller manager made the `default`
    /// ServiceAccount (pods cannot be created before).
    pub async fn start(bins: &Binaries) -> ControlPlane {
        ControlPlane::start_with(bins, &[]).await
    }

    /// [`ControlPlane::start`] with more of kube-controller-manager's controllers.
    pub async fn start_with(bins: &Binaries, more_controllers: &[&str]) -> ControlPlane {
        ControlPlane::start_for_nodes(bins, more_controllers, &[]).await
    }

    /// [`ControlPlane::start_with`] with a kubelet identity for each of `nodes`
    /// ([`ControlPlane::node_client`]).
    pub async fn start_for_nodes(
        bins: &Binaries,
        more_controllers: &[&str],
        nodes: &[String],
    ) -> ControlPlane {
        let began = Instant::now();
        let dir = tempfile::Builder::new().prefix("geometer-k8s-").tempdir().expect("temp dir");
        identity::write_token_file(dir.path(), nodes);
        identity::write_service_account_key(dir.path());
        audit::write_policy(dir.path());
        let mut cp = ControlPlane {
            server: String::new(),
            dir,
            processes: Vec::new(),
            startup: Duration::ZERO,
            kubectl: bins.kubectl.clone(),
        };

        let etcd = cp.start_etcd(bins);
        for attempt in 1..=BIND_ATTEMPTS {
            let port = free_port();
            cp.server = format!("https://127.0.0.1:{port}");
            cp.start_apiserver(bins, &etcd, port);
            for id in Identity::ALL {
                identity::write_kubeconfig(cp.dir.path(), &cp.server, id);
            }
            for node in nodes {
                let path = identity::node_kubeconfig_path(cp.dir.path(), node);
                identity::write_token_kubeconfig(
                    &path,
                    &cp.server,
                    &format!("node-{node}"),
                    &identity::node_token(node),
                );
            }
            if cp.wait_ready().await.is_ok() || attempt == BIND_ATTEMPTS {
                break;
            }
            eprintln!("kube-apiserver lost port {port} before binding it; starting it on another");
            cp.processes.pop().expect("kube-apiserver").stop();
        }
        cp.check_alive();
        cp.start_scheduler(bins);
        cp.start_controller_manager(bins, more_controllers);
        cp.wait_default_service_account().await;
        cp.startup = began.elapsed();
        eprintln!(
            "control plane ready at {} in {:.1?} (logs in {})",
            cp.server,
            cp.startup,
            cp.dir.path().display()
        );
        cp
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The kubeconfig that authenticates as `id`.
    pub fn kubeconfig(&self, id: Identity) -> PathBuf {
        identity::kubeconfig_path(self.dir.path(), id)
    }

    /// A kubeconfig for the agent of `node` as its DaemonSet's pod runs it: the pod
    /// `geometer-agent-<node>` (made here, bound to the node; the simulated kubelet runs it) and
    /// a `geometer-agent` ServiceAccount token bound to that pod by a TokenRequest, as the
    /// kubelet mounts it. The API server puts the pod's node in the token's user info
    /// (`authentication.kubernetes.io/node-name`), which deploy/'s policies check.
    pub async fn agent_kubeconfig(&self, node: &str) -> PathBuf {
        let admin = self.client(Identity::Admin).await;
        let name = format!("geometer-agent-{node}");
        let pods: Api<Pod> = Api::namespaced(admin.clone(), GEOMETER_NAMESPACE);
        let pod = match pods.get_opt(&name).await.expect("the agent's pod can be read") {
            Some(pod) => pod,
            None => {
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    // Not the DaemonSet's labels: where the DaemonSet controller runs it would
                    // adopt the pod, and delete it on a node its selector leaves out.
                    "metadata": {"name": name, "labels": {"geometer.dev/e2e": "agent"}},
                    "spec": {
                        "nodeName": node,
                        "serviceAccountName": "geometer-agent",
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "agent", "image": "geometer:dev"}],
                    },
                }))
                .expect("a pod");
                pods.create(&PostParams::default(), &pod).await.expect("the agent's pod is created")
            }
        };
        let uid = pod.metadata.uid.expect("a created pod has a uid");
        let request: TokenRequest = serde_json::from_value(serde_json::json!({"spec": {
            "audiences": [],
            "expirationSeconds": 86400,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid},
        }}))
        .expect("a token request");
        let accounts: Api<ServiceAccount> = Api::namespaced(admin, GEOMETER_NAMESPACE);
        let answer: TokenRequest = accounts
            .create_subresource("token", "geometer-agent", &PostParams::default(), &request)
            .await
            .expect("a token bound to the agent's pod (deploy/base makes the ServiceAccount)");
        let token = answer.status.and_then(|s| s.token).expect("the token");
        let path = self.dir.path().join(format!("agent-{node}.kubeconfig"));
        identity::write_token_kubeconfig(&path, &self.server, &format!("agent-{node}"), &token);
        path
    }

    /// A client authenticated as node `node`'s kubelet (`system:node:<node>`), for a node named
    /// when the control plane started ([`ControlPlane::start_for_nodes`]).
    pub async fn node_client(&self, node: &str) -> kube::Client {
        self.client_from(&identity::node_kubeconfig_path(self.dir.path(), node)).await
    }

    /// A client that reads `kubeconfig`, as kube-rs builds one.
    pub async fn client_from(&self, kubeconfig: &Path) -> kube::Client {
        let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", kubeconfig.display()));
        kube::Client::try_from(config).expect("client")
    }

    /// A client authenticated as `id`, as kube-rs builds one (it retries 429 answers, such as
    /// "storage is (re)initializing" while a new CRD's cache fills).
    pub async fn client(&self, id: Identity) -> kube::Client {
        self.client_with(id, true).await
    }

    /// A client that never retries: tests that compare answers see exactly what the server said.
    pub async fn raw_client(&self, id: Identity) -> kube::Client {
        self.client_with(id, false).await
    }

    async fn client_with(&self, id: Identity, retry: bool) -> kube::Client {
        let path = self.kubeconfig(id);
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
        config.default_retry = retry;
        kube::Client::try_from(config).expect("client")
    }

    /// The control plane's kubectl as `id`; its output, or its error output when it fails.
    pub fn kubectl(&self, id: Identity, args: &[&str]) -> Result<String, String> {
        let out = std::process::Command::new(&self.kubectl)
            .args(args)
            .env("KUBECONFIG", self.kubeconfig(id))
            .output()
            .map_err(|e| format!("cannot run kubectl: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!("kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// Every pod eviction the API server answered so far, in order.
    pub fn evictions(&self) -> Vec<Eviction> {
        audit::evictions(self.dir.path())
    }

    /// Who wrote pod `namespace/name`'s status (and was allowed to), in order.
    pub fn pod_status_writers(&self, namespace: &str, name: &str) -> Vec<String> {
        audit::pod_status_writers(self.dir.path(), namespace, name)
    }

    /// Every resource request `id` made so far, with the authorizer's decision. Recorded for the
    /// controller's and the agent's ServiceAccounts only (other identities: empty).
    pub fn requests_of(&self, id: Identity) -> Vec<Audited> {
        audit::requests_of(self.dir.path(), &id.username())
    }

    /// The body of every Node patch the node agent made that the API server accepted.
    pub fn agent_node_patches(&self) -> Vec<serde_json::Value> {
        audit::agent_node_patches(self.dir.path())
    }

    /// The last lines of a component's log, for failure messages.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        match self.processes.iter().find(|p| p.name() == component) {
            Some(p) => p.log_tail(lines),
            None => format!("(no component {component})"),
        }
    }

    /// Starts a component with its output in `<component>.log`; it stops with the control plane.
    fn launch(&mut self, component: &str, binary: &Path, args: &[String]) {
        let log = self.dir.path().join(format!("{component}.log"));
        self.processes.push(Process::spawn(component, binary, args, &log));
    }

    fn start_etcd(&mut self, bins: &Binaries) -> String {
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let data = self.dir.path().join("etcd");
        let args = [
            "--name=geometer".to_string(),
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=geometer={peer_url}"),
            "--unsafe-no-fsync=true".to_string(),
            "--log-level=warn".to_string(),
        ];
        self.launch("etcd", &bins.etcd, &args);
        client_url
    }

    fn start_apiserver(&mut self, bins: &Binaries, etcd: &str, port: u16) {
        let d = self.dir.path();
        let key = identity::service_account_key(d);
        let args = [
            format!("--etcd-servers={etcd}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            // Since 1.37 the endpoint reconciler refuses a loopback address for the
            // `kubernetes` Service's endpoints; nothing here reaches the API server through it.
            "--endpoint-reconciler-type=none".to_string(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", d.join("certs").display()),
            // As clusters run kubelets: the Node authorizer and NodeRestriction bind each
            // `system:node:<name>` to its own node.
            "--authorization-mode=Node,RBAC".to_string(),
            "--enable-admission-plugins=NodeRestriction".to_string(),
            format!("--token-auth-file={}", identity::token_file(d).display()),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-account-key-file={}", key.display()),
            format!("--service-account-signing-key-file={}", key.display()),
            "--service-cluster-ip-range=10.96.0.0/16".to_string(),
            "--allow-privileged=true".to_string(),
            "--enable-priority-and-fairness=false".to_string(),
            format!("--audit-policy-file={}", audit::policy_file(d).display()),
            format!("--audit-log-path={}", audit::log_file(d).display()),
            "--v=1".to_string(),
        ];
        self.launch("kube-apiserver", &bins.apiserver, &args);
    }

    fn start_scheduler(&mut self, bins: &Binaries) {
        let kubeconfig = self.kubeconfig(Identity::Scheduler);
        let args = [
            format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
            "--v=1".to_string(),
        ];
        self.launch("kube-scheduler", &bins.scheduler, &args);
    }

    fn start_controller_manager(&mut self, bins: &Binaries, more: &[&str]) {
        let d = self.dir.path();
        let kubeconfig = self.kubeconfig(Identity::ControllerManager);
        let mut controllers = vec![
            "serviceaccount-controller",
            "serviceaccount-token-controller",
            "namespace-controller",
            "garbage-collector-controller",
            "replicaset-controller",
            "deployment-controller",
            "job-controller",
            "disruption-controller",
            "node-lifecycle-controller",
            "pod-garbage-collector-controller",
            "root-ca-certificate-publisher-controller",
            // DRA: creates claims from a pod's ResourceClaimTemplates, records them in the pod's
            // status, and frees a claim's allocation once no pod holds it
            // (kubernetes/kubernetes pkg/controller/resourceclaim).
            "resourceclaim-controller",
        ];
        controllers.extend_from_slice(more);
        let args = [
            format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
            format!("--controllers={}", controllers.join(",")),
            "--use-service-account-credentials=true".to_string(),
            format!("--service-account-private-key-file={}", identity::service_account_key(d).display()),
            format!("--root-ca-file={}", d.join("certs/apiserver.crt").display()),
            "--v=1".to_string(),
        ];
        self.launch("kube-controller-manager", &bins.controller_manager, &args);
    }

    /// The serving certificate exists and `/readyz` answers ok; `Err` when kube-apiserver
    /// exited because another process took its port first.
    async fn wait_ready(&mut self) -> Result<(), PortTaken> {
        let deadline = Instant::now() + READY_WITHIN;
        let cert = self.dir.path().join("certs/apiserver.crt");
        let mut client = None;
        let mut last = String::from("no answer yet");
        loop {
            if self.log_tail("kube-apiserver", 5).contains("address already in use") {
                return Err(PortTaken);
            }
            self.check_alive();
            if client.is_none() && cert.exists() {
                client = Some(self.client(Identity::Admin).await);
            }
            if let Some(c) = &client {
                let request = http::Request::get("/readyz").body(Vec::new()).expect("request");
                match c.request_text(request).await {
                    Ok(body) if body.trim() == "ok" => return Ok(()),
                    // Which check is failing (the answer names it), for the message below.
                    Ok(body) => last = body,
                    Err(e) => last = e.to_string(),
                }
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready within {READY_WITHIN:?} (last /readyz: {last}):\n{}",
                self.log_tail("kube-apiserver", 40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_default_service_account(&mut self) {
        let client = self.client(Identity::Admin).await;
        let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            self.check_alive();
            if let Ok(Some(_)) = accounts.get_opt("default").await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-controller-manager made no default ServiceAccount within {READY_WITHIN:?}:\n{}",
                self.log_tail("kube-controller-manager", 40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Panics with its log when a component has exited.
    fn check_alive(&self) {
        for p in &self.processes {
            if let Some(status) = p.exited() {
                let name = p.name().to_string();
                panic!("{name} exited ({status}):\n{}", self.log_tail(&name, 40));
            }
        }
    }
}
