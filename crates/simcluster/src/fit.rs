//! Whether a pod fits a node, as the default scheduler's filters decide it: node selector,
//! required node affinity, taints against tolerations, cordon, and resources (CPU, memory,
//! pod count, extended resources such as `nvidia.com/mig-1g.10gb`). Pure functions.

use geometer_controller::adapter::PodView;
use std::collections::BTreeMap;

use geometer_controller::adapter::{nodes as adapter_nodes, pods as adapter_pods};
use geometer_solver::snapshot::Ineligible;
use k8s_openapi::api::core::v1::{Node, Pod};

use geometer_api::quantity::{format_milli, milli};

/// Resource amounts in milli-units, by resource name.
pub type Resources = BTreeMap<String, i128>;

/// What a pod asks for: per resource, the larger of the containers' sum and any init
/// container (init containers run one at a time, before the others), plus one pod slot.
/// A request defaults to the limit when only the limit is set, as in Kubernetes.
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut sum = Resources::new();
    let Some(spec) = &pod.spec else { return sum };
    for c in &spec.containers {
        for (k, v) in container_requests(c) {
            *sum.entry(k).or_insert(0) += v;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in container_requests(c) {
            let e = sum.entry(k).or_insert(0);
            *e = (*e).max(v);
        }
    }
    *sum.entry("pods".to_string()).or_insert(0) += 1000;
    sum
}

fn container_requests(c: &k8s_openapi::api::core::v1::Container) -> Resources {
    let mut out = Resources::new();
    let Some(r) = &c.resources else { return out };
    for (k, q) in r.limits.iter().flatten() {
        out.insert(k.clone(), milli(&q.0).unwrap_or(0));
    }
    for (k, q) in r.requests.iter().flatten() {
        out.insert(k.clone(), milli(&q.0).unwrap_or(0));
    }
    out
}

/// MIG devices and whole GPUs a pod asks for, by profile (`1g.10gb` -> 2, `whole` -> 1).
pub(crate) fn gpu_requests(requests: &Resources) -> BTreeMap<String, u32> {
    requests
        .iter()
        .filter_map(|(k, v)| {
            geometer_api::resources::device_profile(k).map(|p| (p.to_string(), (*v / 1000) as u32))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// MIG devices each container asks for, by container name and profile.
pub(crate) fn container_mig_requests(pod: &Pod) -> Vec<(String, BTreeMap<String, u32>)> {
    let Some(spec) = &pod.spec else { return Vec::new() };
    spec.containers
        .iter()
        .map(|c| (c.name.clone(), gpu_requests(&container_requests(c))))
        .filter(|(_, m)| !m.is_empty())
        .collect()
}

/// A node's allocatable, in milli-units.
pub(crate) fn allocatable(node: &Node) -> Resources {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| a.iter().map(|(k, q)| (k.clone(), milli(&q.0).unwrap_or(0))).collect())
        .unwrap_or_default()
}

/// Why a pod cannot go to a node, worded as the scheduler's event says it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Misfit {
    Unschedulable,
    Selector,
    Affinity,
    Taint(String),
    Insufficient(String),
}

impl std::fmt::Display for Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Misfit::Unschedulable => f.write_str("node(s) were unschedulable"),
            Misfit::Selector => f.write_str("node(s) didn't match Pod's node affinity/selector"),
            Misfit::Affinity => f.write_str("node(s) didn't match Pod's node affinity/selector"),
            Misfit::Taint(t) => write!(f, "node(s) had untolerated taint {{{t}}}"),
            Misfit::Insufficient(r) => write!(f, "Insufficient {r}"),
        }
    }
}

/// The first reason the pod cannot use the node, ignoring resources. The planner's own rules
/// decide it (`geometer_solver::snapshot::eligibility` over the adapter's reading of the pod
/// and the node), so the simulated scheduler and the planner never disagree on a constraint.
pub(crate) fn placement_misfit(pod: &Pod, node: &Node) -> Option<Misfit> {
    // A pod or node whose constraints cannot be read is refused by the API server's
    // validation in a real cluster; here it simply fits nowhere.
    let pod = PodView::from(pod);
    let Ok(planner_pod) = adapter_pods::planner_pod(&pod, &BTreeMap::new(), &[], jiff::Timestamp::UNIX_EPOCH)
    else {
        return Some(Misfit::Affinity);
    };
    let Ok(planner_node) = adapter_nodes::planner_node(node, &BTreeMap::new()) else {
        return Some(Misfit::Affinity);
    };
    let planner_pod = geometer_solver::snapshot::Pod { cpu_millis: 0, memory_bytes: 0, ..planner_pod };
    match geometer_solver::snapshot::eligibility(&planner_pod, &planner_node) {
        Ok(()) => None,
        Err(Ineligible::Unschedulable) => Some(Misfit::Unschedulable),
        Err(Ineligible::NodeSelector { .. }) => Some(Misfit::Selector),
        Err(Ineligible::Taint(taint)) => {
            let value = taint.value.as_deref().map(|v| format!(": {v}")).unwrap_or_default();
            Some(Misfit::Taint(format!("{}{value}", taint.key)))
        }
        Err(Ineligible::Affinity | Ineligible::Cpu { .. } | Ineligible::Memory { .. }) => {
            Some(Misfit::Affinity)
        }
    }
}

/// The resources the pod needs beyond what is free, first by name; None when it fits.
pub(crate) fn resource_misfit(requests: &Resources, free: &Resources) -> Option<Misfit> {
    requests
        .iter()
        .find(|(k, want)| **want > 0 && free.get(*k).copied().unwrap_or(0) < **want)
        .map(|(k, _)| Misfit::Insufficient(k.clone()))
}

/// The scheduler's summary: `0/4 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb,
/// 2 node(s) were unschedulable.`
pub(crate) fn unschedulable_message(nodes: usize, misfits: &BTreeMap<String, usize>) -> String {
    let mut parts: Vec<(usize, &String)> = misfits.iter().map(|(m, n)| (*n, m)).collect();
    parts.sort_by(|a, b| a.1.cmp(b.1));
    let list: Vec<String> = parts.iter().map(|(n, m)| format!("{n} {m}")).collect();
    format!("0/{nodes} nodes are available: {}.", list.join(", "))
}

/// `nvidia.com/mig-1g.10gb: 2, cpu: 500m` for messages.
pub fn describe(requests: &Resources) -> String {
    requests
        .iter()
        .filter(|(k, v)| *k != "pods" && **v > 0)
        .map(|(k, v)| format!("{k}: {}", format_milli(k, *v)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn node(labels: serde_json::Value, spec: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}, "spec": spec})).unwrap()
    }

    #[test]
    fn requests_default_to_limits_and_init_containers_take_the_max() {
        let p = pod(json!({
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}, "requests": {"cpu": "500m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
        }));
        let r = pod_requests(&p);
        assert_eq!(r["cpu"], 4000);
        assert_eq!(r["memory"], (1i128 << 30) * 1000);
        assert_eq!(r["nvidia.com/mig-1g.10gb"], 1000);
        assert_eq!(r["pods"], 1000);
        assert_eq!(gpu_requests(&r), BTreeMap::from([("1g.10gb".to_string(), 1)]));
    }

    #[test]
    fn selector_affinity_taints_and_cordon_each_keep_a_pod_off() {
        let gpu = node(json!({"gpu": "h100", "zone": "a"}), json!({}));
        assert_eq!(
            placement_misfit(&pod(json!({"containers": [], "nodeSelector": {"gpu": "h100"}})), &gpu),
            None
        );
        assert_eq!(
            placement_misfit(&pod(json!({"containers": [], "nodeSelector": {"gpu": "a100"}})), &gpu),
            Some(Misfit::Selector)
        );

        let affinity = |op: &str, values: serde_json::Value| {
            pod(
                json!({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": op, "values": values}]}]}}}}),
            )
        };
        assert_eq!(placement_misfit(&affinity("In", json!(["a", "b"])), &gpu), None);
        assert_eq!(placement_misfit(&affinity("NotIn", json!(["a"])), &gpu), Some(Misfit::Affinity));
        assert_eq!(placement_misfit(&affinity("DoesNotExist", json!([])), &gpu), Some(Misfit::Affinity));

        let tainted =
            node(json!({}), json!({"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]}));
        assert_eq!(
            placement_misfit(&pod(json!({"containers": []})), &tainted),
            Some(Misfit::Taint("gpu: true".into()))
        );
        let tolerant = pod(
            json!({"containers": [], "tolerations": [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}),
        );
        assert_eq!(placement_misfit(&tolerant, &tainted), None);
        let everything = pod(json!({"containers": [], "tolerations": [{"operator": "Exists"}]}));
        assert_eq!(placement_misfit(&everything, &tainted), None);
        let prefer = node(json!({}), json!({"taints": [{"key": "gpu", "effect": "PreferNoSchedule"}]}));
        assert_eq!(placement_misfit(&pod(json!({"containers": []})), &prefer), None);

        let cordoned = node(json!({}), json!({"unschedulable": true}));
        assert_eq!(placement_misfit(&pod(json!({"containers": []})), &cordoned), Some(Misfit::Unschedulable));
    }

    #[test]
    fn resources_must_fit_what_is_free() {
        let want = Resources::from([("cpu".into(), 2000), ("nvidia.com/mig-1g.10gb".into(), 1000)]);
        let free = Resources::from([("cpu".into(), 4000), ("nvidia.com/mig-1g.10gb".into(), 1000)]);
        assert_eq!(resource_misfit(&want, &free), None);
        let none = Resources::from([("cpu".into(), 4000)]);
        assert_eq!(
            resource_misfit(&want, &none),
            Some(Misfit::Insufficient("nvidia.com/mig-1g.10gb".into()))
        );
        let msg = unschedulable_message(
            4,
            &BTreeMap::from([
                (Misfit::Insufficient("nvidia.com/mig-1g.10gb".into()).to_string(), 3),
                (Misfit::Unschedulable.to_string(), 1),
            ]),
        );
        assert_eq!(
            msg,
            "0/4 nodes are available: 3 Insufficient nvidia.com/mig-1g.10gb, 1 node(s) were unschedulable."
        );
    }
}
