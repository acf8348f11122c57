//! What the controller's gauges say about the fleet, counted from the cached objects on each
//! pass: MIG slices advertised and allocated per profile and policy (the utilisation Geometer
//! exists to raise), the age of the oldest pending demand per profile, and how long each plan
//! took from publication to success.

use crate::adapter::PodView;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use kube::ResourceExt;

use geometer_api::{MigNode, MigPlan, MigPlanPhase};
use geometer_solver::PodKey;

use crate::adapter::pods;
use crate::policy::validation::PolicyReport;

/// `(profile, policy) -> (advertised, allocated)` slices on the policies' nodes. A slice is
/// advertised once its compute instance exists (the device plugin lists it) and allocated when
/// the kubelet gave it to a pod. Whole GPUs count as the profile `whole`.
pub(crate) fn slices(
    mignodes: &BTreeMap<String, Arc<MigNode>>,
    reports: &BTreeMap<String, PolicyReport>,
) -> BTreeMap<(String, String), (i64, i64)> {
    let mut out: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    for (policy, report) in reports {
        for node in report.matched_nodes.iter().filter_map(|n| mignodes.get(n)) {
            for gpu in node.status.iter().flat_map(|s| &s.gpus) {
                for instance in &gpu.instances {
                    if instance.compute_instance_id.is_none() {
                        continue;
                    }
                    let entry = out.entry((instance.profile.clone(), policy.clone())).or_default();
                    entry.0 += 1;
                    entry.1 += i64::from(instance.pod.is_some());
                }
                if !gpu.mig_mode.current {
                    let entry =
                        out.entry((geometer_solver::catalog::WHOLE.to_string(), policy.clone())).or_default();
                    entry.0 += 1;
                    entry.1 += i64::from(gpu.pod.is_some());
                }
            }
        }
    }
    out
}

/// Per profile, seconds the oldest pending pod asking for it has waited.
pub(crate) fn oldest_demand(
    pods: &[Arc<PodView>],
    demand: &BTreeMap<PodKey, BTreeMap<String, u32>>,
    now: Timestamp,
) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for pod in pods.iter().filter(|p| pods::bound_node(p).is_none()) {
        let (Some(profiles), Some(created)) = (demand.get(&pods::key(pod)), pod.creation_timestamp()) else {
            continue;
        };
        let age = now.duration_since(created.0).as_secs_f64().max(0.0);
        for profile in profiles.keys() {
            let oldest = out.entry(profile.clone()).or_default();
            *oldest = oldest.max(age);
        }
    }
    out
}

/// Plans that succeeded and are not in `seen` yet, with the seconds from their creation to the
/// last node finishing; `seen` keeps each plan once, and forgets plans that are gone. On the
/// first pass (`seen` is `None`) the plans that succeeded before this replica started are only
/// remembered, so that a restart does not count them again.
pub(crate) fn newly_succeeded(plans: &[Arc<MigPlan>], seen: &mut Option<BTreeSet<String>>) -> Vec<f64> {
    let succeeded = || plans.iter().filter(|p| p.phase() == MigPlanPhase::Succeeded).map(|p| p.name_any());
    let Some(seen) = seen else {
        *seen = Some(succeeded().collect());
        return Vec::new();
    };
    let names: BTreeSet<String> = plans.iter().map(|p| p.name_any()).collect();
    seen.retain(|n| names.contains(n));
    let mut out = Vec::new();
    for plan in plans.iter().filter(|p| p.phase() == MigPlanPhase::Succeeded) {
        let (Some(created), Some(status)) = (plan.creation_timestamp(), &plan.status) else { continue };
        let finished = status.nodes.iter().filter_map(|n| n.finished_at.as_ref()).map(|t| t.0).max();
        if let Some(finished) = finished.filter(|_| seen.insert(plan.name_any())) {
            out.push(finished.duration_since(created.0).as_secs_f64().max(0.0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slices_count_advertised_and_allocated_per_profile_and_policy() {
        let node: MigNode = serde_json::from_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode",
            "metadata": {"name": "gpu-a"}, "spec": {}, "status": {"gpus": [
                {"index": 0, "uuid": "GPU-0", "model": "H100-80GB", "pciDeviceId": "0x233010DE", "migMode": {"current": true, "pending": true},
                 "instances": [{"profile": "3g.40gb", "start": 0, "size": 4, "gpuInstanceId": 1, "computeInstanceId": 0, "pod": "ml/a"},
                               {"profile": "3g.40gb", "start": 4, "size": 4, "gpuInstanceId": 2, "computeInstanceId": 0},
                               {"profile": "1g.10gb", "start": 6, "size": 1, "gpuInstanceId": 3}]},
                {"index": 1, "uuid": "GPU-1", "model": "H100-80GB", "pciDeviceId": "0x233010DE", "migMode": {"current": false, "pending": false},
                 "instances": [], "pod": "ml/train"}]}}))
        .unwrap();
        let mignodes = BTreeMap::from([("gpu-a".to_string(), Arc::new(node))]);
        let report = PolicyReport { matched_nodes: vec!["gpu-a".into()], ..PolicyReport::default() };
        let reports = BTreeMap::from([("pool".to_string(), report)]);
        let counted = slices(&mignodes, &reports);
        assert_eq!(counted[&("3g.40gb".to_string(), "pool".to_string())], (2, 1));
        assert_eq!(counted[&("whole".to_string(), "pool".to_string())], (1, 1));
        assert!(
            !counted.contains_key(&("1g.10gb".to_string(), "pool".to_string())),
            "no compute instance: not advertised"
        );
    }

    #[test]
    fn a_succeeded_plan_is_timed_once() {
        let plan: MigPlan = serde_json::from_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlan",
            "metadata": {"name": "p-1", "creationTimestamp": "2026-12-04T10:00:00Z"}, "spec": {"policy": "pool"},
            "status": {"phase": "Succeeded", "nodes": [
                {"node": "a", "phase": "Succeeded", "finishedAt": "2026-12-04T10:01:30Z"},
                {"node": "b", "phase": "Succeeded", "finishedAt": "2026-12-04T10:02:00Z"}]}}))
        .unwrap();
        let plans = vec![Arc::new(plan)];
        let mut seen = Some(BTreeSet::new());
        assert_eq!(newly_succeeded(&plans, &mut seen), [120.0]);
        assert!(newly_succeeded(&plans, &mut seen).is_empty());
        let mut restarted = None;
        assert!(newly_succeeded(&plans, &mut restarted).is_empty(), "not counted again after a restart");
        assert!(newly_succeeded(&plans, &mut restarted).is_empty());
    }
}
