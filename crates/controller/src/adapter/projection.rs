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
use k8s_openapi::api::core::v1::{Affinity, Container, Node, NodeStatus, Pod, PodSpec, PodStatus};
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

/// A container's name and resources (and `restartPolicy`, which makes an init container a
/// sidecar whose requests add up with the main containers').
fn project_container(c: Container) -> Container {
    Container {
        name: c.name,
        resources: c.resources,
        restart_policy: c.restart_policy,
        ..Container::default()
    }
}

impl Projection for Pod {
    /// Metadata (do-not-disrupt annotations, owners, labels), the requests, the node
    /// constraints, priority and the binding; the phase, conditions and start time of the
    /// status.
    fn project(&mut self) {
        project_meta(&mut self.metadata);
        if let Some(spec) = self.spec.take() {
            self.spec = Some(PodSpec {
                containers: spec.containers.into_iter().map(project_container).collect(),
                init_containers: spec
                    .init_containers
                    .map(|cs| cs.into_iter().map(project_container).collect()),
                overhead: spec.overhead,
                node_name: spec.node_name,
                node_selector: spec.node_selector,
                affinity: spec
                    .affinity
                    .map(|a| Affinity { node_affinity: a.node_affinity, ..Affinity::default() }),
                tolerations: spec.tolerations,
                priority: spec.priority,
                priority_class_name: spec.priority_class_name,
                scheduler_name: spec.scheduler_name,
                ..PodSpec::default()
            });
        }
        if let Some(status) = self.status.take() {
            self.status = Some(PodStatus {
                phase: status.phase,
                conditions: status.conditions,
                nominated_node_name: status.nominated_node_name,
                // A do-not-disrupt duration runs from it (`geometer_api::do_not_disrupt`).
                start_time: status.start_time,
                ..PodStatus::default()
            });
        }
    }
}

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

impl Projection for MigPolicy {}

impl Projection for MigPlan {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::pods::{demand_check, effective_requests, planner_pod};
    use kube::ResourceExt;
    use serde_json::json;

    fn kubelet_pod() -> Pod {
        serde_json::from_value(json!({
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
        }))
        .unwrap()
    }

    #[test]
    fn a_projected_pod_plans_exactly_as_the_whole_pod_and_keeps_nothing_else() {
        let whole = kubelet_pod();
        let mut projected = whole.clone();
        projected.project();
        let keys = ["karpenter.sh/do-not-disrupt".to_string()];
        let now = jiff::Timestamp::now();
        let plan = |p: &Pod| planner_pod(p, &effective_requests(p).unwrap(), &keys, now).unwrap();
        assert_eq!(plan(&projected), plan(&whole));
        assert_eq!(
            effective_requests(&projected).unwrap(),
            effective_requests(&whole).unwrap(),
            "sidecars add up alike"
        );
        assert_eq!(demand_check(&projected), demand_check(&whole));
        assert!(plan(&projected).do_not_disrupt);
        let spec = projected.spec.as_ref().unwrap();
        assert!(spec.volumes.is_none() && spec.service_account_name.is_none());
        assert!(spec.containers[0].env.is_none() && spec.containers[0].command.is_none());
        assert!(spec.affinity.as_ref().unwrap().pod_anti_affinity.is_none());
        assert!(projected.status.as_ref().unwrap().container_statuses.is_none());
        assert!(!projected.annotations().contains_key(LAST_APPLIED));
        assert_eq!(projected.metadata.owner_references, whole.metadata.owner_references);
    }

    #[test]
    fn a_do_not_disrupt_duration_runs_from_the_start_time_a_projected_pod_keeps() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut whole = kubelet_pod();
        let key = "karpenter.sh/do-not-disrupt".to_string();
        whole.metadata.annotations = Some([(key.clone(), "1h".to_string())].into());
        whole.metadata.creation_timestamp = Some(Time("2026-06-01T10:00:00Z".parse().unwrap()));
        let status = whole.status.as_mut().unwrap();
        status.phase = Some("Running".into());
        status.start_time = Some(Time("2026-06-01T11:50:00Z".parse().unwrap()));
        let mut projected = whole.clone();
        projected.project();
        let now: jiff::Timestamp = "2026-06-01T12:00:00Z".parse().unwrap();
        let keys = [key];
        let protected =
            |p: &Pod| planner_pod(p, &effective_requests(p).unwrap(), &keys, now).unwrap().do_not_disrupt;
        assert!(protected(&whole));
        assert!(
            protected(&projected),
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
