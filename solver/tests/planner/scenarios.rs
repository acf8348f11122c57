//! End-to-end planner scenarios: small clusters where the right answer is known.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanError, PlanOptions, SliceSource, SolverUsed, UnmetReason};
use geometer_solver::snapshot::Snapshot;

fn snapshot(yaml: &str) -> Snapshot {
    serde_saphyr::from_str(yaml).expect("test snapshot parses")
}

fn ilp(s: &Snapshot) -> Plan {
    geometer_solver::plan(s, Catalog::builtin(), &PlanOptions::default()).expect("plans")
}

fn greedy(s: &Snapshot) -> Plan {
    geometer_solver::greedy::plan(s, Catalog::builtin(), &PlanOptions::default()).expect("plans")
}

fn outcome<'p>(plan: &'p Plan, pod: &str) -> &'p geometer_solver::plan::PodOutcome {
    plan.pods.iter().find(|p| p.pod == pod).unwrap_or_else(|| panic!("{pod} in plan"))
}

#[test]
fn empty_gpu_is_partitioned_for_pending_pods() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus: [{index: 0, model: A100-40GB}]
pending:
- {namespace: ml, name: one, requests: {1g.5gb: 1}}
- {namespace: ml, name: two, requests: {1g.5gb: 2}}
- {namespace: ml, name: big, requests: {3g.20gb: 1}}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.solver, SolverUsed::Ilp);
    assert_eq!(plan.objective.pods_met, 3, "{}", plan.render_table());
    assert!(plan
        .pods
        .iter()
        .all(|p| p.node.as_deref() == Some("a") && p.placement == SliceSource::NewSlices));
    let gpu = &plan.gpus[0];
    assert!(gpu.changed);
    assert!(gpu.to.iter().filter(|p| p.profile == "1g.5gb").count() >= 3);
    assert!(gpu.to.iter().any(|p| p.profile == "3g.20gb"));
    assert_eq!(plan.gap, 0.0);
}

#[test]
fn a_pod_that_fits_free_slices_takes_them_and_changes_nothing() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - index: 0
    model: A100-40GB
    instances: [{profile: 3g.20gb, start: 0}, {profile: 3g.20gb, start: 4, pod: ml/busy}]
pending:
- {namespace: ml, name: fits, requests: {3g.20gb: 1}}
"#,
    );
    for plan in [ilp(&s), greedy(&s)] {
        let p = outcome(&plan, "ml/fits");
        assert_eq!(p.placement, SliceSource::ExistingSlices);
        assert_eq!(p.node.as_deref(), Some("a"));
        assert!(!plan.gpus[0].changed, "nothing to change: {}", plan.render_table());
        assert_eq!(plan.objective.demand_met, 1, "served, on the slice already there");
        assert_eq!(plan.objective.pods_met, 1);
    }
}

#[test]
fn every_pod_left_out_says_why() {
    let s = snapshot(
        r#"
nodes:
- name: a
  labels: {pool: a100}
  freeCpuMillis: 4000
  gpus: [{index: 0, model: A100-40GB}]
pending:
- {namespace: ml, name: unknown, requests: {5g.50gb: 1}}
- {namespace: ml, name: media, requests: {1g.5gb+me: 1}}
- {namespace: ml, name: wrong-pool, requests: {1g.5gb: 1}, nodeSelector: {pool: h100}}
- {namespace: ml, name: hungry, requests: {1g.5gb: 1}, cpuMillis: 8000}
- {namespace: ml, name: h100-only, requests: {1g.10gb: 8}}
"#,
    );
    let plan = ilp(&s);
    assert!(
        matches!(&outcome(&plan, "ml/unknown").reason, Some(UnmetReason::UnknownProfile { profile }) if profile == "5g.50gb")
    );
    assert!(
        matches!(&outcome(&plan, "ml/media").reason, Some(UnmetReason::ProfileNotAllowed { profile }) if profile == "1g.5gb+me")
    );
    match &outcome(&plan, "ml/wrong-pool").reason {
        Some(UnmetReason::NoEligibleNode { detail }) => {
            assert!(detail.contains("nodeSelector") && detail.contains("pool=h100"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    match &outcome(&plan, "ml/hungry").reason {
        Some(UnmetReason::NoEligibleNode { detail }) => assert!(detail.contains("cpu"), "{detail}"),
        other => panic!("{other:?}"),
    }
    // 8 x 1g.10gb exceed one A100-40GB (at most 4 fit).
    assert!(matches!(&outcome(&plan, "ml/h100-only").reason, Some(UnmetReason::Capacity { .. })));
    assert!(plan.pods.iter().all(|p| p.node.is_none() == p.reason.is_some()));
}

const BUSY_7G: &str = r#"
nodes:
- name: a
  gpus:
  - index: 0
    model: A100-40GB
    instances: [{profile: 7g.40gb, start: 0, pod: batch/whole}]
- name: b
  gpus: [{index: 0, model: A100-40GB, instances: [{profile: 3g.20gb, start: 0, pod: batch/half}]}]
running:
- {namespace: batch, name: whole, node: a, requests: {7g.40gb: 1}}
- {namespace: batch, name: half, node: b, requests: {3g.20gb: 1}}
pending:
- {namespace: ml, name: p0, priority: 100, requests: {3g.20gb: 1}, nodeSelector: {kubernetes.io/hostname: a}}
- {namespace: ml, name: p1, priority: 100, requests: {3g.20gb: 1}, nodeSelector: {kubernetes.io/hostname: a}}
"#;

#[test]
fn without_a_policy_nothing_is_evicted() {
    let mut s = snapshot(BUSY_7G);
    for n in &mut s.nodes {
        n.labels.insert("kubernetes.io/hostname".into(), n.name.clone());
    }
    let plan = ilp(&s);
    assert!(plan.evictions.is_empty());
    assert_eq!(plan.objective.pods_met, 0);
    assert!(plan.gpus.iter().all(|g| !g.changed));
}

#[test]
fn eviction_when_allowed_moves_the_pod_and_meets_demand() {
    let mut s = snapshot(BUSY_7G);
    for n in &mut s.nodes {
        n.labels.insert("kubernetes.io/hostname".into(), n.name.clone());
    }
    s.policy = Some(geometer_solver::snapshot::Policy { eviction_allowed: true, ..Default::default() });
    // Swapping the two batch pods (7g to b, 3g to a) frees one 3g.20gb on a: one pod met.
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 1, "{}", plan.render_table());
    let moved: Vec<(&str, &str)> =
        plan.evictions.iter().map(|e| (e.pod.as_str(), e.rescheduled_to.as_str())).collect();
    assert_eq!(moved, [("batch/half", "a"), ("batch/whole", "b")]);
    // With b free, the 7g pod moves there and both 3g pods fit on a.
    s.nodes[1].gpus[0].instances.clear();
    s.running.retain(|p| p.name != "half");
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 2, "{}", plan.render_table());
    assert_eq!(plan.evictions.len(), 1);
    assert_eq!(plan.evictions[0].pod, "batch/whole");
    assert_eq!(plan.evictions[0].rescheduled_to, "b");
    let b = plan.gpus.iter().find(|g| g.node == "b").unwrap();
    assert!(b.to.iter().any(|p| p.profile == "7g.40gb"));

    // do-not-disrupt wins over the policy.
    s.running[0].do_not_disrupt = true;
    assert_eq!(s.running[0].name, "whole");
    let plan = ilp(&s);
    assert!(plan.evictions.is_empty());
    assert_eq!(plan.objective.pods_met, 0);
}

#[test]
fn eviction_allowed_but_not_needed_evicts_nobody() {
    let mut s = snapshot(BUSY_7G);
    // Pods that may land on b: its free half meets them without moving anyone.
    for p in &mut s.pending {
        p.node_selector.clear();
    }
    let without = ilp(&s);
    s.policy = Some(geometer_solver::snapshot::Policy { eviction_allowed: true, ..Default::default() });
    let with = ilp(&s);
    assert_eq!(with.objective.pods_met, 1, "{}", with.render_table());
    assert!(with.evictions.is_empty(), "{}", with.render_table());
    assert_eq!(with.objective, without.objective);
    assert_eq!(with.gpus, without.gpus);
    assert_eq!(with.gap, 0.0);
}

/// Greedy walks nodes by name and fills `a` with the 1g slices everyone can use; the 3g pods
/// that only fit on `a` then stay unmet. The ILP puts the 1g slices on `b`.
#[test]
fn ilp_meets_demand_greedy_misses() {
    let s = snapshot(
        r#"
nodes:
- {name: a, labels: {zone: x}, gpus: [{index: 0, model: A100-40GB}]}
- {name: b, labels: {zone: y}, gpus: [{index: 0, model: A100-40GB}]}
pending:
- {namespace: ml, name: big-0, requests: {3g.20gb: 1}, nodeSelector: {zone: x}}
- {namespace: ml, name: big-1, requests: {3g.20gb: 1}, nodeSelector: {zone: x}}
- {namespace: ml, name: s0, requests: {1g.5gb: 1}}
- {namespace: ml, name: s1, requests: {1g.5gb: 1}}
- {namespace: ml, name: s2, requests: {1g.5gb: 1}}
- {namespace: ml, name: s3, requests: {1g.5gb: 1}}
- {namespace: ml, name: s4, requests: {1g.5gb: 1}}
- {namespace: ml, name: s5, requests: {1g.5gb: 1}}
- {namespace: ml, name: s6, requests: {1g.5gb: 1}}
"#,
    );
    let g = greedy(&s);
    let i = ilp(&s);
    assert_eq!(g.objective.pods_met, 7, "{}", g.render_table());
    assert_eq!(i.objective.pods_met, 9, "{}", i.render_table());
    assert_eq!(outcome(&i, "ml/big-0").node.as_deref(), Some("a"));
    assert_eq!(outcome(&i, "ml/s0").node.as_deref(), Some("b"));
}

#[test]
fn policy_limits_hold() {
    let mut s = snapshot(
        r#"
nodes:
- {name: a, gpus: [{index: 0, model: H100-80GB}, {index: 1, model: H100-80GB}]}
- {name: b, gpus: [{index: 0, model: H100-80GB}]}
pending:
- {namespace: ml, name: w0, requests: {7g.80gb: 1}}
- {namespace: ml, name: w1, requests: {7g.80gb: 1}}
- {namespace: ml, name: w2, requests: {7g.80gb: 1}}
"#,
    );
    assert_eq!(ilp(&s).objective.pods_met, 3);
    s.policy = Some(geometer_solver::snapshot::Policy { max_gpus_changed: Some(2), ..Default::default() });
    let plan = ilp(&s);
    assert_eq!(plan.objective.gpus_changed, 2);
    assert_eq!(plan.objective.pods_met, 2);
    let left = plan.pods.iter().find(|p| p.node.is_none()).unwrap();
    assert!(matches!(&left.reason, Some(UnmetReason::PolicyLimit { limit }) if limit == "maxGpusChanged=2"));
    s.policy = Some(geometer_solver::snapshot::Policy { max_nodes_changed: Some(1), ..Default::default() });
    let plan = ilp(&s);
    let nodes: std::collections::BTreeSet<&str> = plan.changed_gpus().map(|g| g.node.as_str()).collect();
    assert_eq!(nodes.len(), 1);
    assert_eq!(plan.objective.pods_met, 2, "node a has two GPUs: {}", plan.render_table());
}

#[test]
fn higher_priority_wins_scarce_slices() {
    let s = snapshot(
        r#"
nodes:
- {name: a, gpus: [{index: 0, model: A100-40GB}]}
pending:
- {namespace: ml, name: low, priority: 0, requests: {7g.40gb: 1}}
- {namespace: ml, name: high, priority: 1000, requests: {4g.20gb: 1}}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(outcome(&plan, "ml/high").node.as_deref(), Some("a"));
    assert!(outcome(&plan, "ml/low").node.is_none());
}

#[test]
fn errors_name_field_and_value() {
    let s = snapshot(
        r#"
nodes:
- {name: a, gpus: [{index: 0, model: Z9000}]}
"#,
    );
    let err = geometer_solver::plan(&s, Catalog::builtin(), &PlanOptions::default()).unwrap_err();
    let PlanError::Snapshot(e) = &err;
    assert_eq!(e.field, "nodes[0].gpus[0].model");
    assert_eq!(e.value, "Z9000");
    assert!(err.to_string().contains("--catalog"), "{err}");

    let s = snapshot(
        r#"
nodes:
- {name: a, gpus: [{index: 0, model: A100-40GB, instances: [{profile: 3g.20gb, start: 2}]}]}
"#,
    );
    let err = geometer_solver::plan(&s, Catalog::builtin(), &PlanOptions::default()).unwrap_err().to_string();
    assert!(err.contains("nodes[0].gpus[0].instances") && err.contains("3g.20gb@2"), "{err}");

    let s = snapshot("pending: [{namespace: ml, name: x, requests: {1g.5gb: 0}}]");
    let err = geometer_solver::plan(&s, Catalog::builtin(), &PlanOptions::default()).unwrap_err().to_string();
    assert!(err.contains("pending[0].requests.1g.5gb"), "{err}");
}

#[test]
fn unknown_snapshot_fields_are_rejected_by_name() {
    let err = serde_saphyr::from_str::<Snapshot>("nodes: [{name: a, gpuz: []}]").unwrap_err().to_string();
    assert!(err.contains("gpuz"), "{err}");
}

/// Free slices already there are the solver's to use or to repartition: handing them to pods
/// before solving (the first free 2g.20gb to the first 2g.20gb pod) pinned A's 2g.20gb and kept
/// A from becoming the 7g.80gb the low-priority pod needed.
#[test]
fn free_slices_already_there_are_a_choice_of_the_solver_not_a_reservation() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus: [{index: 0, model: H100-80GB, instances: [{profile: 4g.40gb, start: 0}, {profile: 2g.20gb, start: 4}]}]
- name: b
  gpus: [{index: 0, model: H100-80GB}]
- name: c
  gpus: [{index: 0, model: H100-80GB, instances: [{profile: 1g.20gb, start: 4}, {profile: 2g.20gb, start: 0}]}]
pending:
- {namespace: ml, name: high-2g, priority: 100, requests: {2g.20gb: 1}}
- {namespace: ml, name: high-7g, priority: 100, requests: {7g.80gb: 1}}
- {namespace: ml, name: low-2g, priority: 0, requests: {2g.20gb: 1}}
- {namespace: ml, name: low-7g, priority: 0, requests: {7g.80gb: 1}}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 4, "{}", plan.render_table());
    assert_eq!(plan.objective.demand_met, 2 + 2 + 1 + 1);
    assert!(plan.evictions.is_empty());
    assert_eq!(plan.gap, 0.0, "{}", plan.render_table());
    for pod in ["ml/high-7g", "ml/low-7g"] {
        assert_eq!(outcome(&plan, pod).placement, SliceSource::NewSlices, "{pod}");
    }
    // A stays a 7g.80gb-to-be (its 2g.20gb is not handed out first); B or C is the other.
    let sevens: Vec<&str> = plan
        .gpus
        .iter()
        .filter(|g| g.to.iter().any(|p| p.profile == "7g.80gb"))
        .map(|g| g.node.as_str())
        .collect();
    assert_eq!(sevens.len(), 2, "{}", plan.render_table());
    assert!(sevens.contains(&"a"), "{}", plan.render_table());
}

#[test]
fn cpu_left_over_on_each_node_is_not_pooled_into_a_pod_in_the_bound() {
    // Three nodes with 3 cores free each: 9 cores in all, but one 2-core pod per node. Pooled
    // CPU would let the bound count four pods; per node, three is the most any plan places.
    let node = |name: &str| {
        format!("- name: {name}\n  freeCpuMillis: 3000\n  gpus: [{{index: 0, model: A100-40GB}}]\n")
    };
    let pods: String = (0..6)
        .map(|i| format!("- {{namespace: ml, name: p{i}, requests: {{1g.5gb: 1}}, cpuMillis: 2000}}\n"))
        .collect();
    let s = snapshot(&format!("nodes:\n{}{}{}pending:\n{pods}", node("a"), node("b"), node("c")));
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 3, "{}", plan.render_table());
    assert_eq!(plan.bound, 3.0, "the bound counts what fits on each node");
    assert_eq!(plan.gap, 0.0);
}

#[test]
fn an_evicted_pod_gives_its_cpu_back_to_its_node() {
    // One core free on the node, and the 1g pod on GPU 0 holds another. Moving it to GPU 1 lets
    // GPU 0 become the 7g.40gb: the moved pod needs its core again and the new pod one more,
    // which fits only if evicting the pod gives its core back.
    let s = snapshot(
        r#"
nodes:
- name: a
  freeCpuMillis: 1000
  freeMemoryBytes: 1073741824
  gpus:
  - index: 0
    model: A100-40GB
    instances: [{profile: 1g.5gb, start: 0, pod: batch/small}]
  - index: 1
    model: A100-40GB
    instances: [{profile: 1g.5gb, start: 6, pod: batch/pinned}]
pending:
- {namespace: ml, name: big, requests: {7g.40gb: 1}, cpuMillis: 1000, memoryBytes: 1073741824}
running:
- {namespace: batch, name: small, requests: {1g.5gb: 1}, node: a, cpuMillis: 1000, memoryBytes: 1073741824}
- {namespace: batch, name: pinned, requests: {1g.5gb: 1}, node: a, cpuMillis: 1000, doNotDisrupt: true}
policy: {evictionAllowed: true}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 1, "{}", plan.render_table());
    assert_eq!(outcome(&plan, "ml/big").node.as_deref(), Some("a"));
    let moved: Vec<&str> = plan.evictions.iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(moved, ["batch/small"]);
    assert_eq!((plan.bound, plan.gap), (1.0, 0.0));
}

#[test]
fn moving_a_pod_off_a_node_makes_room_for_one_that_asks_more_cpu_than_is_free() {
    // node-0 has 1 core free; p0 asks 2 and may only run there. Moving the 1-core pod to
    // node-1 frees the second core, even though its instance stays (found by the exact-optimiser
    // property test: the node used to count as ineligible and the eviction as needless).
    let s = snapshot(
        r#"
nodes:
- name: node-0
  labels: {zone: z1}
  freeCpuMillis: 1000
  gpus:
  - index: 0
    model: A100-40GB
    instances: [{profile: 1g.10gb, start: 6, pod: batch/mover}]
- name: node-1
  labels: {zone: z0}
  gpus: [{index: 0, model: A100-40GB}]
pending:
- {namespace: ml, name: p0, requests: {1g.5gb: 1}, cpuMillis: 2000, nodeSelector: {zone: z1}}
running:
- {namespace: batch, name: mover, requests: {1g.10gb: 1}, cpuMillis: 1000, node: node-0}
policy: {evictionAllowed: true}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 1, "{}", plan.render_table());
    assert_eq!(outcome(&plan, "ml/p0").node.as_deref(), Some("node-0"));
    let moved: Vec<(&str, &str)> =
        plan.evictions.iter().map(|e| (e.pod.as_str(), e.rescheduled_to.as_str())).collect();
    assert_eq!(moved, [("batch/mover", "node-1")]);
    // Without eviction the node has too little CPU, and the plan says so.
    let mut kept = s.clone();
    kept.policy = None;
    let plan = ilp(&kept);
    assert_eq!(plan.objective.pods_met, 0);
    assert!(
        matches!(outcome(&plan, "ml/p0").reason, Some(UnmetReason::NoEligibleNode { .. })),
        "{}",
        plan.render_table()
    );
}

#[test]
fn past_32_nodes_short_of_cpu_the_bound_still_counts_what_evictions_give_back() {
    // The scenario above on 34 nodes: too many to model one by one, so the plan's program pools
    // them and leaves out the CPU evictions give back. The bound must still count it, and the
    // plan must say what it did.
    let mut yaml = String::from("nodes:\n- name: spare\n  gpus:\n");
    for g in 0..9 {
        yaml += &format!("  - {{index: {g}, model: A100-40GB}}\n");
    }
    let (mut pending, mut running) = (String::new(), String::new());
    for i in 0..34 {
        yaml += &format!(
            "- name: n{i}\n  labels: {{zone: z{i}}}\n  freeCpuMillis: 1000\n  gpus:\n  - {{index: 0, model: A100-40GB, instances: [{{profile: 1g.10gb, start: 6, pod: batch/m{i}}}]}}\n"
        );
        pending += &format!(
            "- {{namespace: ml, name: p{i}, requests: {{1g.5gb: 1}}, cpuMillis: 2000, nodeSelector: {{zone: z{i}}}}}\n"
        );
        running += &format!(
            "- {{namespace: batch, name: m{i}, requests: {{1g.10gb: 1}}, cpuMillis: 1000, node: n{i}}}\n"
        );
    }
    let s =
        snapshot(&format!("{yaml}pending:\n{pending}running:\n{running}policy: {{evictionAllowed: true}}\n"));
    let plan = ilp(&s);
    assert_eq!(plan.bound, 34.0, "{}", plan.render_table());
    assert!(plan.objective.pods_met <= 34);
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("CPU or memory may run out on 34 nodes") && n.contains("the bound does")),
        "{:?}",
        plan.notes
    );
}

#[test]
fn a_node_that_limits_memory_never_pools_with_one_that_does_not() {
    // node-0 has memory for one pod; node-1 has no limit but its GPU is a whole 7g.80gb in use.
    // Pooled together, the group would have no memory limit and the plan would count both pods
    // on node-0 (node-0 is modelled alone here; past 32 such nodes it would pool, but only with
    // nodes that limit memory too). The optimum moves the 7g pod to node-0 and makes node-1's
    // GPU 1g slices.
    let s = snapshot(
        r#"
nodes:
- name: node-0
  labels: {zone: z0}
  freeMemoryBytes: 1073741824
  gpus: [{index: 0, model: H100-80GB}]
- name: node-1
  labels: {zone: z0}
  gpus:
  - index: 0
    model: H100-80GB
    instances: [{profile: 7g.80gb, start: 0, pod: batch/whole}]
pending:
- {namespace: ml, name: p0, requests: {1g.10gb: 1}, memoryBytes: 1073741824}
- {namespace: ml, name: p1, requests: {1g.10gb: 1}, memoryBytes: 1073741824, nodeSelector: {zone: z0}}
running:
- {namespace: batch, name: whole, requests: {7g.80gb: 1}, node: node-1}
policy: {evictionAllowed: true}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 2, "{}", plan.render_table());
    let moved: Vec<(&str, &str)> =
        plan.evictions.iter().map(|e| (e.pod.as_str(), e.rescheduled_to.as_str())).collect();
    assert_eq!(moved, [("batch/whole", "node-0")]);
    assert_eq!(plan.gap, 0.0);
}

#[test]
fn an_eviction_whose_instance_goes_to_another_pod_survives_undoing_an_unused_change() {
    // The optimum moves the 3g pod off node-0 so that p0 (zone z0 only) takes its instance,
    // and moves the 7g pod to node-0 so that node-1 can make a 1g.5gb for p1. The 3g pod's
    // GPU gets no new instance anyone uses; undoing that change must not undo its eviction.
    let s = snapshot(
        r#"
nodes:
- name: node-0
  labels: {zone: z0}
  gpus:
  - index: 0
    model: A100-40GB
    instances: [{profile: 3g.20gb, start: 4, pod: batch/mover}, {profile: 1g.5gb, start: 0, pod: batch/small}]
  - {index: 1, model: A100-40GB}
- name: node-1
  labels: {zone: z1}
  gpus:
  - index: 0
    model: A100-40GB
    instances: [{profile: 7g.40gb, start: 0, pod: batch/whole}]
pending:
- {namespace: ml, name: p0, requests: {3g.20gb: 1}, nodeSelector: {zone: z0}}
- {namespace: ml, name: p1, requests: {1g.5gb: 1}, nodeSelector: {zone: z1}}
running:
- {namespace: batch, name: mover, requests: {3g.20gb: 1}, node: node-0}
- {namespace: batch, name: small, requests: {1g.5gb: 1}, node: node-0}
- {namespace: batch, name: whole, requests: {7g.40gb: 1}, node: node-1}
policy: {evictionAllowed: true}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 2, "{}", plan.render_table());
    assert_eq!(plan.evictions.len(), 2);
    assert_eq!(outcome(&plan, "ml/p0").node.as_deref(), Some("node-0"));
    assert!(!plan.gpus.iter().any(|g| g.node == "node-0" && g.index == 0 && g.changed));
    // The review draws each changed GPU as its placement units, before and after.
    let review = plan.render_table();
    let whole = format!("[{:^70}]", "7g.40gb");
    assert!(review.contains(&format!("before: {whole}")), "{review}");
    assert!(review.contains(&format!("after:  {whole}")), "{review}");
}

/// A slice that fits beside the pod on a GPU in use goes there, not on an empty GPU: the empty
/// one stays a free range of its whole grid (a `7g.80gb` still fits it). Both plans change one
/// GPU; the program's free ranges level scores an empty GPU 0, below a carved one.
#[test]
fn a_gpu_in_use_is_carved_before_an_empty_one() {
    let s = snapshot(
        r#"
nodes:
- name: a-empty
  gpus: [{index: 0, model: A100-80GB}]
- name: b-busy
  gpus: [{index: 0, model: A100-80GB, instances: [{profile: 4g.40gb, start: 0, pod: batch/half}]}]
running:
- {namespace: batch, name: half, node: b-busy, requests: {4g.40gb: 1}}
pending:
- {namespace: ml, name: p, requests: {3g.40gb: 1}}
"#,
    );
    let plan = ilp(&s);
    let table = plan.render_table();
    assert_eq!(outcome(&plan, "ml/p").node.as_deref(), Some("b-busy"), "{table}");
    assert!(plan.gpus.iter().filter(|g| g.node == "a-empty").all(|g| !g.changed), "{table}");
}
