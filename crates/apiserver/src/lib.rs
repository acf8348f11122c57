//! An in-memory Kubernetes API server for tests and the demo.
//!
//! It serves the REST API (discovery, get/list/watch, create/update/patch/apply/delete, status
//! subresources, eviction with PodDisruptionBudgets, server-side printing) for the built-in
//! types Geometer touches and for any CRD created at run time, both as a `tower::Service` for
//! `kube::Client` and over plain HTTP on a loopback port for `kubectl`.
//!
//! ```
//! # fn main() -> anyhow::Result<()> {
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! use geometer_apiserver::{ApiServer, Fault, Verb};
//! use k8s_openapi::api::core::v1::Node;
//!
//! let server = ApiServer::new();
//! let client: kube::Client = server.client();           // in-process, no sockets
//! let (addr, _http) = server.serve_http("127.0.0.1:0").await?; // for kubectl
//! let kubeconfig = std::env::temp_dir().join(format!("geometer-apiserver-{}.kubeconfig", addr.port()));
//! server.write_kubeconfig(&kubeconfig)?;
//! assert!(std::fs::read_to_string(&kubeconfig)?.contains(&format!("http://{addr}")));
//! server.seed(&serde_json::from_value::<Node>(serde_json::json!({"metadata": {"name": "gpu-1"}}))?)?;
//! server.faults().inject(Fault::error(500).verb(Verb::List).resource("nodes").times(1));
//!
//! let nodes = kube::Api::<Node>::all(client);
//! let refused = nodes.list(&Default::default()).await.unwrap_err();
//! assert!(matches!(&refused, kube::Error::Api(s) if s.code == 500), "{refused}");
//! let listed = nodes.list(&Default::default()).await?; // the fault struck once
//! assert_eq!(listed.items[0].metadata.name.as_deref(), Some("gpu-1"));
//! # std::fs::remove_file(kubeconfig)?;
//! # Ok(()) })
//! # }
//! ```

mod builtins;
mod convert;
mod crd;
mod delete;
mod discovery;
mod disruption;
mod error;
mod events;
mod faults;
mod fieldset;
mod http;
mod jsonpath;
mod kubeconfig;
mod list_options;
mod list_semantics;
mod list_type;
mod managed;
mod openapi;
mod patch;
mod pods;
mod printers;
mod protobuf;
mod read;
mod registry;
mod request;
mod resource;
mod response;
mod router;
mod schema;
mod seed;
mod selector;
mod service;
mod store;
mod strategic;
mod table;
mod validate;
mod verbs;
mod watch;
mod write;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

pub use error::ApiError;
pub use faults::{Fault, Faults};
pub use http::ServeHandle;
pub use request::Verb;
pub use response::Body;
pub use seed::SeedError;
pub use service::ApiService;

use store::Store;
use watch::Control;

/// One request as the server saw it (see [`ApiServer::requests`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    pub verb: Option<Verb>,
    /// API group of the resource, `""` for the core group; None for non-resource paths.
    pub group: Option<String>,
    /// `pods`, `pods/eviction`, ...; None for discovery and other non-resource paths.
    pub resource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub status: u16,
    /// The User-Agent header: tells apart the clients sharing one server (e.g. to check each
    /// component's RBAC against the calls it made).
    pub user_agent: String,
}

const REQUEST_LOG_LIMIT: usize = 10_000;

pub(crate) struct Inner {
    store: Mutex<Store>,
    rv_watch: tokio::sync::watch::Receiver<u64>,
    control: broadcast::Sender<Control>,
    /// Open watches per resource (plural).
    watches: tokio::sync::watch::Sender<HashMap<String, usize>>,
    faults: Faults,
    config: Config,
    served_at: Mutex<Option<SocketAddr>>,
    log: Mutex<VecDeque<RecordedRequest>>,
}

impl Inner {
    fn record(&self, r: RecordedRequest) {
        let mut log = self.log.lock().expect("request log lock");
        if log.len() >= REQUEST_LOG_LIMIT {
            log.pop_front();
        }
        log.push_back(r);
    }

    fn set_served_at(&self, addr: SocketAddr) {
        *self.served_at.lock().expect("address lock") = Some(addr);
    }

    fn server_address(&self) -> String {
        self.served_at
            .lock()
            .expect("address lock")
            .map_or_else(|| "127.0.0.1:0".to_string(), |a| a.to_string())
    }
}

#[derive(Debug, Clone)]
struct Config {
    bookmark_interval: Duration,
}

/// Options for [`ApiServer`]; `ApiServer::new()` uses the defaults.
#[derive(Debug, Clone)]
pub struct ApiServerBuilder {
    history_limit: usize,
    bookmark_interval: Duration,
}

impl Default for ApiServerBuilder {
    fn default() -> Self {
        ApiServerBuilder { history_limit: 100_000, bookmark_interval: Duration::from_secs(30) }
    }
}

impl ApiServerBuilder {
    /// How many changes watches can replay (default 100,000); an older resourceVersion gets
    /// `410 Gone`, as after etcd compaction.
    pub fn history_limit(mut self, changes: usize) -> Self {
        self.history_limit = changes;
        self
    }

    /// How often watches that allow bookmarks get one (default 30 s).
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = every;
        self
    }

    pub fn build(self) -> ApiServer {
        let (rv_tx, rv_rx) = tokio::sync::watch::channel(0);
        let (control, _) = broadcast::channel(64);
        let mut store = Store::new(self.history_limit, rv_tx);
        seed::initial_namespaces(&mut store);
        ApiServer {
            inner: Arc::new(Inner {
                store: Mutex::new(store),
                rv_watch: rv_rx,
                faults: Faults::new(control.clone()),
                control,
                watches: tokio::sync::watch::Sender::new(HashMap::new()),
                config: Config { bookmark_interval: self.bookmark_interval },
                served_at: Mutex::new(None),
                log: Mutex::new(VecDeque::new()),
            }),
        }
    }
}

/// The in-memory API server. Cheap to clone; clones share one state.
#[derive(Clone)]
pub struct ApiServer {
    inner: Arc<Inner>,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

/// RFC 3339 at second precision, as Kubernetes writes timestamps.
pub(crate) fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl ApiServer {
    /// A server with the namespaces `default`, `kube-system`, `kube-public`, `kube-node-lease`.
    pub fn new() -> ApiServer {
        ApiServerBuilder::default().build()
    }

    pub fn builder() -> ApiServerBuilder {
        ApiServerBuilder::default()
    }

    /// With `true`, deleting a pod bound to a node that has not ended only marks it
    /// (deletionTimestamp, deletionGracePeriodSeconds) until its kubelet deletes it with
    /// `gracePeriodSeconds: 0`, as on a real cluster; with `false` (the default: no kubelet
    /// runs) it goes at once.
    pub fn set_graceful_pod_deletion(&self, on: bool) {
        self.inner.store.lock().expect("store lock poisoned").graceful_pods = on;
    }

    /// The server as a `tower::Service` (for `kube::Client::new`, or tower-test style use).
    pub fn service(&self) -> ApiService {
        ApiService { inner: self.inner.clone() }
    }

    /// A kube client that talks to this server in-process, default namespace `default`.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    /// Serves plain HTTP on `addr` (e.g. `"127.0.0.1:0"` for any free port) until the returned
    /// handle is dropped. Call from within a tokio runtime.
    pub async fn serve_http(&self, addr: &str) -> std::io::Result<(SocketAddr, ServeHandle)> {
        http::serve(self.inner.clone(), addr).await
    }

    /// Where [`serve_http`](Self::serve_http) last bound, if it has.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        *self.inner.served_at.lock().expect("address lock")
    }

    /// A kubeconfig for the HTTP address (`server: http://127.0.0.1:PORT`, context
    /// `geometer-apiserver`, namespace `default`), or None before `serve_http`.
    pub fn kubeconfig(&self) -> Option<String> {
        self.http_addr().map(kubeconfig::kubeconfig_yaml)
    }

    /// Writes [`kubeconfig`](Self::kubeconfig) to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let yaml = self.kubeconfig().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the API server is not serving HTTP yet: call serve_http first",
            )
        })?;
        std::fs::write(path, yaml)
    }

    /// Fault injection: delays, errors, dropped watches.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.store.lock().expect("store lock poisoned").current_rv()
    }

    /// Every request served so far (the most recent 10,000), oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.log.lock().expect("request log lock").iter().cloned().collect()
    }

    /// Open watches on `resource` (a plural such as `pods`).
    pub fn open_watches(&self, resource: &str) -> usize {
        self.inner.watches.borrow().get(resource).copied().unwrap_or(0)
    }

    /// Waits until at least `n` watches on `resource` are open: lets a test act only once a
    /// watcher is listening, without sleeping.
    pub async fn wait_for_watches(&self, resource: &str, n: usize) {
        let mut rx = self.inner.watches.subscribe();
        let _ = rx.wait_for(|m| m.get(resource).copied().unwrap_or(0) >= n).await;
    }

    /// Makes every open watch that allows bookmarks send one now.
    pub fn send_bookmarks(&self) {
        let _ = self.inner.control.send(Control::Bookmark);
    }
}
