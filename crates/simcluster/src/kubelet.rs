//! The kubelet stand-in for every simulated node (one task watching all pods): runs pods bound
//! to its nodes on specific MIG devices, ends them after their run time, frees their devices
//! when they are deleted, starts the device plugin pods (which advertise the node's slices),
//! and, as their DaemonSet would, recreates a device plugin pod that was deleted. What a
//! kubelet writes (pod status, a pod's final deletion, its Node) goes out with that node's own
//! identity where it has one ([`super::Shared::kubelet`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use geometer_solver::PodKey;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::fit::container_mig_requests;
use super::ledger::{Ending, PodRun, SimEvent};
use super::node::{AdmitError, Device, SimNode};
use super::objects::{self, is_device_plugin, RELEASES_ANNOTATION};
use super::Shared;
use super::{claims, dra};

/// Work the kubelet scheduled for itself.
enum Later {
    /// A pod's run time is over.
    Complete { namespace: String, name: String, uid: String },
    /// A device plugin could not read the GPUs; try starting it again.
    RetryPlugin(Box<Pod>),
    /// A pod's DRA claims were not ready to prepare; read the pod again and retry.
    RetryClaims { namespace: String, name: String, uid: String },
}

struct Kubelet {
    shared: Arc<Shared>,
    later: mpsc::UnboundedSender<Later>,
    /// Pods started or refused, by uid: a later event for the same pod is not a new start.
    handled: HashSet<String>,
    /// Pods whose deletion was carried out, by uid: a terminating pod's update and its final
    /// delete event are one stop.
    stopped: HashSet<String>,
    /// Device plugin pods created so far, per node (names stay unique).
    plugin_serial: BTreeMap<String, u32>,
    /// Deleted pods whose devices were freed, per node.
    releases: BTreeMap<String, u64>,
}

pub(super) async fn run(shared: Arc<Shared>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut k = Kubelet {
        shared: shared.clone(),
        later: tx,
        handled: HashSet::new(),
        stopped: HashSet::new(),
        plugin_serial: BTreeMap::new(),
        releases: BTreeMap::new(),
    };
    let pods: Api<Pod> = Api::all(shared.client.clone());
    let mut stream = std::pin::pin!(watcher(pods, watcher::Config::default()).default_backoff());
    let mut relisted: Option<BTreeSet<PodKey>> = None;
    loop {
        tokio::select! {
            event = stream.next() => match event {
                Some(Ok(Event::Apply(pod))) => k.apply(pod).await,
                Some(Ok(Event::InitApply(pod))) => {
                    if let Some(seen) = relisted.as_mut() {
                        seen.insert(PodKey::new(&pod.namespace().unwrap_or_default(), &pod.name_any()));
                    }
                    k.apply(pod).await;
                }
                Some(Ok(Event::Delete(pod))) => k.deleted(&pod).await,
                Some(Ok(Event::Init)) => relisted = Some(BTreeSet::new()),
                Some(Ok(Event::InitDone)) => {
                    if let Some(seen) = relisted.take() {
                        k.forget_missing(&seen).await;
                    }
                }
                Some(Err(e)) => tracing::debug!(error = %e, "simulated kubelet: pod watch interrupted; retrying"),
                None => return,
            },
            Some(job) = rx.recv() => match job {
                Later::Complete { namespace, name, uid } => k.complete(&namespace, &name, &uid).await,
                Later::RetryPlugin(pod) => k.apply(*pod).await,
                Later::RetryClaims { namespace, name, uid } => k.retry(&namespace, &name, &uid).await,
            },
        }
    }
}

impl Kubelet {
    fn node_of(&self, pod: &Pod) -> Option<Arc<SimNode>> {
        let name = pod.spec.as_ref()?.node_name.as_deref()?;
        self.shared.nodes.get(name).cloned()
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.shared.client.clone(), namespace)
    }

    /// Pods of `namespace` as node `node`'s kubelet writes them (their status, their deletion).
    fn pods_on(&self, node: &str, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.shared.kubelet(node), namespace)
    }

    async fn apply(&mut self, pod: Pod) {
        let Some(node) = self.node_of(&pod) else { return };
        let uid = pod.uid().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            self.deleted(&pod).await;
            return self.remove(&pod).await;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if !matches!(phase, None | Some("Pending")) || self.handled.contains(&uid) {
            return;
        }
        let holds = objects::holds_gpus(&pod)
            .then(|| PodKey::new(&pod.namespace().unwrap_or_default(), &pod.name_any()));
        if let Some(image) = objects::unpullable_image(&pod) {
            self.handled.insert(uid);
            return self.cannot_pull(&node, &pod, &image).await;
        }
        if is_device_plugin(&pod) {
            self.start_plugin(&node, pod).await;
        } else if dra::is_plugin(&pod) {
            self.start_dra_plugin(&node, pod).await;
        } else if node.stack.is_dra() {
            self.start_claiming(&node, pod).await;
        } else {
            self.handled.insert(uid);
            self.start_workload(&node, pod).await;
        }
        if let Some(client) = holds {
            node.nvml.hold_every_gpu(&client.to_string(), true);
        }
    }

    /// A pod whose image cannot be pulled stays pending, never started: its devices are not
    /// prepared, and its claims stay allocated and reserved for it.
    async fn cannot_pull(&self, node: &SimNode, pod: &Pod, image: &str) {
        let status = objects::image_pull_status(pod, &node.ip, image);
        let patched = self
            .pods_on(&node.name, &pod.namespace().unwrap_or_default())
            .patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status))
            .await;
        if let Err(e) = patched {
            tracing::warn!(pod = %pod.name_any(), error = %e, "simulated kubelet cannot report an image pull back-off");
        }
    }

    /// The plugin registers with the kubelet: the node's MIG resources become what the GPUs
    /// have now, then the plugin pod reports ready.
    async fn start_plugin(&mut self, node: &SimNode, pod: Pod) {
        let (counts, start) = match node.start_plugin(&self.shared.catalog) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(node = %node.name, error = %e, "simulated device plugin cannot read the GPUs; retrying");
                return self.retry_plugin(pod);
            }
        };
        self.handled.insert(pod.uid().unwrap_or_default());
        let nodes: Api<Node> = Api::all(self.shared.kubelet(&node.name));
        let advertised = async {
            let current = nodes.get(&node.name).await?;
            let patch = objects::advertise_patch(&current, &counts);
            nodes.patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
        };
        let advertised = advertised.await;
        self.plugin_ready(node, &pod, advertised, counts, start).await;
    }

    /// A plugin pod that advertised the node's devices (`advertised`) reports ready, and the
    /// ledger hears of it; a failure on the way is logged (the pod stays pending).
    async fn plugin_ready(
        &self,
        node: &SimNode,
        pod: &Pod,
        advertised: Result<(), kube::Error>,
        resources: BTreeMap<String, u64>,
        start: u32,
    ) {
        let namespace = pod.namespace().unwrap_or_default();
        let status = objects::running_status(pod, &node.ip);
        let ready = match advertised {
            Ok(()) => {
                let patch = Patch::Merge(&status);
                self.pods_on(&node.name, &namespace)
                    .patch_status(&pod.name_any(), &PatchParams::default(), &patch)
                    .await
                    .map(drop)
            }
            Err(e) => Err(e),
        };
        match ready {
            Ok(()) => {
                self.shared.ledger.emit(SimEvent::Advertised { node: node.name.clone(), resources, start })
            }
            Err(e) => {
                tracing::warn!(node = %node.name, pod = %pod.name_any(), error = %e, "simulated plugin could not advertise the node's devices")
            }
        }
    }

    /// The DRA kubelet plugin starts: it reads the GPUs and publishes the node's ResourceSlice
    /// (the Node's allocatable is left alone: DRA devices are not extended resources), then its
    /// pod reports ready.
    async fn start_dra_plugin(&mut self, node: &SimNode, pod: Pod) {
        let published = match node.start_dra_plugin(&self.shared.catalog) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(node = %node.name, error = %e, "simulated DRA plugin cannot read the GPUs; retrying");
                return self.retry_plugin(pod);
            }
        };
        self.handled.insert(pod.uid().unwrap_or_default());
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for d in published.devices.values() {
            *counts.entry(d.resource()).or_default() += 1;
        }
        let catalog = &self.shared.catalog;
        let advertised = dra::publish(
            &self.shared.client,
            node.stack,
            &node.name,
            &published.gpus,
            &published.devices,
            catalog,
        )
        .await;
        self.plugin_ready(node, &pod, advertised, counts, published.start).await;
    }

    /// A pod on a DRA node starts on the devices its claims were allocated, once every claim
    /// is allocated and reserved for it; until then it stays pending and is tried again.
    async fn start_claiming(&mut self, node: &SimNode, pod: Pod) {
        let (ns, name, uid) =
            (pod.namespace().unwrap_or_default(), pod.name_any(), pod.uid().unwrap_or_default());
        match claims::allocated_devices(&self.shared.client, &node.name, &pod).await {
            Ok(devices) => {
                self.handled.insert(uid.clone());
                let container = claims::claiming_container(&pod);
                let admitted = node.admit_claimed(
                    PodKey::new(&ns, &name),
                    &uid,
                    &container,
                    &devices,
                    objects::gpu_usage(&pod),
                );
                self.report_admission(node, pod, admitted).await;
            }
            Err(waiting) => {
                tracing::debug!(pod = %PodKey::new(&ns, &name).to_string(), waiting, "simulated kubelet: DRA claims not ready; retrying");
                let later = self.later.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let _ = later.send(Later::RetryClaims { namespace: ns, name, uid });
                });
            }
        }
    }

    /// A plugin pod that could not read the GPUs starts again a moment later.
    fn retry_plugin(&self, pod: Pod) {
        let later = self.later.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = later.send(Later::RetryPlugin(Box::new(pod)));
        });
    }

    /// A pod whose claims were not ready: read it again, and start it if it is still the same,
    /// bound, pending pod.
    async fn retry(&mut self, namespace: &str, name: &str, uid: &str) {
        if let Ok(Some(pod)) = self.pods(namespace).get_opt(name).await {
            if pod.uid().as_deref() == Some(uid) {
                self.apply(pod).await;
            }
        }
    }

    async fn start_workload(&mut self, node: &SimNode, pod: Pod) {
        let admitted = node.admit(
            &pod.namespace().unwrap_or_default(),
            &pod.name_any(),
            &pod.uid().unwrap_or_default(),
            &container_mig_requests(&pod),
            objects::gpu_usage(&pod),
        );
        self.report_admission(node, pod, admitted).await;
    }

    /// Reports an admitted pod running (and ends it after its run time), or a refused one
    /// failed, as a kubelet does.
    async fn report_admission(
        &mut self,
        node: &SimNode,
        pod: Pod,
        admitted: Result<Vec<Device>, AdmitError>,
    ) {
        let (ns, name, uid) =
            (pod.namespace().unwrap_or_default(), pod.name_any(), pod.uid().unwrap_or_default());
        let key = PodKey::new(&ns, &name).to_string();
        let api = self.pods_on(&node.name, &ns);
        match admitted {
            Ok(devices) => {
                let status = objects::running_status(&pod, &node.ip);
                if let Err(e) = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await
                {
                    tracing::debug!(pod = %key, error = %e, "simulated kubelet could not report the pod running");
                }
                let profiles: Vec<String> = devices.iter().map(|d| d.profile.clone()).collect();
                let described = devices.iter().map(|d| format!("{} on GPU {}", d.profile, d.gpu)).collect();
                self.shared.ledger.started(
                    &uid,
                    PodRun {
                        pod: key.clone(),
                        node: node.name.clone(),
                        started: Instant::now(),
                        ended: None,
                        profiles,
                    },
                );
                self.shared.ledger.emit(SimEvent::Started {
                    pod: key,
                    node: node.name.clone(),
                    devices: described,
                });
                if let Some(seconds) = objects::run_seconds(&pod) {
                    let later = self.later.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                        let _ = later.send(Later::Complete { namespace: ns, name, uid });
                    });
                }
            }
            Err(refusal) => {
                let message = refusal.to_string();
                let status = objects::ended_status(&pod, "Failed", "UnexpectedAdmissionError", &message);
                if let Err(e) = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await
                {
                    tracing::debug!(pod = %key, error = %e, "simulated kubelet could not report the refusal");
                }
                let run = PodRun {
                    pod: key.clone(),
                    node: node.name.clone(),
                    started: Instant::now(),
                    ended: None,
                    profiles: Vec::new(),
                };
                self.shared.ledger.started(&uid, run);
                self.shared.ledger.ended(&uid, Ending::AdmissionFailed);
                self.shared.ledger.emit(SimEvent::AdmissionFailed {
                    pod: key,
                    node: node.name.clone(),
                    message,
                });
            }
        }
    }

    /// The run time is over: devices free first, then the pod reports `Succeeded`, so whoever
    /// reacts to the pod's end finds its slice free.
    async fn complete(&mut self, namespace: &str, name: &str, uid: &str) {
        let api = self.pods(namespace);
        let Ok(Some(pod)) = api.get_opt(name).await else { return };
        let Some(node) = self.node_of(&pod) else { return };
        if pod.uid().as_deref() != Some(uid) || !node.is_running(namespace, name, uid) {
            return;
        }
        node.release(namespace, name);
        let status = objects::ended_status(&pod, "Succeeded", "Completed", "");
        let api = self.pods_on(&node.name, namespace);
        if let Err(e) = api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await {
            tracing::debug!(pod = %name, error = %e, "simulated kubelet could not report the pod's end");
        }
        self.shared.ledger.ended(uid, Ending::Succeeded);
        self.shared.ledger.emit(SimEvent::Succeeded {
            pod: PodKey::new(namespace, name).to_string(),
            node: node.name.clone(),
        });
    }

    /// A terminating pod's containers are stopped: the kubelet deletes it for good (grace 0,
    /// for this uid only), as a real kubelet does once its containers exit; API servers that
    /// delete at once never show a terminating pod.
    async fn remove(&self, pod: &Pod) {
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default();
        match delete_stopped_pod(self.shared.kubelet(node), pod).await {
            Ok(()) | Err(kube::Error::Api(_)) => {}
            Err(e) => {
                tracing::debug!(pod = %PodKey::new(&ns, &name).to_string(), error = %e, "simulated kubelet could not remove the pod")
            }
        }
    }

    async fn deleted(&mut self, pod: &Pod) {
        let Some(node) = self.node_of(pod) else { return };
        let uid = pod.uid().unwrap_or_default();
        self.handled.remove(&uid);
        if !self.stopped.insert(uid.clone()) {
            return;
        }
        if objects::holds_gpus(pod) {
            let client = PodKey::new(&pod.namespace().unwrap_or_default(), &pod.name_any());
            node.nvml.hold_every_gpu(&client.to_string(), false);
        }
        if (is_device_plugin(pod) || dra::is_plugin(pod)) && !objects::owned_by_daemonset(pod) {
            return self.recreate_plugin(&node).await;
        }
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        if node.is_running(&ns, &name, &uid) {
            self.stopped(&node, &ns, &name, &uid).await;
        }
    }

    async fn stopped(&mut self, node: &SimNode, ns: &str, name: &str, uid: &str) {
        node.release(ns, name);
        self.shared.ledger.ended(uid, Ending::Stopped);
        self.shared
            .ledger
            .emit(SimEvent::Stopped { pod: PodKey::new(ns, name).to_string(), node: node.name.clone() });
        // A cordoned node is being drained: tell its watchers (the agent) the devices are free.
        let nodes: Api<Node> = Api::all(self.shared.kubelet(&node.name));
        let cordoned = nodes
            .get_opt(&node.name)
            .await
            .ok()
            .flatten()
            .and_then(|n| n.spec?.unschedulable)
            .unwrap_or(false);
        if cordoned {
            let count = self.releases.entry(node.name.clone()).or_insert(0);
            *count += 1;
            let touch = json!({"metadata": {"annotations": {RELEASES_ANNOTATION: count.to_string()}}});
            if let Err(e) = nodes.patch(&node.name, &PatchParams::default(), &Patch::Merge(&touch)).await {
                tracing::debug!(node = %node.name, error = %e, "simulated kubelet could not touch the node");
            }
        }
    }

    /// The DaemonSet controller's part: a deleted plugin pod comes back (with a new name).
    async fn recreate_plugin(&mut self, node: &SimNode) {
        let serial = self.plugin_serial.entry(node.name.clone()).or_insert(0);
        *serial += 1;
        let pod = objects::plugin_pod(node.stack, &node.name, *serial);
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        if let Err(e) = self.pods(&namespace).create(&PostParams::default(), &pod).await {
            tracing::warn!(node = %node.name, error = %e, "simulated DaemonSet could not recreate the plugin pod");
        }
    }

    /// After a re-list: pods the kubelet runs that no longer exist were deleted meanwhile.
    async fn forget_missing(&mut self, seen: &BTreeSet<PodKey>) {
        for node in self.shared.nodes.values().cloned().collect::<Vec<_>>() {
            for key in node.running() {
                if !seen.contains(&key) {
                    let (ns, name) = (key.namespace(), key.name());
                    let uid = node.uid_of(ns, name).unwrap_or_default();
                    self.stopped(&node, ns, name, &uid).await;
                }
            }
        }
    }
}

/// Deletes a terminating pod whose containers have stopped for good, as a kubelet does: grace
/// 0, and only this pod (its uid), so a new pod of the same name is left alone. An API error
/// (gone already, or replaced) means nothing of this pod is left.
pub async fn delete_stopped_pod(client: kube::Client, pod: &Pod) -> Result<(), kube::Error> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
        ..DeleteParams::default()
    };
    let pods: Api<Pod> = Api::namespaced(client, &pod.namespace().unwrap_or_default());
    pods.delete(&pod.name_any(), &params).await.map(|_| ())
}
