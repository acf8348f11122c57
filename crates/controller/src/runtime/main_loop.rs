//! `geometer controller`: the loop that ties the pieces together.
//!
//! Watches fill the caches; every change (and every timer a decision asked for) runs one pass:
//! policies are validated, each open plan moves along its lifecycle, and each valid policy's
//! demand batch is planned when its window closes. Only the leader acts; other replicas keep
//! warm caches and wait for the lease.

use std::future::Future;
use std::sync::Arc;

use kube::Client;
use thiserror::Error;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::runtime::cache::Caches;
use crate::runtime::health::Health;
use crate::runtime::leader::{LeaderError, Leadership};
use crate::runtime::metrics::Metrics;
use crate::runtime::reconcile::Controller;
pub use crate::runtime::settings::Settings;

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("lost the leader lease; exiting so that a fresh start waits for it again")]
    LostLeadership,
    #[error("the right-sizing webhook cannot listen on {addr}: {source}")]
    Webhook { addr: std::net::SocketAddr, source: std::io::Error },
}

/// Runs until `shutdown` completes (or leadership is lost).
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    tokio::pin!(shutdown);
    let changed = Arc::new(Notify::new());
    let optional = crate::runtime::cache::OptionalKinds::discover(&client).await;
    let (caches, _watches) = Caches::start(&client, changed.clone(), &optional);
    let _webhook = match &settings.webhook {
        Some(webhook) => Some(
            crate::rightsizing::webhook::start(
                webhook,
                client.clone(),
                caches.clone(),
                settings.catalog.clone(),
                metrics.clone(),
                health.clone(),
            )
            .await
            .map_err(|source| RunError::Webhook { addr: webhook.addr, source })?,
        ),
        None => None,
    };
    tokio::select! {
        () = caches.ready() => {}
        () = &mut shutdown => return Ok(()),
    }
    health.set_ready(true);
    tracing::info!(identity = %settings.identity, "caches filled");

    let mut leadership = match &settings.lease {
        Some(lease) => {
            let mut leadership = Leadership::join(client.clone(), lease).await?;
            tracing::info!(lease = %lease.name, "standing by for the leader lease");
            tokio::select! {
                acquired = leadership.acquired() => acquired.map_err(|_| RunError::LostLeadership)?,
                () = &mut shutdown => {
                    leadership.release().await;
                    return Ok(());
                }
            }
            tracing::info!(identity = %settings.identity, "leading");
            Some(leadership)
        }
        None => None,
    };
    metrics.set_leader(true);

    let mut controller = Controller::new(client, &settings, caches, metrics.clone());
    let outcome = loop {
        let next = controller.pass().await.min(Instant::now() + settings.resync);
        let lost = async {
            match leadership.as_mut() {
                Some(l) => l.lost().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = changed.notified() => tokio::time::sleep(settings.debounce).await,
            () = tokio::time::sleep_until(next) => {}
            () = lost => break Err(RunError::LostLeadership),
            () = &mut shutdown => break Ok(()),
        }
    };
    metrics.set_leader(false);
    if let Some(l) = leadership {
        l.release().await;
    }
    outcome
}
