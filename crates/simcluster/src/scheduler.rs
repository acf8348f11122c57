//! A simple scheduler: binds pending pods to nodes where they fit (node selector, required
//! node affinity, taints and tolerations, cordon, CPU, memory, pod count and MIG slices),
//! highest priority and oldest first, best fit on the MIG slices; a pod that fits nowhere gets
//! `PodScheduled=False`, reason `Unschedulable`, with the scheduler's usual message. That
//! condition is what makes the pod demand for Geometer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use geometer_solver::PodKey;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;

use super::fit::{self, Misfit, Resources};
use super::ledger::SimEvent;
use super::Shared;

/// The scheduler name pods may set to be scheduled here (the default one).
pub const SCHEDULER_NAME: &str = "default-scheduler";

pub(super) async fn run(shared: Arc<Shared>) {
    let wake = Arc::new(Notify::new());
    let pods = watch_into_store(Api::<Pod>::all(shared.client.clone()), wake.clone());
    let nodes = watch_into_store(Api::<Node>::all(shared.client.clone()), wake.clone());
    if pods.wait_until_ready().await.is_err() || nodes.wait_until_ready().await.is_err() {
        return;
    }
    let mut scheduler =
        Scheduler { shared, assumed: HashMap::new(), requests: HashMap::new(), marked: HashMap::new() };
    loop {
        scheduler.pass(&pods.state(), &nodes.state()).await;
        wake.notified().await;
    }
}

/// A store kept up to date by a watch; `wake` rings on every change.
fn watch_into_store<K>(api: Api<K>, wake: Arc<Notify>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff())
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                tracing::debug!(error = %e, "simulated scheduler: watch interrupted; retrying");
            }
            wake.notify_one();
        }
    });
    reader
}

struct Scheduler {
    shared: Arc<Shared>,
    /// Pods bound but not yet seen bound in the store, by uid: node and requests. Without them
    /// the next pass would hand the same room out twice.
    assumed: HashMap<String, (String, Resources)>,
    /// Parsed requests by pod uid (a pod's requests never change).
    requests: HashMap<String, Resources>,
    /// The Unschedulable message last written, by pod uid (the store may not show it yet).
    marked: HashMap<String, String>,
}

/// One node's room during a pass.
struct Room {
    node: Arc<Node>,
    name: String,
    free: Resources,
}

fn is_pending(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty)
        && pod.metadata.deletion_timestamp.is_none()
        && matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), None | Some("Pending"))
        && spec.and_then(|s| s.scheduler_name.as_deref()).is_none_or(|n| n == SCHEDULER_NAME)
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded") | Some("Failed"))
}

/// What decides where a pod may go, apart from resources.
fn placement_signature(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    serde_json::to_string(&(
        spec.and_then(|s| s.node_selector.as_ref()),
        spec.and_then(|s| s.affinity.as_ref()).and_then(|a| a.node_affinity.as_ref()),
        spec.and_then(|s| s.tolerations.as_ref()),
    ))
    .unwrap_or_default()
}

fn extended(requests: &Resources) -> impl Iterator<Item = (&String, &i128)> {
    requests
        .iter()
        .filter(|(k, v)| !matches!(k.as_str(), "cpu" | "memory" | "pods" | "ephemeral-storage") && **v > 0)
}

impl Scheduler {
    fn requests_of(&mut self, pod: &Pod) -> Resources {
        let uid = pod.uid().unwrap_or_default();
        self.requests.entry(uid).or_insert_with(|| fit::pod_requests(pod)).clone()
    }

    async fn pass(&mut self, pods: &[Arc<Pod>], nodes: &[Arc<Node>]) {
        let mut rooms: Vec<Room> = nodes
            .iter()
            .map(|n| Room { node: n.clone(), name: n.name_any(), free: fit::allocatable(n) })
            .collect();
        rooms.sort_by(|a, b| a.name.cmp(&b.name));
        let index: HashMap<String, usize> =
            rooms.iter().enumerate().map(|(i, r)| (r.name.clone(), i)).collect();

        let live: BTreeSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        self.requests.retain(|uid, _| live.contains(uid));
        self.marked.retain(|uid, _| live.contains(uid));
        let mut pending = Vec::new();
        for pod in pods {
            let uid = pod.uid().unwrap_or_default();
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
            if bound.is_some() || !is_pending(pod) {
                self.assumed.remove(&uid);
            }
            let node = match (bound, self.assumed.get(&uid)) {
                (Some(n), _) => n,
                (None, Some((n, _))) => n.clone(),
                (None, None) => {
                    if is_pending(pod) {
                        pending.push(pod.clone());
                    }
                    continue;
                }
            };
            if is_terminal(pod) || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let requests = self.requests_of(pod);
            if let Some(room) = index.get(&node).map(|&i| &mut rooms[i]) {
                for (k, v) in requests {
                    *room.free.entry(k).or_insert(0) -= v;
                }
            }
        }
        if pending.is_empty() {
            return;
        }
        pending.sort_by_key(|p| {
            let priority = p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            (
                -(priority as i64),
                p.metadata.creation_timestamp.clone().map(|t| t.0),
                p.namespace(),
                p.name_any(),
            )
        });

        // Nodes with room per extended resource, by (free, index): best fit is the first that
        // passes the other filters.
        let mut by_resource: HashMap<String, BTreeSet<(i128, usize)>> = HashMap::new();
        for (i, room) in rooms.iter().enumerate() {
            for (k, v) in extended(&room.free) {
                by_resource.entry(k.clone()).or_default().insert((*v, i));
            }
        }
        let mut placement: HashMap<String, Vec<Option<Misfit>>> = HashMap::new();
        let mut failed: HashMap<String, String> = HashMap::new();
        for pod in pending {
            let requests = self.requests_of(&pod);
            let signature = placement_signature(&pod);
            let fits_at = placement
                .entry(signature.clone())
                .or_insert_with(|| rooms.iter().map(|r| fit::placement_misfit(&pod, &r.node)).collect());
            let full_signature = format!("{signature}|{requests:?}");
            if let Some(message) = failed.get(&full_signature) {
                self.unschedulable(&pod, message).await;
                continue;
            }
            let candidates: Vec<usize> = match extended(&requests).next() {
                Some((resource, want)) => by_resource
                    .get(resource)
                    .map(|set| set.iter().filter(|(free, _)| free >= want).map(|(_, i)| *i).collect())
                    .unwrap_or_default(),
                None => (0..rooms.len()).collect(),
            };
            let chosen = candidates
                .into_iter()
                .find(|&i| fits_at[i].is_none() && fit::resource_misfit(&requests, &rooms[i].free).is_none());
            match chosen {
                Some(i) => {
                    if self.bind(&pod, &rooms[i].name).await {
                        let room = &mut rooms[i];
                        for (k, v) in &requests {
                            let free = room.free.entry(k.clone()).or_insert(0);
                            if let Some(set) = by_resource.get_mut(k) {
                                set.remove(&(*free, i));
                                if *free - v > 0 {
                                    set.insert((*free - v, i));
                                }
                            }
                            *free -= v;
                        }
                        self.assumed.insert(pod.uid().unwrap_or_default(), (room.name.clone(), requests));
                    }
                }
                None => {
                    let mut misfits: BTreeMap<String, usize> = BTreeMap::new();
                    for (i, room) in rooms.iter().enumerate() {
                        let why = fits_at[i].clone().or_else(|| fit::resource_misfit(&requests, &room.free));
                        if let Some(why) = why {
                            *misfits.entry(why.to_string()).or_insert(0) += 1;
                        }
                    }
                    let message = fit::unschedulable_message(rooms.len(), &misfits);
                    failed.insert(full_signature, message.clone());
                    self.unschedulable(&pod, &message).await;
                }
            }
        }
    }

    async fn bind(&self, pod: &Pod, node: &str) -> bool {
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &ns);
        match api
            .create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding)
            .await
        {
            Ok(_) => {
                self.shared.ledger.emit(SimEvent::Scheduled {
                    pod: PodKey::new(&ns, &name).to_string(),
                    node: node.to_string(),
                });
                true
            }
            Err(e) => {
                tracing::debug!(pod = %name, node, error = %e, "simulated scheduler: binding refused");
                false
            }
        }
    }

    /// Sets `PodScheduled=False/Unschedulable` unless the pod says so already with the same
    /// message (a repeated write would look like new demand to watchers).
    async fn unschedulable(&mut self, pod: &Pod, message: &str) {
        let uid = pod.uid().unwrap_or_default();
        if self.marked.get(&uid).is_some_and(|m| m == message) {
            return;
        }
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
        if current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(message)
        }) {
            self.marked.insert(uid, message.to_string());
            return;
        }
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let patch = json!({"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastProbeTime": null, "lastTransitionTime": super::objects::now(),
        }]}});
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &ns);
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                self.marked.insert(uid, message.to_string());
                self.shared.ledger.emit(SimEvent::Unschedulable {
                    pod: PodKey::new(&ns, &name).to_string(),
                    message: message.to_string(),
                });
            }
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "simulated scheduler: cannot mark the pod unschedulable")
            }
        }
    }
}
