//! `MigNode` and `MigPolicy` objects, read through the typed CRDs of `geometer-api`: what the
//! planner takes from them.
//!
//! - `MigNode` (name = node name): `status.gpus[]`, each GPU's index, model and instances with
//!   their profile, start and the pod using them.
//! - `MigPolicy`: `spec.nodeSelector.matchLabels` (`matchExpressions` is refused by the offline
//!   `geometer plan`, not ignored; the controller applies the whole selector itself),
//!   `spec.allowedProfiles`, `spec.headroom`, `spec.disruption.evictionAllowed`,
//!   `spec.disruption.doNotDisruptAnnotations`, `spec.solver.timeLimitMs`, `maxGpusChanged`,
//!   `maxNodesChanged`, `allowedModes`, `minWholeGpus`. (`disruption.maxNodesReconfiguring` limits rollout concurrency, not the
//!   plan.)

use std::collections::BTreeMap;
use std::sync::Arc;

use geometer_api::{MigNode, MigPolicy};
use geometer_solver::snapshot::{Gpu, GpuMode, Instance, Policy};
use geometer_solver::PodKey;
use kube::ResourceExt;

use crate::adapter::AdapterError;

/// What a MigPolicy says, beyond the solver's policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyObject {
    pub name: String,
    pub policy: Policy,
    /// Empty: every node with MIG GPUs.
    pub node_selector: BTreeMap<String, String>,
    /// Empty: the defaults.
    pub do_not_disrupt: Vec<String>,
}

use crate::adapter::dra::InstanceAt;

/// MigNodes' inventories already read, by the MigNode object they were read from (see
/// [`crate::adapter::known`]).
pub type KnownInventories = crate::adapter::known::Known<MigNode, std::sync::Arc<Vec<Gpu>>>;

/// GPUs of a MigNode's inventory (what its agent read from NVML). A GPU with MIG mode off is
/// the one instance `whole`, held by the pod using the GPU. A pod reference that cannot be
/// read is an error naming the field: reading it as free would let a plan destroy a slice, or
/// turn MIG on under a GPU, that a pod uses.
pub fn inventory(node: &MigNode) -> Result<Vec<Gpu>, AdapterError> {
    let gpus = node.status.as_ref().map(|s| s.gpus.as_slice()).unwrap_or_default();
    // The field is only written out for an error: every pass reads every MigNode.
    let pod_at = |field: &dyn Fn() -> String, text: Option<&str>| {
        text.map(PodKey::parse).transpose().map_err(|e| AdapterError::Field {
            object: format!("MigNode {}", node.name_any()),
            field: field(),
            value: e.text.clone(),
            problem: "not a `namespace/name` pod reference; the node agent writes it from the \
                      kubelet's PodResources, so check the agent's version and logs"
                .into(),
        })
    };
    let mut out = Vec::with_capacity(gpus.len());
    for (g, gpu) in gpus.iter().enumerate() {
        let mut instances = Vec::with_capacity(gpu.instances.len().max(1));
        for (i, (placed, pod)) in gpu.placed_instances().into_iter().enumerate() {
            let field = || match gpu.mig_mode.current {
                true => format!("status.gpus[{g}].instances[{i}].pod"),
                false => format!("status.gpus[{g}].pod"),
            };
            let pod = pod_at(&field, pod.map(String::as_str))?;
            instances.push(Instance { profile: placed.profile, start: placed.start, pod });
        }
        out.push(Gpu { index: gpu.index, model: gpu.model.clone(), instances });
    }
    Ok(out)
}

/// Each MIG device of a MigNode's inventory by its UUID, and each GPU with MIG mode off by its
/// own (the DRA driver publishes such a GPU whole): where the driver's devices are.
pub fn instance_uuids(node: &MigNode) -> Vec<(Box<str>, InstanceAt)> {
    let name: Arc<str> = node.name_any().into();
    let gpus = node.status.as_ref().map(|s| s.gpus.as_slice()).unwrap_or_default();
    let mut profiles: BTreeMap<String, Arc<str>> = BTreeMap::new();
    let mut out = Vec::new();
    for gpu in gpus {
        let mut at = |start, profile: &str| InstanceAt {
            node: name.clone(),
            gpu: gpu.index,
            start,
            profile: match profiles.get(profile) {
                Some(shared) => shared.clone(),
                None => profiles.entry(profile.to_string()).or_insert_with(|| profile.into()).clone(),
            },
        };
        if !gpu.mig_mode.current {
            out.push((gpu.uuid.as_str().into(), at(0, geometer_solver::catalog::WHOLE)));
        }
        for instance in &gpu.instances {
            if let Some(uuid) = &instance.uuid {
                out.push((uuid.as_str().into(), at(instance.start, &instance.profile)));
            }
        }
    }
    out
}

/// Pods that share a whole GPU with others (time-slicing or MPS replicas): evicting one frees
/// nothing while the others run, so they are never planned as evictable.
pub fn sharing_pods(node: &MigNode) -> impl Iterator<Item = &str> + '_ {
    let gpus = node.status.as_ref().map(|s| s.gpus.as_slice()).unwrap_or_default();
    gpus.iter()
        .filter(|g| !g.shared_with.is_empty())
        .flat_map(|g| g.pod.iter().chain(&g.shared_with))
        .map(String::as_str)
}

/// What the node's device plugin advertises each profile as (`resource -> profile`), where
/// that differs from `nvidia.com/mig-<profile>`: the agent computes it from NVML's memory
/// figures as the device plugin does, and a pod asks for what the device plugin advertises.
pub fn advertised(node: &MigNode) -> impl Iterator<Item = (String, String)> + '_ {
    let gpus = node.status.as_ref().map(|s| s.gpus.as_slice()).unwrap_or_default();
    gpus.iter()
        .flat_map(|g| &g.advertised_as)
        .filter(|(profile, resource)| **resource != geometer_api::resources::mig_resource(profile))
        .map(|(profile, resource)| (resource.clone(), profile.clone()))
}

/// The planner's reading of a MigPolicy. With `whole_selector`, a selector with
/// `matchExpressions` is refused (the offline planner applies matchLabels only); without, the
/// caller has applied the selector already and it is not read.
pub fn mig_policy(policy: &MigPolicy, whole_selector: bool) -> Result<PolicyObject, AdapterError> {
    let name = policy.name_any();
    let spec = &policy.spec;
    let mut out = PolicyObject { name: name.clone(), ..PolicyObject::default() };
    if whole_selector {
        let exprs = spec.node_selector.match_expressions.as_deref().unwrap_or_default();
        if !exprs.is_empty() {
            return Err(AdapterError::Field {
                object: format!("MigPolicy {name}"),
                field: "spec.nodeSelector.matchExpressions".into(),
                value: serde_json::to_string(exprs).unwrap_or_default(),
                problem: "not supported by `geometer plan` yet; use matchLabels".into(),
            });
        }
        out.node_selector = spec.node_selector.match_labels.clone().unwrap_or_default();
    }
    out.policy.allowed_profiles = spec.allowed_profiles.clone();
    out.policy.headroom = spec.headroom.clone();
    out.policy.eviction_allowed = spec.disruption.eviction_allowed;
    out.policy.gpu_reset_allowed = spec.disruption.allow_gpu_reset;
    out.do_not_disrupt = spec.disruption.do_not_disrupt_annotations.clone();
    out.policy.max_gpus_changed = spec.solver.max_gpus_changed;
    out.policy.max_nodes_changed = spec.solver.max_nodes_changed;
    out.policy.allowed_modes = spec
        .allowed_modes
        .iter()
        .map(|m| match m {
            geometer_api::GpuMode::Mig => GpuMode::Mig,
            geometer_api::GpuMode::Whole => GpuMode::Whole,
        })
        .collect();
    out.policy.min_whole_gpus = spec.min_whole_gpus;
    // The planner reads the window only to shape the empty GPUs of the nodes it changes.
    out.policy.stabilisation_seconds = if spec.shape_empty_gpus { spec.stabilisation_seconds } else { 0 };
    let limit = spec.solver.time_limit_ms;
    out.policy.time_limit_ms = (limit > 0).then_some(u64::from(limit));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: serde_json::Value) -> MigPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "p"}, "spec": spec}))
        .unwrap()
    }

    #[test]
    fn reads_a_policy() {
        let p = policy(
            serde_json::json!({"nodeSelector": {"matchLabels": {"pool": "mig"}}, "allowedProfiles": ["1g.10gb"],
            "headroom": {"1g.10gb": 2}, "disruption": {"evictionAllowed": true, "maxNodesReconfiguring": 1},
            "solver": {"timeLimitMs": 2000, "maxNodesChanged": 1}, "stabilisationSeconds": 120}),
        );
        let p = mig_policy(&p, true).unwrap();
        assert_eq!(p.policy.stabilisation_seconds, 120);
        assert_eq!(p.node_selector["pool"], "mig");
        assert!(p.policy.eviction_allowed);
        assert_eq!(p.policy.max_nodes_changed, Some(1));
        assert_eq!(p.policy.time_limit_ms, Some(2000));
        assert_eq!(p.policy.headroom["1g.10gb"], 2);
    }

    #[test]
    fn match_expressions_are_refused_where_the_selector_is_read() {
        let p = policy(
            serde_json::json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}}),
        );
        let e = mig_policy(&p, true).unwrap_err().to_string();
        assert!(e.contains("MigPolicy p") && e.contains("spec.nodeSelector.matchExpressions"), "{e}");
        let read = mig_policy(&p, false).unwrap();
        assert!(read.node_selector.is_empty());
        assert_eq!(read.policy.stabilisation_seconds, 600, "the policy's default window reaches the planner");
    }

    #[test]
    fn shape_empty_gpus_false_keeps_the_window_from_the_planner() {
        let p = policy(serde_json::json!({"stabilisationSeconds": 600, "shapeEmptyGpus": false}));
        assert_eq!(mig_policy(&p, false).unwrap().policy.stabilisation_seconds, 0);
    }
}
