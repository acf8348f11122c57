//! The simulated kubelet of the agent tests' node: it finishes the deletion of pods whose
//! containers have stopped (see the module above for when), releases their devices, and brings
//! the device plugin back when it is deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use geometer_agent::nvml::sim::SimNvml;
use geometer_agent::SharedAssignments;
use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use super::{advertise, ready_pod, Workload, NODE, PLUGIN_LABEL, PLUGIN_NAMESPACE, SHUTDOWN};

/// What the simulated kubelet works with.
pub(super) struct Kubelet {
    pub(super) server: ApiServer,
    pub(super) sim: SimNvml,
    pub(super) assignments: SharedAssignments,
    pub(super) workloads: Arc<Mutex<BTreeMap<String, Workload>>>,
    /// Pods whose containers ignore SIGTERM (see [`Harness::hold_termination`]).
    pub(super) held: Arc<Mutex<BTreeSet<String>>>,
    /// It brings the device plugin back when its pod is deleted (on a GPU Operator node the
    /// Operator's stand-in does).
    pub(super) restarts_plugin: bool,
}

impl Kubelet {
    /// Pods on the node that are being deleted and whose containers have stopped: those not
    /// held by the test once [`SHUTDOWN`] has passed since the kubelet saw the deletion, and
    /// every one whose grace period is over. `seen` keeps when each deletion (by uid) was seen.
    fn stopped(&self, seen: &mut BTreeMap<String, Instant>) -> Vec<Pod> {
        let held = self.held.lock().unwrap().clone();
        let now = jiff::Timestamp::now();
        let terminating: Vec<Pod> = self
            .server
            .objects::<Pod>()
            .into_iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_some()
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(NODE)
            })
            .collect();
        seen.retain(|uid, _| terminating.iter().any(|p| p.metadata.uid.as_ref() == Some(uid)));
        terminating
            .into_iter()
            .filter(|p| {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                let since = *seen.entry(uid).or_insert_with(Instant::now);
                let key = format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                );
                let grace_over = p.metadata.deletion_timestamp.as_ref().is_some_and(|t| t.0 <= now);
                grace_over || (!held.contains(&key) && since.elapsed() >= SHUTDOWN)
            })
            .collect()
    }

    /// Stops the pod's process, deletes the pod for good (`gracePeriodSeconds: 0`, pinned to its
    /// uid) and only then releases its device, as the kubelet does once containers have stopped.
    async fn finish(&self, pod: &Pod) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let key = format!("{namespace}/{name}");
        let workload = self.workloads.lock().unwrap().get(&key).cloned();
        if let Some(w) = &workload {
            self.sim.stop_process(w.pid);
        }
        // An error: gone already, or replaced by a pod of the same name; nothing of it is left.
        let _ = geometer_simcluster::delete_stopped_pod(self.server.client(), pod).await;
        if workload.is_some() {
            self.release(&key);
        }
    }

    /// The pod's device is free again.
    fn release(&self, key: &str) {
        self.assignments.update(|list| list.retain(|a| a.pod_ref() != key));
        self.workloads.lock().unwrap().remove(key);
    }
}

/// The simulated kubelet: finishes the deletion of pods on the node once their containers have
/// stopped (stopping their processes, then releasing their devices), releases the devices of
/// pods that went at once, and brings the device plugin back (with a fresh allocatable) when
/// it is deleted.
pub(super) async fn run(k: Kubelet) {
    let mut plugin_generation = 1;
    let mut releases = 0u64;
    let mut seen = BTreeMap::new();
    loop {
        let stopped = k.stopped(&mut seen);
        let mut released = !stopped.is_empty();
        for pod in &stopped {
            k.finish(pod).await;
        }
        // Pods removed without a grace period (by a test, or force-deleted) take their devices
        // with them.
        let gone: Vec<(String, Workload)> = {
            let w = k.workloads.lock().unwrap();
            w.iter()
                .filter(|(key, _)| {
                    let (ns, name) = key.split_once('/').unwrap();
                    k.server.object::<Pod>(ns, name).is_none()
                })
                .map(|(key, w)| (key.clone(), w.clone()))
                .collect()
        };
        for (key, w) in gone {
            k.sim.stop_process(w.pid);
            k.release(&key);
            released = true;
        }
        if released {
            // The kubelet reports on its node after a pod goes; the agent wakes on that rather
            // than waiting for its next poll of the PodResources API.
            releases += 1;
            let touch =
                json!({"metadata": {"annotations": {"sim.geometer.dev/releases": releases.to_string()}}});
            Api::<Node>::all(k.server.client())
                .patch(NODE, &PatchParams::default(), &Patch::Merge(touch))
                .await
                .expect("touch node");
        }
        let plugin_running = k.server.objects::<Pod>().iter().any(|p| {
            p.metadata.namespace.as_deref() == Some(PLUGIN_NAMESPACE)
                && p.metadata.deletion_timestamp.is_none()
        });
        if k.restarts_plugin && !plugin_running {
            advertise(&k.server, &k.sim).await;
            let labels = json!({ PLUGIN_LABEL.0: PLUGIN_LABEL.1 });
            let pod = ready_pod(
                PLUGIN_NAMESPACE,
                &format!("nvidia-device-plugin-{plugin_generation}"),
                labels,
                json!({}),
                json!({}),
            );
            k.server.seed(&pod).expect("device plugin pod");
            plugin_generation += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
