//! The solver's plan as a `MigPlan` spec, and the events a published plan leaves on the pods it
//! is about.
//!
//! Lists are capped at the CRD's `maxItems`; the summary counts everything, also what a capped
//! list had to leave out, so `kubectl get migplans` never undercounts.

use crate::adapter::PodView;
use std::collections::{BTreeMap, BTreeSet};

use geometer_solver::catalog::WHOLE;
use geometer_solver::plan::{PlacedName, Plan, SliceSource};
use geometer_solver::PodKey;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use geometer_api::{
    Demand, DemandGang, DemandMet, DemandUnmet, Eviction, GpuChange, GpuOperations, MigPlanSpec, NodeChange,
    PlacedInstance, MAX_PLAN_DEMAND_ENTRIES, MAX_PLAN_EVICTIONS, MAX_PLAN_NODES,
};

use crate::runtime::actions::{Action, EventSpec};

/// Most pod events one round publishes; the plan lists every pod, events are for the people
/// who look at one pod.
pub(crate) const MAX_POD_EVENTS: usize = 500;

fn placed(list: &[PlacedName]) -> Vec<PlacedInstance> {
    list.iter().map(|p| PlacedInstance::new(p.profile.clone(), p.start)).collect()
}

/// The spec of a plan made for `policy`. Only GPUs that change are listed.
pub(crate) fn to_spec(policy: &str, plan: &Plan) -> MigPlanSpec {
    let mut nodes: BTreeMap<&str, Vec<GpuChange>> = BTreeMap::new();
    for gpu in plan.changed_gpus() {
        nodes.entry(gpu.node.as_str()).or_default().push(GpuChange {
            index: gpu.index,
            model: gpu.model.clone(),
            from: placed(&gpu.from),
            to: placed(&gpu.to),
            operations: GpuOperations { destroy: placed(&gpu.destroy), create: placed(&gpu.create) },
        });
    }
    let evictions: Vec<Eviction> = plan
        .evictions
        .iter()
        .map(|e| Eviction {
            namespace: e.pod.namespace().to_string(),
            name: e.pod.name().to_string(),
            node: e.node.clone(),
            reason: format!(
                "uses a slice on GPU {} that the plan replaces; runs again on {}",
                e.gpu, e.rescheduled_to
            ),
        })
        .collect();
    let mut demand = Demand::default();
    for pod in &plan.pods {
        for profile in pod.requests.keys() {
            match (pod.placement, &pod.node, &pod.reason) {
                (SliceSource::NewSlices, Some(node), _) => demand.met.push(DemandMet {
                    pod: pod.pod.to_string(),
                    profile: profile.clone(),
                    node: node.clone(),
                }),
                (SliceSource::Unmet, _, reason) => demand.unmet.push(DemandUnmet {
                    pod: pod.pod.to_string(),
                    profile: profile.clone(),
                    reason: reason
                        .as_ref()
                        .map_or_else(|| "the planner found no room".to_string(), |r| r.summary()),
                }),
                _ => {}
            }
        }
    }
    demand.gangs = plan
        .gangs
        .iter()
        .map(|g| DemandGang {
            gang: g.name.clone(),
            min_members: g.min_members,
            members: g.counted + g.placed,
            reason: g.reason.clone(),
        })
        .collect();
    let mut spec = MigPlanSpec {
        policy: policy.to_string(),
        approved: false,
        nodes: rollout_order(plan, nodes),
        evictions,
        demand,
        objective: plan.objective.demand_met as f64,
        bound: plan.bound.is_finite().then_some(plan.bound),
        solve_ms: plan.solve_ms,
        summary: Default::default(),
    };
    // Count pods, not (pod, profile) entries.
    let pods_with = |p: SliceSource| plan.pods.iter().filter(|o| o.placement == p).count() as u32;
    spec.summary = spec.summarize();
    spec.summary.pods_helped = pods_with(SliceSource::NewSlices);
    spec.summary.pods_unmet = pods_with(SliceSource::Unmet);
    spec.nodes.truncate(MAX_PLAN_NODES);
    spec.evictions.truncate(MAX_PLAN_EVICTIONS);
    spec.demand.met.truncate(MAX_PLAN_DEMAND_ENTRIES);
    spec.demand.unmet.truncate(MAX_PLAN_DEMAND_ENTRIES);
    spec.demand.gangs.truncate(MAX_PLAN_DEMAND_ENTRIES);
    spec
}

/// Nodes in the order the rollout takes them (and a truncated plan keeps them): those that
/// pending pods or evictions need first, then those changed only for the forecast; by name
/// within each.
fn rollout_order(plan: &Plan, nodes: BTreeMap<&str, Vec<GpuChange>>) -> Vec<NodeChange> {
    let mut needed: BTreeSet<&str> = plan
        .pods
        .iter()
        .filter(|p| p.placement == SliceSource::NewSlices)
        .filter_map(|p| p.node.as_deref())
        .collect();
    for e in &plan.evictions {
        needed.insert(&e.node);
        needed.insert(&e.rescheduled_to);
    }
    let mut ordered: Vec<NodeChange> =
        nodes.into_iter().map(|(node, gpus)| NodeChange { node: node.to_string(), gpus }).collect();
    ordered.sort_by_key(|n| !needed.contains(n.node.as_str()));
    ordered
}

/// Events on pending pods: which slice the plan makes for each (`SlicePlanned`), or why it
/// cannot help (`NoSlicePlanned`). `plan` is the published plan's reference, or None when the
/// round published nothing.
pub(crate) fn pod_events(
    spec: &MigPlanSpec,
    pods: &BTreeMap<PodKey, &PodView>,
    plan: Option<&ObjectReference>,
) -> Vec<Action> {
    let plan_name = plan.and_then(|p| p.name.clone());
    let met = spec.demand.met.iter().map(|m| {
        let by = plan_name.as_deref().map(|p| format!(" by plan {p}")).unwrap_or_default();
        let what = match m.profile.as_str() {
            WHOLE => format!("a whole GPU (MIG off{})", leaving_mig(spec, &m.node)),
            profile => format!("slice {profile}"),
        };
        (m.pod.as_str(), false, "SlicePlanned", format!("{what} planned on node {}{by}", m.node))
    });
    let unmet = spec.demand.unmet.iter().map(|u| {
        let by = plan_name.as_deref().map(|p| format!(" (plan {p})")).unwrap_or_default();
        let what = match u.profile.as_str() {
            WHOLE => "whole GPU".to_string(),
            profile => format!("{profile} slice"),
        };
        (u.pod.as_str(), true, "NoSlicePlanned", format!("no {what} can be planned{by}: {}", u.reason))
    });
    met.chain(unmet)
        .filter_map(|(key, warning, reason, note)| {
            let pod = pods.get(&PodKey::parse(key).ok()?)?;
            Some(Action::Event(EventSpec {
                regarding: pod.object_ref(&()),
                related: plan.cloned(),
                warning,
                reason,
                action: "Plan",
                note,
            }))
        })
        .take(MAX_POD_EVENTS)
        .collect()
}

/// Warning events on pending pods whose DRA claims cannot be planned (`ClaimNotPlanned`),
/// saying why.
pub(crate) fn claim_events(
    unplanned: &[(PodKey, String)],
    pods: &BTreeMap<PodKey, &PodView>,
    plan: Option<&ObjectReference>,
) -> Vec<Action> {
    unplanned
        .iter()
        .filter_map(|(key, why)| {
            let pod = pods.get(key)?;
            Some(Action::Event(EventSpec {
                regarding: pod.object_ref(&()),
                related: plan.cloned(),
                warning: true,
                reason: "ClaimNotPlanned",
                action: "Plan",
                note: format!("Geometer does not plan for this pod's DRA claims: {why}"),
            }))
        })
        .take(MAX_POD_EVENTS)
        .collect()
}

/// Warning events on pending pods whose DRA claim fits no DynamicMIG GPU now:
/// `BlockedByFragmentation` (packing a GPU's instances would make room) or `BlockedByCapacity`.
pub(crate) fn blocked_events(
    blocked: &[crate::adapter::dynamic_mig::Blocked],
    pods: &BTreeMap<PodKey, &PodView>,
    plan: Option<&ObjectReference>,
) -> Vec<Action> {
    blocked
        .iter()
        .filter_map(|b| {
            let pod = pods.get(&b.pod)?;
            let reason = if b.by_fragmentation { "BlockedByFragmentation" } else { "BlockedByCapacity" };
            Some(Action::Event(EventSpec {
                regarding: pod.object_ref(&()),
                related: plan.cloned(),
                warning: true,
                reason,
                action: "Plan",
                note: format!("its claim needs a {}: {}", b.profile, b.why),
            }))
        })
        .take(MAX_POD_EVENTS)
        .collect()
}

/// The GPUs of `node` the plan takes out of MIG mode, as `: GPU gpu-7/3 leaves MIG`, for a
/// whole-GPU pod's event; empty when none does (the pod uses a GPU already whole). The plan does
/// not pick which of them the pod gets: the scheduler and the device plugin do.
fn leaving_mig(spec: &MigPlanSpec, node: &str) -> String {
    let whole = |list: &[PlacedInstance]| list.iter().any(|p| p.profile == WHOLE);
    let gpus: Vec<String> = spec
        .nodes
        .iter()
        .filter(|n| n.node == node)
        .flat_map(|n| &n.gpus)
        .filter(|g| whole(&g.to) && !whole(&g.from))
        .map(|g| format!("{node}/{}", g.index))
        .collect();
    match gpus.len() {
        0 => String::new(),
        1 => format!(": GPU {} leaves MIG", gpus[0]),
        _ => format!(": GPUs {} leave MIG", gpus.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each event action as (warning, reason, note).
    fn said(events: &[Action]) -> Vec<(bool, &'static str, String)> {
        events
            .iter()
            .map(|a| match a {
                Action::Event(e) => (e.warning, e.reason, e.note.clone()),
                other => panic!("{other:?}"),
            })
            .collect()
    }
    use geometer_solver::plan::{GpuPlan, Objective, PodOutcome, SolverUsed, UnmetReason};

    fn name(p: &str, s: u8) -> PlacedName {
        PlacedName { profile: p.into(), start: s }
    }

    fn outcome(pod: &str, profile: &str, node: Option<&str>, placement: SliceSource) -> PodOutcome {
        PodOutcome {
            pod: PodKey::parse(pod).expect("a test pod reference"),
            priority: 0,
            requests: BTreeMap::from([(profile.to_string(), 1)]),
            node: node.map(str::to_string),
            placement,
            reason: (placement == SliceSource::Unmet)
                .then(|| UnmetReason::ProfileNotAllowed { profile: profile.into() }),
        }
    }

    fn solver_plan() -> Plan {
        let gpu = |index, changed| GpuPlan {
            node: "gpu-a".into(),
            index,
            model: "H100-80GB".into(),
            from: vec![name("7g.80gb", 0)],
            to: if changed { vec![name("3g.40gb", 4), name("4g.40gb", 0)] } else { vec![name("7g.80gb", 0)] },
            destroy: if changed { vec![name("7g.80gb", 0)] } else { vec![] },
            create: if changed { vec![name("4g.40gb", 0), name("3g.40gb", 4)] } else { vec![] },
            changed,
        };
        Plan {
            solver: SolverUsed::Ilp,
            placements_inferred: false,
            gpus: vec![gpu(0, true), gpu(1, false)],
            evictions: vec![],
            pods: vec![
                outcome("ml/a", "3g.40gb", Some("gpu-a"), SliceSource::NewSlices),
                outcome("ml/b", "1g.10gb", Some("gpu-b"), SliceSource::ExistingSlices),
                outcome("ml/c", "2g.20gb", None, SliceSource::Unmet),
            ],
            objective: Objective { demand_met: 3, pods_met: 1, ..Objective::default() },
            bound: 3.0,
            gap: 0.0,
            solve_ms: 7,
            notes: vec![],
            gangs: vec![],
        }
    }

    #[test]
    fn lists_only_changing_gpus_and_new_slice_demand() {
        let spec = to_spec("pool", &solver_plan());
        assert_eq!(spec.policy, "pool");
        assert_eq!(spec.nodes.len(), 1);
        assert_eq!(spec.nodes[0].gpus.len(), 1, "GPU 1 keeps its geometry and is not listed");
        assert_eq!(spec.nodes[0].gpus[0].operations.destroy, vec![PlacedInstance::new("7g.80gb", 0)]);
        assert_eq!(
            spec.demand.met,
            vec![DemandMet { pod: "ml/a".into(), profile: "3g.40gb".into(), node: "gpu-a".into() }]
        );
        assert_eq!(spec.demand.unmet.len(), 1, "a pod served by existing slices is not demand for new ones");
        assert!(spec.demand.unmet[0].reason.contains("allowedProfiles"), "{:?}", spec.demand.unmet);
        assert_eq!(spec.summary.gpus_changed, 1);
        assert_eq!(spec.summary.pods_helped, 1);
        assert_eq!(spec.summary.pods_unmet, 1);
        assert_eq!(spec.bound, Some(3.0));
    }

    #[test]
    fn a_claim_blocked_on_dynamic_mig_nodes_gets_a_warning_saying_by_what() {
        let pod = crate::fixtures::pod("ml", "train", None);
        let pods = BTreeMap::from([(PodKey::new("ml", "train"), &pod)]);
        let blocked = |by_fragmentation| crate::adapter::dynamic_mig::Blocked {
            pod: PodKey::new("ml", "train"),
            profile: "3g.40gb".into(),
            by_fragmentation,
            why: "blocked by fragmentation: node dyn-1 gpu-0-counter-set ...".into(),
        };
        let events = blocked_events(&[blocked(true), blocked(false)], &pods, None);
        let said = said(&events);
        assert_eq!(said[0].1, "BlockedByFragmentation");
        assert_eq!(said[1].1, "BlockedByCapacity");
        assert!(
            said.iter().all(|(warning, _, note)| *warning && note.contains("needs a 3g.40gb")),
            "{said:?}"
        );
    }

    #[test]
    fn events_name_slice_node_and_plan() {
        let spec = to_spec("pool", &solver_plan());
        let a = crate::fixtures::pod("ml", "a", None);
        let c = crate::fixtures::pod("ml", "c", None);
        let pods = BTreeMap::from([(PodKey::new("ml", "a"), &a), (PodKey::new("ml", "c"), &c)]);
        let plan = ObjectReference {
            kind: Some("MigPlan".into()),
            name: Some("pool-1".into()),
            ..Default::default()
        };
        let events = pod_events(&spec, &pods, Some(&plan));
        let notes = said(&events);
        assert_eq!(
            notes[0],
            (false, "SlicePlanned", "slice 3g.40gb planned on node gpu-a by plan pool-1".to_string())
        );
        assert_eq!(notes[1].1, "NoSlicePlanned");
        assert!(notes[1].0 && notes[1].2.contains("2g.20gb") && notes[1].2.contains("pool-1"), "{notes:?}");
    }

    #[test]
    fn a_whole_gpu_event_names_the_gpu_leaving_mig() {
        let mut plan = solver_plan();
        plan.gpus[1].to = vec![name(WHOLE, 0)];
        plan.gpus[1].destroy = vec![name("7g.80gb", 0)];
        plan.gpus[1].create = vec![name(WHOLE, 0)];
        plan.gpus[1].changed = true;
        plan.pods[0] = outcome("ml/a", WHOLE, Some("gpu-a"), SliceSource::NewSlices);
        let spec = to_spec("pool", &plan);
        let a = crate::fixtures::pod("ml", "a", None);
        let pods = BTreeMap::from([(PodKey::new("ml", "a"), &a)]);
        let Some(Action::Event(event)) = pod_events(&spec, &pods, None).into_iter().next() else {
            panic!("no event for the whole-GPU pod")
        };
        assert_eq!(event.note, "a whole GPU (MIG off: GPU gpu-a/1 leaves MIG) planned on node gpu-a");
    }
}
