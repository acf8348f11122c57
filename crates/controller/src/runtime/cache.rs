//! Watches and caches (kube-runtime reflectors) of everything the controller reads: pods,
//! nodes, MigNodes, MigPolicies and MigPlans. Every change wakes the controller loop; the loop
//! then reads whole, consistent-enough copies of the caches. Writes go to the API server and
//! come back through the watches. Objects are cached as [`Decoded`]: one that does not decode
//! is kept as its name and error instead of failing the whole list.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use geometer_api::{MigNode, MigPlan, MigPolicy};

use geometer_api::decoded::{Decoded, Unreadable};

use super::projection::{self, Projection};

/// Read handles of the caches.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Decoded<Pod>>,
    pub nodes: Store<Decoded<Node>>,
    pub mignodes: Store<Decoded<MigNode>>,
    pub policies: Store<Decoded<MigPolicy>>,
    pub plans: Store<Decoded<MigPlan>>,
}

/// A cache's objects: those read, and those that could not be.
pub(crate) struct Split<K> {
    pub(crate) read: Vec<Arc<K>>,
    pub(crate) unreadable: Vec<Arc<Unreadable>>,
}

/// Splits a cache into its readable and unreadable objects.
pub(crate) fn split<K>(store: &Store<Decoded<K>>) -> Split<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut out = Split { read: Vec::new(), unreadable: Vec::new() };
    for object in store.state() {
        match &*object {
            Decoded::Read(k) => out.read.push(k.clone()),
            Decoded::Unreadable(u) => out.unreadable.push(u.clone()),
        }
    }
    out
}

/// The running watches; dropping it stops them.
pub struct Watches {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Caches {
    /// Starts one watch per kind; each change notifies `changed`.
    pub fn start(client: &Client, changed: Arc<Notify>) -> (Caches, Watches) {
        let mut tasks = Vec::new();
        let pods = spawn_reflector(client, changed.clone(), &mut tasks);
        let nodes = spawn_reflector(client, changed.clone(), &mut tasks);
        let mignodes = spawn_reflector(client, changed.clone(), &mut tasks);
        let policies = spawn_reflector(client, changed.clone(), &mut tasks);
        let plans = spawn_reflector(client, changed, &mut tasks);
        (Caches { pods, nodes, mignodes, policies, plans }, Watches { tasks })
    }

    /// Waits until every cache holds a full list.
    pub async fn ready(&self) {
        // A writer is only dropped when its task ends, which `Watches` does on drop; then the
        // controller is shutting down anyway, so an error here needs no handling.
        let _ = self.pods.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        let _ = self.mignodes.wait_until_ready().await;
        let _ = self.policies.wait_until_ready().await;
        let _ = self.plans.wait_until_ready().await;
    }
}

fn spawn_reflector<K>(
    client: &Client,
    changed: Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<Decoded<K>>
where
    K: Resource<DynamicType = ()>
        + Projection
        + Clone
        + std::fmt::Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&()).to_string();
    // Managed fields are dropped as each object is decoded (`Decoded`), and whatever else the
    // controller never reads before it is stored (`projection`).
    let stream = watcher(Api::<Decoded<K>>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(projection::project)
        .reflect(writer);
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::warn!(kind = %kind, error = %e, "watch failed; retrying with backoff"),
            }
        }
    }));
    reader
}
