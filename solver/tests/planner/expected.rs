//! Expected pods (`Snapshot::expected`): slices prepared on free capacity for the pods a
//! forecast says come next, where they could land, after the pending pods and never at the
//! price of an eviction.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanOptions};
use geometer_solver::snapshot::{Pod, Snapshot};

fn snapshot(yaml: &str) -> Snapshot {
    serde_saphyr::from_str(yaml).expect("test snapshot parses")
}

fn ilp(s: &Snapshot) -> Plan {
    geometer_solver::plan(s, Catalog::builtin(), &PlanOptions::default()).expect("plans")
}

fn expected(profile: &str, count: usize) -> Vec<Pod> {
    (0..count)
        .map(|i| Pod {
            namespace: "ml".into(),
            name: format!("next-{i}"),
            requests: [(profile.to_string(), 1)].into(),
            ..Pod::default()
        })
        .collect()
}

fn spare(plan: &Plan, profile: &str) -> usize {
    // Every slice of the profile in the targets, less the ones pending pods get.
    let total: usize = plan.gpus.iter().map(|g| g.to.iter().filter(|p| p.profile == profile).count()).sum();
    let taken: usize = plan
        .pods
        .iter()
        .filter(|p| p.node.is_some())
        .map(|p| p.requests.get(profile).copied().unwrap_or(0) as usize)
        .sum();
    total - taken
}

const FOUR_EMPTY_GPUS: &str = r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: A100-80GB}
  - {index: 1, model: A100-80GB}
  - {index: 2, model: A100-80GB}
  - {index: 3, model: A100-80GB}
pending:
- {namespace: ml, name: one, requests: {1g.10gb: 1}}
"#;

#[test]
fn expected_slices_are_prepared_on_free_gpus_beyond_the_pending_pods() {
    let mut s = snapshot(FOUR_EMPTY_GPUS);
    let plain = ilp(&s);
    assert_eq!(
        plain.objective.gpus_changed,
        1,
        "one GPU holds the pod and six spare 1g.10gb: {}",
        plain.render_table()
    );

    s.expected = expected("1g.10gb", 9);
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 1, "{}", plan.render_table());
    assert_eq!(plan.objective.expected, 9, "{}", plan.render_table());
    // Nine spare 1g.10gb need a second GPU, not a third.
    assert_eq!(plan.objective.gpus_changed, 2, "{}", plan.render_table());
    assert!(spare(&plan, "1g.10gb") >= 9, "{}", plan.render_table());
    assert_eq!(plan.pods.len(), 1, "expected pods are not pods of the plan");
    assert!(plan.render_table().contains("expected pods given room 9"), "{}", plan.render_table());
}

#[test]
fn expected_demand_ranks_below_pending_pods() {
    // One free GPU: the pending 4g.40gb gets it although two 7g.80gb are expected.
    let mut s = snapshot(
        r#"
nodes:
- name: a
  gpus: [{index: 0, model: A100-80GB}]
pending:
- {namespace: ml, name: four, requests: {4g.40gb: 1}}
expected:
- {namespace: ml, name: next, requests: {7g.80gb: 1}}
- {namespace: ml, name: next, requests: {7g.80gb: 1}}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 1, "{}", plan.render_table());
    assert_eq!(plan.objective.expected, 0);
    // Without pending pods the forecast has the GPU to itself: one 7g.80gb fits.
    s.pending.clear();
    let idle = ilp(&s);
    assert_eq!((idle.objective.gpus_changed, idle.objective.expected), (1, 1), "{}", idle.render_table());
    assert!(idle.pods.is_empty());
}

#[test]
fn expected_demand_never_evicts() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - index: 0
    model: A100-80GB
    instances: [{profile: 4g.40gb, start: 0, pod: ml/busy}]
running:
- {namespace: ml, name: busy, node: a, requests: {4g.40gb: 1}}
pending:
- {namespace: ml, name: small, requests: {1g.10gb: 1}}
expected:
- {namespace: ml, name: next, requests: {7g.80gb: 1}}
policy: {evictionAllowed: true}
"#,
    );
    let plan = ilp(&s);
    assert!(plan.evictions.is_empty(), "a forecast is no reason to evict: {}", plan.render_table());
    assert_eq!(plan.objective.pods_met, 1, "{}", plan.render_table());
}

#[test]
fn a_bound_expected_pod_is_refused_by_name() {
    let mut s = snapshot(FOUR_EMPTY_GPUS);
    s.expected = expected("1g.10gb", 1);
    s.expected[0].node = Some("a".into());
    let err = geometer_solver::plan(&s, Catalog::builtin(), &PlanOptions::default()).unwrap_err().to_string();
    assert!(err.contains("expected[0].node"), "{err}");
}

#[test]
fn an_expected_pod_of_an_unknown_profile_gets_nothing() {
    // As for a pending pod, an unknown profile is the pod's problem, not the snapshot's.
    let mut s = snapshot(FOUR_EMPTY_GPUS);
    s.expected = expected("9g.99gb", 1);
    let plan = ilp(&s);
    assert_eq!(
        (plan.objective.pods_met, plan.objective.expected, plan.objective.gpus_changed),
        (1, 0, 1),
        "{}",
        plan.render_table()
    );
}

#[test]
fn expected_pods_get_room_only_where_they_could_land() {
    // Two nodes with a free GPU each; the expected pod may only run on pool b.
    let s = snapshot(
        r#"
nodes:
- name: a
  labels: {pool: a}
  gpus: [{index: 0, model: A100-80GB}]
- name: b
  labels: {pool: b}
  gpus: [{index: 0, model: A100-80GB}]
pending:
- {namespace: ml, name: now, requests: {4g.40gb: 1}}
expected:
- {namespace: ml, name: next, requests: {4g.40gb: 1}, nodeSelector: {pool: b}}
"#,
    );
    let plan = ilp(&s);
    assert_eq!((plan.objective.pods_met, plan.objective.expected), (1, 1), "{}", plan.render_table());
    // The pending pod goes to a, leaving b's GPU for the one that may only use b.
    assert_eq!(plan.pods[0].node.as_deref(), Some("a"), "{}", plan.render_table());
    assert!(plan.gpus.iter().all(|g| g.changed), "{}", plan.render_table());
}

#[test]
fn an_expected_pod_never_holds_a_free_slice_a_pending_pod_needs() {
    // Seven free 1g.10gb; the pending 4g.40gb needs four of them destroyed. A 1g.10gb pod is
    // expected: it must not pin one of those slices and leave the real pod without room.
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - index: 0
    model: A100-80GB
    instances:
    - {profile: 1g.10gb, start: 0}
    - {profile: 1g.10gb, start: 1}
    - {profile: 1g.10gb, start: 2}
    - {profile: 1g.10gb, start: 3}
    - {profile: 1g.10gb, start: 4}
    - {profile: 1g.10gb, start: 5}
    - {profile: 1g.10gb, start: 6}
pending:
- {namespace: ml, name: four, requests: {4g.40gb: 1}}
expected:
- {namespace: ml, name: next, requests: {1g.10gb: 1}}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.objective.pods_met, 1, "{}", plan.render_table());
    assert_eq!(
        plan.objective.expected,
        1,
        "a 1g.10gb stays free beside the 4g.40gb: {}",
        plan.render_table()
    );
}
