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

pub mod certs;
pub mod review;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use k8s_openapi::api::core::v1::Pod;
use kube::{Client, ResourceExt};
use tokio::net::TcpListener;

use geometer_solver::catalog::Catalog;

use crate::rightsizing::admission::OptIn;
use crate::runtime::cache::{split, Caches};
use crate::runtime::metrics::Metrics;
use certs::{CertSource, Serving};
use review::{Inputs, Outcome};

/// Where the API server sends pods that opted in by their own label.
pub const POD_PATH: &str = "/rightsize/pod";
/// Where the API server sends pods of namespaces that opted in.
pub const NAMESPACE_PATH: &str = "/rightsize/namespace";
/// How often the certificate is checked (renewal, the CA in the configuration, files changed).
const CERT_CHECK: Duration = Duration::from_secs(60);

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

/// Binds `settings.addr` and starts serving from `caches`.
pub async fn start(
    settings: &WebhookSettings,
    client: Client,
    caches: Caches,
    catalog: Arc<Catalog>,
    metrics: Arc<Metrics>,
) -> std::io::Result<Webhook> {
    let listener = TcpListener::bind(settings.addr).await?;
    let serving = Arc::new(Serving::default());
    let acceptor = server::tls(serving.clone()).map_err(std::io::Error::other)?;
    let handler: server::Handler =
        Arc::new(move |path, body| handle(path, body, &caches, &catalog, &metrics));
    let keeper = tokio::spawn(certs::keep(client, settings.certs.clone(), serving, CERT_CHECK));
    let addr = settings.addr;
    let server = tokio::spawn(async move {
        if let Err(e) = server::serve(listener, acceptor, handler, std::future::pending()).await {
            tracing::error!(%addr, error = %e, "the right-sizing webhook stopped serving");
        }
    });
    tracing::info!(%addr, "serving the right-sizing webhook");
    Ok(Webhook { tasks: vec![keeper, server] })
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
        _ => {
            return error(
                StatusCode::NOT_FOUND,
                format!("no webhook at {path}; use {POD_PATH} or {NAMESPACE_PATH}"),
            )
        }
    };
    let request = match review::request(body) {
        Ok(request) => request,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let policies = split(&caches.policies).read;
    let mignodes = split(&caches.mignodes).read;
    let pods: Vec<Arc<Pod>> =
        split(&caches.pods).read.into_iter().filter(|p| p.namespace() == request.namespace).collect();
    let inputs = Inputs {
        policies: policies.iter().map(|p| &**p).collect(),
        mignodes: mignodes.iter().map(|m| &**m).collect(),
        pods: pods.iter().map(|p| &**p).collect(),
        catalog,
    };
    let (answer, outcome) = review::respond(&request, opt_in, &inputs);
    metrics.count_admission(outcome.as_str());
    if outcome != Outcome::Unchanged {
        tracing::info!(namespace = ?request.namespace, outcome = outcome.as_str(), "right-sized a new pod at admission");
    }
    match serde_json::to_vec(&answer) {
        Ok(body) => (StatusCode::OK, body),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot write the AdmissionReview: {e}")),
    }
}

fn error(status: StatusCode, message: String) -> (StatusCode, Vec<u8>) {
    (status, serde_json::json!({ "error": message }).to_string().into_bytes())
}
