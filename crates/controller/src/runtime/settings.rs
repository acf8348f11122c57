//! What the controller process is told at start: identity, catalog, leader election, timing.

use std::sync::Arc;
use std::time::Duration;

use geometer_solver::catalog::Catalog;

use crate::rightsizing::webhook::WebhookSettings;
use crate::runtime::leader::LeaseSettings;

#[derive(Debug, Clone)]
pub struct Settings {
    /// Names this replica in events and the lease (the pod name in a cluster).
    pub identity: String,
    pub catalog: Arc<Catalog>,
    /// Leader election; None runs without one (a single replica, the demo, tests).
    pub lease: Option<LeaseSettings>,
    /// Longest time between passes when nothing changes.
    pub resync: Duration,
    /// After a change, wait this long for more before the pass, so a burst is one pass.
    pub debounce: Duration,
    /// The right-sizing webhook; None serves none.
    pub webhook: Option<WebhookSettings>,
}

impl Settings {
    pub fn new(identity: impl Into<String>, catalog: Arc<Catalog>) -> Self {
        Settings {
            identity: identity.into(),
            catalog,
            lease: None,
            resync: Duration::from_secs(30),
            debounce: Duration::from_millis(100),
            webhook: None,
        }
    }
}
