//! Watches and caches (kube-runtime reflectors) of everything the controller reads: pods,
//! nodes, MigNodes, MigPolicies and MigPlans. Every change wakes the controller loop; the loop
//! then reads whole, consistent-enough copies of the caches. Writes go to the API server and
//! come back through the watches.

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

/// Read handles of the caches.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub mignodes: Store<MigNode>,
    pub policies: Store<MigPolicy>,
    pub plans: Store<MigPlan>,
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
        let pods = spawn_reflector(Api::<Pod>::all(client.clone()), changed.clone(), &mut tasks);
        let nodes = spawn_reflector(Api::<Node>::all(client.clone()), changed.clone(), &mut tasks);
        let mignodes = spawn_reflector(Api::<MigNode>::all(client.clone()), changed.clone(), &mut tasks);
        let policies = spawn_reflector(Api::<MigPolicy>::all(client.clone()), changed.clone(), &mut tasks);
        let plans = spawn_reflector(Api::<MigPlan>::all(client.clone()), changed, &mut tasks);
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

fn spawn_reflector<K>(api: Api<K>, changed: Arc<Notify>, tasks: &mut Vec<JoinHandle<()>>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&()).to_string();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        // Managed fields are the bulk of most objects and never read here.
        .modify(|obj: &mut K| obj.meta_mut().managed_fields = None)
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
