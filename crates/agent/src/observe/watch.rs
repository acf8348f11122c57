//! Wake-ups: the agent watches its MigNode, its Node and the pods on its node, and looks again
//! as soon as one changes instead of waiting for the next poll.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use geometer_api::MigNode;

/// Two doorbells: `spec` rings when the MigNode's spec (generation) changes, `any` on that and
/// on every change to the Node or a pod on the node.
#[derive(Clone, Default)]
pub(crate) struct Wake {
    pub spec: Arc<Notify>,
    pub any: Arc<Notify>,
}

/// The watch tasks; dropping this stops them (so a dropped agent leaves nothing running).
pub(crate) struct Watchers(Vec<JoinHandle<()>>);

impl Drop for Watchers {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

pub(crate) fn spawn(client: kube::Client, node: &str, wake: Wake) -> Watchers {
    let by_name = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let on_node = watcher::Config::default().fields(&format!("spec.nodeName={node}"));

    let mignodes = watcher(Api::<MigNode>::all(client.clone()), by_name.clone());
    let w = wake.clone();
    let mignode_task = tokio::spawn(async move {
        let mut last_generation = None;
        // Only spec changes: status changes are the agent's own writes.
        ring_on(mignodes, |m: &MigNode| {
            if m.metadata.generation != last_generation {
                last_generation = m.metadata.generation;
                w.spec.notify_one();
                w.any.notify_one();
            }
        })
        .await
    });

    let nodes = watcher(Api::<Node>::all(client.clone()), by_name);
    let w = wake.clone();
    let node_task = tokio::spawn(async move { ring_on(nodes, |_: &Node| w.any.notify_one()).await });

    let pods = watcher(Api::<Pod>::all(client), on_node);
    let w = wake;
    let pod_task = tokio::spawn(async move { ring_on(pods, |_: &Pod| w.any.notify_one()).await });

    Watchers(vec![mignode_task, node_task, pod_task])
}

/// Calls `ring` for every object the watch reports, until the task is aborted. Watch errors
/// are retried with kube's backoff: the agent polls anyway, so a broken watch only slows it.
async fn ring_on<K, S>(stream: S, mut ring: impl FnMut(&K))
where
    K: DeserializeOwned + Clone + std::fmt::Debug + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let mut objects = std::pin::pin!(stream.default_backoff().touched_objects());
    while let Some(item) = objects.next().await {
        match item {
            Ok(object) => ring(&object),
            Err(e) => tracing::debug!(error = %e, "watch interrupted; retrying"),
        }
    }
}
