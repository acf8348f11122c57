//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), so that of several
//! controller replicas exactly one plans and applies while the others stand by with warm caches.

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Lease object name.
    pub name: String,
    pub namespace: String,
    /// Unique per replica (the pod name in a cluster).
    pub identity: String,
    /// How long a lease holds without renewal.
    pub duration_seconds: u64,
    /// Renew this long before the lease runs out.
    pub grace_seconds: u64,
}

impl LeaseSettings {
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        LeaseSettings {
            name: "geometer-controller".to_string(),
            namespace: namespace.into(),
            identity: identity.into(),
            duration_seconds: 15,
            grace_seconds: 5,
        }
    }
}

#[derive(Debug, Error)]
pub enum LeaderError {
    #[error("lease {namespace}/{name}: duration_seconds ({duration}) must be greater than grace_seconds ({grace}) and both above 0")]
    BadTiming { namespace: String, name: String, duration: u64, grace: u64 },
    #[error("lease {namespace}/{name}: {source} (check that the controller may get, create and patch leases in {namespace})")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: LeaseManagerError,
    },
}

/// A running election. Dropping it (or [`Leadership::release`]) gives the lease up.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
}

impl Leadership {
    /// Joins the election; the lease is created if it does not exist.
    pub async fn join(client: Client, settings: &LeaseSettings) -> Result<Leadership, LeaderError> {
        if settings.duration_seconds == 0
            || settings.grace_seconds == 0
            || settings.grace_seconds >= settings.duration_seconds
        {
            return Err(LeaderError::BadTiming {
                namespace: settings.namespace.clone(),
                name: settings.name.clone(),
                duration: settings.duration_seconds,
                grace: settings.grace_seconds,
            });
        }
        let manager = LeaseManagerBuilder::new(client, &settings.name)
            .with_namespace(&settings.namespace)
            .with_identity(&settings.identity)
            .with_field_manager(format!("geometer-{}", settings.identity))
            .with_duration(settings.duration_seconds)
            .with_grace(settings.grace_seconds)
            .build()
            .await
            .map_err(|source| LeaderError::Lease {
                namespace: settings.namespace.clone(),
                name: settings.name.clone(),
                source,
            })?;
        let (state, task) = manager.watch().await;
        Ok(Leadership { state, task })
    }

    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// Waits until this replica leads. Errors when the election task ended.
    pub async fn acquired(&mut self) -> Result<(), watch::error::RecvError> {
        self.state.wait_for(|leader| *leader).await.map(|_| ())
    }

    /// Waits until this replica no longer leads (or the election ended).
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(|leader| !*leader).await;
    }

    /// Gives the lease up so another replica takes over at once instead of after it expires.
    pub async fn release(self) {
        let Leadership { state, task } = self;
        drop(state);
        match task.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "releasing the leader lease failed; it expires on its own")
            }
            Err(e) => tracing::warn!(error = %e, "leader election task ended abnormally"),
        }
    }
}
