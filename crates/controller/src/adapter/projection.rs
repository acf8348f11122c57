//! What the controller's caches, and `geometer plan --snapshot`'s reading of a List, keep of
//! each object: only the fields planning, rollout and the policy status read. At 150,000 pods
//! a whole Pod (volumes, environment, probes, container statuses, kubectl's last-applied copy
//! of the object) is most of the controller's memory;
//! kube-runtime's `WatchStreamExt::modify` (kube-rs, `kube-runtime/src/utils/watch_ext.rs`)
//! trims each object as it arrives, before the reflector stores it.
//!
//! Kept fields are listed, not dropped ones, so a field Kubernetes adds later is not cached by
//! accident. A field a new reader needs must be added here (the tests below name what is kept).

use std::sync::Arc;

use geometer_api::decoded::Decoded;
use geometer_api::{MigNode, MigPlan, MigPolicy};
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::api::resource::v1::ResourceClaim;

use crate::adapter::PodView;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

/// kubectl's copy of the whole applied object: as large as the object itself, never read here.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Trims an object to what the controller reads: by default its metadata only (Geometer's own
/// objects are read whole).
pub(crate) trait Projection: Resource {
    fn project(&mut self) {
        project_meta(self.meta_mut());
    }
}

/// Trims a cached object in place (a freshly decoded object is not shared yet).
pub(crate) fn project<K: Projection>(decoded: &mut Decoded<K>) {
    if let Decoded::Read(object) = decoded {
        if let Some(object) = Arc::get_mut(object) {
            object.project();
        }
    }
}

fn project_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.remove(LAST_APPLIED);
    }
}

/// A pod is decoded as a [`PodView`], which holds only what Geometer reads; its metadata is
/// trimmed here.
impl Projection for PodView {}

impl Projection for Node {
    /// Metadata (labels), the spec (taints, cordon) and the capacity and allocatable of the
    /// status; not its images, addresses, node info or conditions.
    fn project(&mut self) {
        project_meta(&mut self.metadata);
        if let Some(status) = self.status.take() {
            self.status = Some(NodeStatus {
                capacity: status.capacity,
                allocatable: status.allocatable,
                ..NodeStatus::default()
            });
        }
    }
}

impl Projection for MigNode {}

/// A ResourceClaim: its requests, constraints and allocation as decoded, without the driver's
/// opaque configuration and device statuses; its lists sized to what they hold (a decoded list
/// keeps room for more, and a cluster has a claim per GPU pod).
impl Projection for ResourceClaim {
    fn project(&mut self) {
        project_meta(&mut self.metadata);
        if let Some(devices) = self.spec.as_mut().and_then(|s| s.devices.as_mut()) {
            devices.config = None;
            devices.requests.iter_mut().for_each(Vec::shrink_to_fit);
            devices.constraints.iter_mut().for_each(Vec::shrink_to_fit);
        }
        if let Some(status) = &mut self.status {
            status.devices = None;
            status.reserved_for.iter_mut().for_each(Vec::shrink_to_fit);
            if let Some(allocation) = &mut status.allocation {
                allocation.devices.iter_mut().for_each(|d| {
                    d.config = None;
                    d.results.iter_mut().for_each(Vec::shrink_to_fit);
                });
            }
        }
    }
}

impl Projection for MigPolicy {}

impl Projection for MigPlan {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::pods::{demand_check, effective_requests, planner_pod};
    use kube::ResourceExt;
    use serde_json::json;

    /// A Pod as a kubelet and kubectl leave it: much that Geometer never reads.
    fn kubelet_pod() -> serde_json::Value {
        json!({
            "metadata": {"name": "infer-0", "namespace": "ml", "uid": "u1", "labels": {"app": "infer"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true", LAST_APPLIED: "{\"huge\": true}"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "infer", "uid": "r1"}]},
            "spec": {
                "containers": [{"name": "main", "image": "infer:v3", "command": ["serve"],
                    "env": [{"name": "MODEL", "value": "llama"}],
                    "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                    "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/mig-1g.10gb": "1"},
                                  "limits": {"nvidia.com/mig-1g.10gb": "1"}}}],
                "initContainers": [{"name": "proxy", "image": "proxy", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "1"}}}],
                "volumes": [{"name": "cache", "emptyDir": {}}],
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]}},
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]}},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "priority": 100, "priorityClassName": "high", "serviceAccountName": "infer"},
            "status": {"phase": "Pending", "nominatedNodeName": "n1",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                "containerStatuses": [{"name": "main", "image": "infer:v3", "imageID": "", "ready": false, "restartCount": 0}]}
        })
    }

    /// The pod as the controller's cache holds it.
    fn cached(value: serde_json::Value) -> PodView {
        let mut view: PodView = serde_json::from_value(value).unwrap();
        view.project();
        view
    }

    #[test]
    fn a_cached_pod_keeps_what_planning_reads_and_nothing_else() {
        let view = cached(kubelet_pod());
        let keys = ["karpenter.sh/do-not-disrupt".to_string()];
        let requests = effective_requests(&view).unwrap();
        // main 2 CPUs + the sidecar's 1 (a restartable init container adds up).
        assert_eq!((requests["cpu"], requests["nvidia.com/mig-1g.10gb"]), (3000, 1000));
        let planned = planner_pod(&view, &requests, &keys, jiff::Timestamp::now()).unwrap();
        assert!(planned.do_not_disrupt);
        assert_eq!(planned.priority, 100);
        assert_eq!(planned.node_selector["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
        assert_eq!(planned.affinity.len(), 1);
        assert_eq!(planned.tolerations.len(), 1);
        assert_eq!(demand_check(&view), Err("nominated to a node (preemption in progress)"));
        let text = serde_json::to_string(&view).unwrap();
        for dropped in [
            "volumes",
            "env",
            "command",
            "image",
            "podAntiAffinity",
            "containerStatuses",
            "serviceAccountName",
        ] {
            assert!(!text.contains(dropped), "{dropped} is kept: {text}");
        }
        assert!(!view.annotations().contains_key(LAST_APPLIED));
        // A whole Pod (an admission review's) reads the same.
        let whole: k8s_openapi::api::core::v1::Pod = serde_json::from_value(kubelet_pod()).unwrap();
        let mut from_whole = PodView::from(&whole);
        from_whole.project();
        assert_eq!(from_whole, view);
    }

    #[test]
    fn a_do_not_disrupt_duration_runs_from_the_start_time_a_cached_pod_keeps() {
        let mut pod = kubelet_pod();
        pod["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "1h"});
        pod["metadata"]["creationTimestamp"] = json!("2026-06-01T10:00:00Z");
        pod["status"]["phase"] = json!("Running");
        pod["status"]["startTime"] = json!("2026-06-01T11:50:00Z");
        let view = cached(pod);
        let now: jiff::Timestamp = "2026-06-01T12:00:00Z".parse().unwrap();
        let keys = ["karpenter.sh/do-not-disrupt".to_string()];
        let requests = effective_requests(&view).unwrap();
        assert!(
            planner_pod(&view, &requests, &keys, now).unwrap().do_not_disrupt,
            "created two hours ago, started ten minutes ago: protected 50 min more"
        );
    }

    #[test]
    fn a_projected_node_keeps_labels_taints_and_resources_only() {
        let whole: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.count": "8"}},
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}], "unschedulable": true},
            "status": {"capacity": {"cpu": "32"}, "allocatable": {"cpu": "31"},
                "images": [{"names": ["a"], "sizeBytes": 1}], "addresses": [{"type": "Hostname", "address": "n1"}]}
        }))
        .unwrap();
        let mut projected = whole.clone();
        projected.project();
        assert_eq!(projected.metadata.labels, whole.metadata.labels);
        assert_eq!(projected.spec, whole.spec);
        let status = projected.status.unwrap();
        assert_eq!((status.capacity, status.allocatable), {
            let s = whole.status.unwrap();
            (s.capacity, s.allocatable)
        });
        assert!(status.images.is_none() && status.addresses.is_none());
    }
}
