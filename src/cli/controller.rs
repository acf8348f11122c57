//! `geometer controller`: plans MIG geometry from pending demand and rolls plans out (see
//! `crate::controller`). Runs against the in-cluster config or the current kubeconfig.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use clap::Args;

use super::catalog::CatalogSource;
use super::output::Failure;
use geometer_controller::rightsizing::webhook::store::{CertSource, Managed};
use geometer_controller::rightsizing::webhook::WebhookSettings;
use geometer_controller::LeaseSettings;
use geometer_controller::Metrics;
use geometer_controller::{self as controller, RunError, Settings};
use geometer_controller::{serve_health, Health, MetricsText};

#[derive(Debug, Args)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub catalog: CatalogSource,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Namespace of the leader-election Lease (the controller's own namespace in a cluster).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NAMESPACE", default_value = "geometer-system")]
    pub lease_namespace: String,
    /// Run without leader election. Only for a single replica: two replicas without it would
    /// both publish and apply plans.
    #[arg(long)]
    pub no_leader_election: bool,
    /// This replica's name in the lease and in events [default: POD_NAME, else host name].
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub identity: Option<String>,
    /// Serve the right-sizing webhook over HTTPS here (e.g. 0.0.0.0:9443); none when unset.
    #[arg(long, value_name = "ADDR")]
    pub webhook_addr: Option<SocketAddr>,
    /// The webhook's certificate: `tls.crt` and `tls.key` in this folder, re-read when they
    /// change (a Secret kept by cert-manager). Without it the controller keeps its own CA and
    /// certificate in --webhook-secret and writes the CA into --webhook-configuration.
    #[arg(long, value_name = "DIR")]
    pub webhook_cert_dir: Option<PathBuf>,
    /// Secret of the self-managed certificate, in the controller's namespace.
    #[arg(long, value_name = "NAME", default_value = "geometer-webhook-tls")]
    pub webhook_secret: String,
    /// MutatingWebhookConfiguration whose webhooks get the self-managed CA as caBundle.
    #[arg(long, value_name = "NAME", default_value = "geometer-rightsizing")]
    pub webhook_configuration: String,
    /// ValidatingWebhookConfiguration of the node agents' evictions (each agent may evict only
    /// its own node's pods), which gets the self-managed CA as caBundle too.
    #[arg(long, value_name = "NAME", default_value = "geometer-agent-evictions")]
    pub eviction_webhook_configuration: String,
    /// DNS names and IP addresses the API server reaches the webhook by, comma-separated
    /// [default: geometer-webhook.NAMESPACE.svc].
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub webhook_names: Vec<String>,
}

impl ControllerArgs {
    fn webhook(&self) -> Option<WebhookSettings> {
        let certs = match &self.webhook_cert_dir {
            Some(dir) => CertSource::Dir(dir.clone()),
            None => CertSource::Managed(Managed {
                namespace: self.lease_namespace.clone(),
                secret: self.webhook_secret.clone(),
                configuration: self.webhook_configuration.clone(),
                eviction_configuration: self.eviction_webhook_configuration.clone(),
                names: if self.webhook_names.is_empty() {
                    vec![format!("geometer-webhook.{}.svc", self.lease_namespace)]
                } else {
                    self.webhook_names.clone()
                },
            }),
        };
        Some(WebhookSettings { addr: self.webhook_addr?, certs })
    }
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    format!("{}-{}", if host.is_empty() { "geometer" } else { &host }, std::process::id())
}

pub fn run(args: ControllerArgs) -> Result<(), Failure> {
    let catalog = args.catalog.load()?;
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let mut settings = Settings::new(identity.clone(), Arc::new(catalog));
    settings.webhook = args.webhook();
    if !args.no_leader_election {
        settings.lease = Some(LeaseSettings::new(args.lease_namespace.clone(), identity));
    }
    let runtime = tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")
        .map_err(Failure::internal)?;
    runtime.block_on(async move {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| Failure::bad_input(anyhow!("cannot reach the Kubernetes API (no in-cluster config and no usable KUBECONFIG): {e}")))?;
        let listener = tokio::net::TcpListener::bind(args.metrics_addr)
            .await
            .map_err(|e| Failure::bad_input(anyhow!("--metrics-addr {}: cannot listen: {e}", args.metrics_addr)))?;
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::default());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let text: MetricsText = {
            let metrics = metrics.clone();
            Arc::new(move || metrics.encode())
        };
        let endpoint = tokio::spawn(serve_health(listener, text, health.clone(), wait(stopped)));
        tracing::info!(metrics = %args.metrics_addr, leader_election = !args.no_leader_election, "geometer controller starting");
        let result = controller::run(client, settings, metrics, health.clone(), super::agent_run::shutdown()).await;
        if let Err(e) = &result {
            health.set_failed(e.to_string());
        }
        let _ = stop.send(true);
        let _ = endpoint.await;
        match result {
            Ok(()) => Ok(()),
            Err(e @ RunError::Leader(_)) => Err(Failure::internal(e.into())),
            Err(e @ RunError::LostLeadership) => Err(Failure::internal(e.into())),
            Err(e @ RunError::Webhook { .. }) => Err(Failure::bad_input(anyhow!("--webhook-addr: {e}"))),
        }
    })
}

pub(crate) async fn wait(mut stopped: tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}
