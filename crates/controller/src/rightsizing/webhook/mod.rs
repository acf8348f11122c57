//! The right-sizing webhook: a mutating admission webhook the controller serves over HTTPS, so
//! that a new pod that opted in asks for the slice its workload was measured to need instead of
//! a whole GPU ([`crate::rightsizing::admission`] decides; `MigPolicy.spec.rightsizing` turns it
//! on and sets DryRun or Enforce).
//!
//! The MutatingWebhookConfiguration (`deploy/base/webhook.yaml`) has two webhooks, both with
//! `failurePolicy: Ignore` so that Geometer being down never blocks pod creation:
//! `pods.rightsizing.geometer.dev` sends pods labelled `geometer.dev/rightsizing: enabled` to
//! [`POD_PATH`], and `namespaces.rightsizing.geometer.dev` sends the pods of namespaces labelled
//! so to [`NAMESPACE_PATH`]. Every replica serves it from its own caches (standby replicas keep
//! theirs warm), so the Service may route to any of them.
//!
//! The same server answers the node agents' evictions ([`crate::agent_evictions`], a
//! ValidatingWebhookConfiguration of its own with `failurePolicy: Fail`).

pub mod certs;
pub mod review;
pub mod server;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use kube::Client;
use tokio::net::TcpListener;

use geometer_api::decoded::Decoded;
use geometer_api::MigPolicy;
use geometer_solver::catalog::Catalog;

use crate::adapter::PodView;
use crate::agent_evictions::{self, PodNode};
use crate::rightsizing::admission::OptIn;
use crate::runtime::cache::{split, Caches};
use crate::runtime::health::Health;
use crate::runtime::metrics::Metrics;
use certs::Serving;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use kube::core::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use review::{Measured, Outcome};
use store::CertSource;

/// Where the API server sends pods that opted in by their own label.
pub const POD_PATH: &str = "/rightsize/pod";
/// Where the API server sends pods of namespaces that opted in.
pub const NAMESPACE_PATH: &str = "/rightsize/namespace";
/// How often the certificate is checked: renewal, files changed, and the CA in the webhook
/// configuration (a configuration deleted and re-created, or replaced by a deploy tool, has no
/// `caBundle` until then). Two small GETs per replica.
const CERT_CHECK: Duration = Duration::from_secs(15);

/// Where the webhook listens and where its certificate comes from.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub addr: SocketAddr,
    pub certs: CertSource,
}

/// The running webhook: its server and certificate keeper; dropping it stops both.
pub struct Webhook {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Binds `settings.addr` and starts serving from `caches`. The replica is not ready (`/readyz`)
/// until it presents a certificate, so that the Service sends the API server only to replicas
/// that can answer.
pub async fn start(
    settings: &WebhookSettings,
    client: Client,
    caches: Caches,
    catalog: Arc<Catalog>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> std::io::Result<Webhook> {
    let listener = TcpListener::bind(settings.addr).await?;
    let serving = Arc::new(Serving::default());
    let acceptor = server::tls(serving.clone()).map_err(std::io::Error::other)?;
    let handler: server::Handler =
        Arc::new(move |path, body| handle(path, body, &caches, &catalog, &metrics));
    let keeper = tokio::spawn(store::keep(client, settings.certs.clone(), serving.clone(), CERT_CHECK));
    let addr = settings.addr;
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = {
        let stopped = stopped.clone();
        tokio::spawn(async move {
            server::serve(listener, acceptor, handler, std::future::pending()).await;
            tracing::error!(%addr, "the right-sizing webhook stopped serving");
            stopped.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    health.set_serving(false);
    let readiness = tokio::spawn(async move {
        loop {
            health.set_serving(serving.is_set() && !stopped.load(std::sync::atomic::Ordering::SeqCst));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    tracing::info!(%addr, "serving the right-sizing webhook");
    Ok(Webhook { tasks: vec![keeper, server, readiness] })
}

/// One request: the AdmissionReview's answer, or an error status for what is not one.
fn handle(
    path: &str,
    body: &[u8],
    caches: &Caches,
    catalog: &Catalog,
    metrics: &Metrics,
) -> (StatusCode, Vec<u8>) {
    let opt_in = match path {
        POD_PATH => OptIn::Pod,
        NAMESPACE_PATH => OptIn::Namespace,
        agent_evictions::PATH => return agent_eviction(body, caches),
        _ => {
            return error(
                StatusCode::NOT_FOUND,
                format!(
                    "no webhook at {path}; use {POD_PATH}, {NAMESPACE_PATH} or {}",
                    agent_evictions::PATH
                ),
            )
        }
    };
    let request = match review::request(body) {
        Ok(request) => request,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let policies = split(&caches.policies).read;
    let policies: Vec<&MigPolicy> = policies.iter().map(|p| &**p).collect();
    let measured = |namespace: &str| Measured {
        mignodes: split(&caches.mignodes).read,
        pods: caches
            .pods
            .state()
            .into_iter()
            .filter_map(|p| match &*p {
                Decoded::Read(pod) if pod.metadata.namespace.as_deref() == Some(namespace) => {
                    Some(pod.clone())
                }
                _ => None,
            })
            .collect(),
    };
    let (answer, outcome) = review::respond(&request, opt_in, &policies, catalog, measured);
    metrics.count_admission(outcome.as_str());
    if outcome != Outcome::Unchanged {
        tracing::info!(namespace = ?request.namespace, outcome = outcome.as_str(), "right-sized a new pod at admission");
    }
    match serde_json::to_vec(&answer) {
        Ok(body) => (StatusCode::OK, body),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot write the AdmissionReview: {e}")),
    }
}

/// An eviction by a node agent: allowed for the pods bound to its own node only.
fn agent_eviction(body: &[u8], caches: &Caches) -> (StatusCode, Vec<u8>) {
    let review: Result<AdmissionReview<DynamicObject>, _> = serde_json::from_slice(body);
    let request: AdmissionRequest<DynamicObject> = match review.map(|r| r.try_into()) {
        Ok(Ok(request)) => request,
        Ok(Err(_)) => return error(StatusCode::BAD_REQUEST, "the AdmissionReview has no request".into()),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("not an AdmissionReview: {e}")),
    };
    let pod_node = |namespace: &str, name: &str| {
        let key = ObjectRef::<Decoded<PodView>>::new(name).within(namespace);
        match caches.pods.get(&key).as_deref() {
            Some(Decoded::Read(pod)) => match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                Some(node) if !node.is_empty() => PodNode::Bound(node),
                _ => PodNode::Unbound,
            },
            _ => PodNode::Unknown,
        }
    };
    let answer = agent_evictions::review(&request, pod_node);
    if answer.response.as_ref().is_some_and(|r| !r.allowed) {
        let why = answer.response.as_ref().map(|r| r.result.message.clone()).unwrap_or_default();
        tracing::warn!(namespace = ?request.namespace, pod = %request.name, %why, "refused a node agent's eviction");
    }
    match serde_json::to_vec(&answer) {
        Ok(body) => (StatusCode::OK, body),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot write the AdmissionReview: {e}")),
    }
}

fn error(status: StatusCode, message: String) -> (StatusCode, Vec<u8>) {
    (status, server::error_body(&message))
}
