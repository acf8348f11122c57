//! Properties of every plan, over random small clusters.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use geometer_solver::catalog::{Catalog, GpuModel};
use geometer_solver::geometry::{self, Geometry, Placed};
use geometer_solver::plan::{GpuPlan, Plan, PlanOptions};
use geometer_solver::snapshot::{Gpu, Instance, Node, Pod, Policy, Snapshot};
use proptest::prelude::*;

use crate::support;

const MODELS: [&str; 3] = ["A100-40GB", "H100-80GB", "A30"];
const PROFILES: [&str; 8] =
    ["1g.5gb", "1g.10gb", "2g.10gb", "2g.20gb", "3g.20gb", "3g.40gb", "1g.6gb", "7g.80gb"];

fn model(i: usize) -> &'static GpuModel {
    Catalog::builtin().find(MODELS[i]).expect("model in the catalog")
}

/// Every valid standard geometry per model, enumerated once.
fn geometries(i: usize) -> &'static [Geometry] {
    static ALL: OnceLock<Vec<Vec<Geometry>>> = OnceLock::new();
    &ALL.get_or_init(|| {
        (0..MODELS.len())
            .map(|m| {
                let model = model(m);
                geometry::enumerate(model, &model.standard_profiles(), false)
            })
            .collect()
    })[i]
}

#[derive(Debug, Clone)]
struct GpuSpec {
    model: usize,
    geometry: usize,
    /// Per instance: 0 free, 1 used by an evictable pod, 2 used by a do-not-disrupt pod.
    use_bits: Vec<u8>,
}

fn gpu_spec() -> impl Strategy<Value = GpuSpec> {
    (0..MODELS.len(), any::<prop::sample::Index>(), prop::collection::vec(0u8..3, 8)).prop_map(
        |(model, g, use_bits)| GpuSpec { model, geometry: g.index(geometries(model).len()), use_bits },
    )
}

fn cluster() -> impl Strategy<Value = Snapshot> {
    let nodes = prop::collection::vec((prop::collection::vec(gpu_spec(), 1..3), 0u8..2), 1..4);
    let pods = prop::collection::vec((0..PROFILES.len(), 1u32..3, 0i32..3, 0u8..3), 0..10);
    let policy = (any::<bool>(), prop::option::of(1u32..3), prop::sample::select(vec![0u32, 600]));
    (nodes, pods, policy).prop_map(|(nodes, pods, (evict, max_gpus, stabilisation_seconds))| {
        let mut snapshot = Snapshot::default();
        for (n, (gpus, zone)) in nodes.into_iter().enumerate() {
            let name = format!("node-{n}");
            let mut node = Node { name: name.clone(), ..Node::default() };
            node.labels.insert("zone".into(), format!("z{zone}"));
            for (i, spec) in gpus.into_iter().enumerate() {
                let m = model(spec.model);
                let g = &geometries(spec.model)[spec.geometry];
                let mut instances = Vec::new();
                for (k, p) in g.instances().iter().enumerate() {
                    let pod = match spec.use_bits[k % spec.use_bits.len()] {
                        0 => None,
                        bits => {
                            let pod_name = format!("run-{n}-{i}-{k}");
                            snapshot.running.push(Pod {
                                namespace: "batch".into(),
                                name: pod_name.clone(),
                                requests: BTreeMap::from([(m.profile_info(p.profile).name.clone(), 1)]),
                                node: Some(name.clone()),
                                do_not_disrupt: bits == 2,
                                ..Pod::default()
                            });
                            Some(geometer_solver::PodKey::new("batch", &pod_name))
                        }
                    };
                    instances.push(Instance {
                        profile: m.profile_info(p.profile).name.clone(),
                        start: p.start,
                        pod,
                    });
                }
                node.gpus.push(Gpu { index: i as u32, model: MODELS[spec.model].into(), instances });
            }
            snapshot.nodes.push(node);
        }
        for (i, (profile, count, priority, zone)) in pods.into_iter().enumerate() {
            snapshot.pending.push(support::pending_pod(i, PROFILES[profile], count, priority, zone));
        }
        snapshot.policy = Some(Policy {
            eviction_allowed: evict,
            max_gpus_changed: max_gpus,
            stabilisation_seconds,
            ..Policy::default()
        });
        snapshot
    })
}

fn geometry_of(model: &GpuModel, list: &[geometer_solver::plan::PlacedName]) -> Geometry {
    Geometry::new(list.iter().map(|p| Placed::new(model.profile(&p.profile).unwrap(), p.start)).collect())
}

/// The properties every plan must have, whichever planner made it.
fn check(snapshot: &Snapshot, plan: &Plan) -> Result<(), TestCaseError> {
    let catalog = Catalog::builtin();
    let evicted: BTreeSet<&str> = plan.evictions.iter().map(|e| e.pod.as_str()).collect();
    let policy = snapshot.policy.clone().unwrap_or_default();
    if !policy.eviction_allowed {
        prop_assert!(evicted.is_empty());
    }
    // Every change the plan lists counts against the limit, the GPUs a window shapes included.
    let changed = plan.changed_gpus().count() as u32;
    if let Some(max) = policy.max_gpus_changed {
        prop_assert!(changed <= max, "{changed} GPUs changed, maxGpusChanged {max}");
    }
    check_window(plan, &policy)?;
    // Slices each node offers to pods that are placed there now.
    let mut free: BTreeMap<(&str, String), i64> = BTreeMap::new();
    for node in &snapshot.nodes {
        for gpu in &node.gpus {
            let m = catalog.find(&gpu.model).unwrap();
            let gp = plan
                .gpus
                .iter()
                .find(|g| g.node == node.name && g.index == gpu.index)
                .expect("every GPU in the plan");
            let to = geometry_of(m, &gp.to);
            prop_assert!(geometry::validate(m, &to).is_ok(), "invalid target {}", to.display(m));
            for inst in &gpu.instances {
                let placed = Placed::new(m.profile(&inst.profile).unwrap(), inst.start);
                match &inst.pod {
                    Some(pod) if !evicted.contains(pod.as_str()) => {
                        prop_assert!(to.contains(&placed), "instance of {pod} dropped without eviction");
                        let dnd = snapshot.running.iter().any(|r| r.key() == *pod && r.do_not_disrupt);
                        prop_assert!(!(dnd && evicted.contains(pod.as_str())));
                    }
                    _ => {}
                }
            }
            let held: Vec<Placed> = gpu
                .instances
                .iter()
                .filter(|i| i.pod.as_ref().is_some_and(|p| !evicted.contains(p.as_str())))
                .map(|i| Placed::new(m.profile(&i.profile).unwrap(), i.start))
                .collect();
            for p in to.instances().iter().filter(|p| !held.contains(p)) {
                *free.entry((node.name.as_str(), m.profile_info(p.profile).name.clone())).or_default() += 1;
            }
        }
    }
    for e in &plan.evictions {
        let pod = snapshot.running.iter().find(|r| r.key() == e.pod).expect("evicted pod is running");
        prop_assert!(!pod.do_not_disrupt);
        for (profile, count) in &pod.requests {
            *free.entry((e.rescheduled_to.as_str(), profile.clone())).or_default() -= *count as i64;
        }
    }
    let mut met = 0;
    for outcome in &plan.pods {
        prop_assert_eq!(outcome.node.is_none(), outcome.reason.is_some(), "node xor reason: {:?}", outcome);
        if let Some(node) = &outcome.node {
            for (profile, count) in &outcome.requests {
                *free.entry((node.as_str(), profile.clone())).or_default() -= *count as i64;
            }
        }
        // Every pod served counts, on new slices or on free ones already there.
        if outcome.node.is_some() {
            met += 1;
        }
    }
    prop_assert_eq!(met, plan.objective.pods_met);
    prop_assert!(plan.pods.len() == snapshot.pending.len());
    // Met demand never exceeds what the slices can hold, on any node and profile.
    for ((node, profile), left) in &free {
        prop_assert!(*left >= 0, "{node} {profile} oversubscribed by {}", -left);
    }
    prop_assert!(plan.objective.demand_met as f64 <= plan.bound + 1e-6);
    Ok(())
}

/// The changes beyond those the objective counts are made only under a stabilisation window,
/// and only on GPUs that had no instance, on nodes with another change.
fn check_window(plan: &Plan, policy: &Policy) -> Result<(), TestCaseError> {
    let changed = plan.changed_gpus().count() as u32;
    prop_assert!(changed >= plan.objective.gpus_changed);
    let extra = changed - plan.objective.gpus_changed;
    if policy.stabilisation_seconds == 0 {
        prop_assert_eq!(extra, 0);
    }
    let beside_another = |g: &GpuPlan| plan.changed_gpus().filter(|o| o.node == g.node).count() > 1;
    let shapeable = plan.changed_gpus().filter(|g| g.from.is_empty() && beside_another(g)).count() as u32;
    prop_assert!(
        extra <= shapeable,
        "{extra} changes beyond the objective's, {shapeable} empty GPUs beside another change"
    );
    Ok(())
}

fn strip_time(mut plan: Plan) -> Plan {
    plan.solve_ms = 0;
    plan
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: support::regressions("tests/planner/properties.proptest-regressions"),
        ..ProptestConfig::default()
    })]

    #[test]
    fn plans_are_valid_and_ilp_is_never_worse_than_greedy(snapshot in cluster()) {
        let options = PlanOptions::default();
        let ilp = geometer_solver::plan(&snapshot, Catalog::builtin(), &options).unwrap();
        let greedy = geometer_solver::greedy::plan(&snapshot, Catalog::builtin(), &options).unwrap();
        check(&snapshot, &ilp)?;
        check(&snapshot, &greedy)?;
        prop_assert!(greedy.evictions.is_empty(), "greedy never evicts");
        prop_assert_ne!(
            ilp.objective.better(&greedy.objective),
            std::cmp::Ordering::Less,
            "ILP {:?} below greedy {:?}\n{}\n{}", ilp.objective, greedy.objective, ilp.render_table(), greedy.render_table()
        );
        let again = geometer_solver::plan(&snapshot, Catalog::builtin(), &options).unwrap();
        prop_assert_eq!(strip_time(again), strip_time(ilp));
    }

    #[test]
    fn snapshot_parser_never_panics(text in ".{0,200}") {
        let _ = serde_saphyr::from_str::<Snapshot>(&text);
        let _ = serde_json::from_str::<Snapshot>(&text);
    }

    #[test]
    fn snapshot_parser_never_panics_on_near_valid_yaml(
        name in "[a-z]{0,4}", model in "[A-Z0-9-]{0,10}", start in any::<i64>(), count in any::<i64>()
    ) {
        let text = format!(
            "nodes: [{{name: {name:?}, gpus: [{{index: 0, model: {model:?}, instances: [{{profile: 1g.5gb, start: {start}}}]}}]}}]\n\
             pending: [{{namespace: a, name: b, requests: {{1g.5gb: {count}}}}}]"
        );
        if let Ok(s) = serde_saphyr::from_str::<Snapshot>(&text) {
            let _ = geometer_solver::plan(&s, Catalog::builtin(), &PlanOptions::default());
        }
    }
}
