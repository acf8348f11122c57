//! Gangs, all or nothing: a gang that cannot reach its minimum changes no GPU and evicts no pod
//! (the same pods without a gang get what slices there are); a gang that can is planned whole,
//! before pods that would leave it short; members already running count; the plan says why a
//! gang is left out.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanOptions, UnmetReason};
use geometer_solver::snapshot::Snapshot;

fn snapshot(yaml: &str) -> Snapshot {
    serde_saphyr::from_str(yaml).expect("test snapshot parses")
}

fn ilp(s: &Snapshot) -> Plan {
    geometer_solver::plan(s, Catalog::builtin(), &PlanOptions::default()).unwrap()
}

fn greedy(s: &Snapshot) -> Plan {
    geometer_solver::greedy::plan(s, Catalog::builtin(), &PlanOptions::default()).unwrap()
}

/// One H100 fully held by pods that must not move, one free: at most 7 1g.10gb slices now.
const ONE_FREE_GPU: &str = r#"
policy: {evictionAllowed: true}
nodes:
- name: a
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: 4g.40gb, start: 0, pod: ml/keep}, {profile: 3g.40gb, start: 4, pod: ml/keep-2}]}
  - {index: 1, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}
running:
- {namespace: ml, name: keep, node: a, requests: {4g.40gb: 1}, doNotDisrupt: true}
- {namespace: ml, name: keep-2, node: a, requests: {3g.40gb: 1}, doNotDisrupt: true}
"#;

/// `n` pending workers asking for a 1g.10gb each, in gang `ml/train` when `gang` says so.
fn workers(n: u32, gang: Option<(u32, u32)>) -> String {
    let mut text = String::from("pending:\n");
    for i in 0..n {
        let member = if gang.is_some() { ", gang: ml/train" } else { "" };
        text.push_str(&format!("- {{namespace: ml, name: worker-{i}, requests: {{1g.10gb: 1}}{member}}}\n"));
    }
    if let Some((min, counted)) = gang {
        text.push_str(&format!(
            "gangs:\n- {{name: ml/train, minMembers: {min}, membersCounted: {counted}}}\n"
        ));
    }
    text
}

#[test]
fn a_gang_that_cannot_be_completed_changes_no_gpu_while_lone_pods_get_partial_slices() {
    let alone = snapshot(&format!("{ONE_FREE_GPU}{}", workers(8, None)));
    let gang = snapshot(&format!("{ONE_FREE_GPU}{}", workers(8, Some((8, 0)))));
    for (alone, gang) in [(ilp(&alone), ilp(&gang)), (greedy(&alone), greedy(&gang))] {
        assert_eq!(alone.objective.pods_met, 7, "pods on their own take the 7 slices there are");
        assert_eq!(alone.changed_gpus().count(), 1);

        let table = gang.render_table();
        assert_eq!(gang.changed_gpus().count(), 0, "no GPU changes for a gang that stays short: {table}");
        assert!(gang.evictions.is_empty(), "{table}");
        assert_eq!(gang.objective.pods_met, 0, "{table}");
        for pod in &gang.pods {
            assert_eq!(pod.node, None, "{table}");
            assert_eq!(
                pod.reason,
                Some(UnmetReason::Gang {
                    detail: "gang ml/train: 7 of 8 placeable on eligible nodes; needs 8".into()
                }),
                "{table}"
            );
        }
        let outcome = &gang.gangs[0];
        assert_eq!((outcome.min_members, outcome.pending, outcome.placed), (8, 8, 0));
        assert!(!outcome.complete());
        assert!(
            table.contains(
                "gang ml/train: 0 of 8 members placed (7 of 8 placeable on eligible nodes; needs 8)"
            ),
            "{table}"
        );
    }
}

#[test]
fn members_already_running_count_towards_the_minimum() {
    // One of eight already runs: seven more complete the gang.
    let s = snapshot(&format!("{ONE_FREE_GPU}{}", workers(7, Some((8, 1)))));
    for plan in [ilp(&s), greedy(&s)] {
        assert_eq!(plan.objective.pods_met, 7, "{}", plan.render_table());
        assert!(plan.gangs[0].complete() && plan.gangs[0].reason.is_none());
    }
}

#[test]
fn a_gang_no_geometry_could_hold_says_so() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}
pending:
- {namespace: ml, name: w-0, requests: {4g.40gb: 1}, gang: ml/big}
- {namespace: ml, name: w-1, requests: {4g.40gb: 1}, gang: ml/big}
gangs:
- {name: ml/big, minMembers: 2}
"#,
    );
    let plan = ilp(&s);
    assert_eq!(plan.changed_gpus().count(), 0);
    assert_eq!(
        plan.gangs[0].reason.as_deref(),
        Some("no geometry of the eligible GPUs could ever hold it: 2 members x 1 4g.40gb need 2, and the 1 eligible GPUs hold at most 1")
    );
}

/// Two free H100s hold four 3g.40gb slices: a gang of four, and two lone pods of the same
/// priority that come first by name.
const GANG_OR_LONE_PODS: &str = r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}
  - {index: 1, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}
pending:
- {namespace: ml, name: a-lone-0, requests: {3g.40gb: 1}}
- {namespace: ml, name: a-lone-1, requests: {3g.40gb: 1}}
- {namespace: ml, name: w-0, requests: {3g.40gb: 1}, gang: ml/job}
- {namespace: ml, name: w-1, requests: {3g.40gb: 1}, gang: ml/job}
- {namespace: ml, name: w-2, requests: {3g.40gb: 1}, gang: ml/job}
- {namespace: ml, name: w-3, requests: {3g.40gb: 1}, gang: ml/job}
gangs:
- {name: ml/job, minMembers: 4}
"#;

#[test]
fn a_completable_gang_is_planned_whole() {
    let plan = ilp(&snapshot(GANG_OR_LONE_PODS));
    let table = plan.render_table();
    assert_eq!(plan.objective.pods_met, 4, "{table}");
    let placed: Vec<&str> = plan.pods.iter().filter(|p| p.node.is_some()).map(|p| p.pod.as_str()).collect();
    assert_eq!(
        placed,
        ["ml/w-0", "ml/w-1", "ml/w-2", "ml/w-3"],
        "the whole gang, not two lone pods and half of it: {table}"
    );
    assert!(plan.gangs[0].complete());
    assert!(table.contains("gang ml/job: 4 of 4 members placed"), "{table}");

    // Without gang awareness the same planner leaves it half placed.
    let options = PlanOptions { ignore_gangs: true, ..PlanOptions::default() };
    let unaware = geometer_solver::plan(&snapshot(GANG_OR_LONE_PODS), Catalog::builtin(), &options).unwrap();
    let members =
        unaware.pods.iter().filter(|p| p.node.is_some() && p.pod.as_str().starts_with("ml/w-")).count();
    assert_eq!(members, 2, "{}", unaware.render_table());
}

#[test]
fn a_gangs_members_land_on_as_few_nodes_as_cost_nothing_else() {
    // Four 3g.40gb workers: the GPUs of nodes a and b would do, as would both of c's.
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}
- name: b
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}
- name: c
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}
  - {index: 1, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}
pending:
- {namespace: ml, name: w-0, requests: {3g.40gb: 1}, gang: ml/job}
- {namespace: ml, name: w-1, requests: {3g.40gb: 1}, gang: ml/job}
- {namespace: ml, name: w-2, requests: {3g.40gb: 1}, gang: ml/job}
- {namespace: ml, name: w-3, requests: {3g.40gb: 1}, gang: ml/job}
gangs:
- {name: ml/job, minMembers: 4}
"#,
    );
    let plan = ilp(&s);
    let nodes: std::collections::BTreeSet<&str> =
        plan.pods.iter().filter_map(|p| p.node.as_deref()).collect();
    assert_eq!(plan.objective.pods_met, 4, "{}", plan.render_table());
    assert_eq!(plan.objective.gpus_changed, 2, "{}", plan.render_table());
    assert_eq!(
        nodes.into_iter().collect::<Vec<_>>(),
        ["c"],
        "one node holds the whole gang: {}",
        plan.render_table()
    );
}

#[test]
fn gangs_are_ranked_by_priority_like_pods() {
    // Two free H100s hold four 3g.40gb: room for one of two gangs of four. Gang ml/a comes
    // first by name; ml/b has the higher priority and gets the slices, whole.
    let member = |gang: &str, i: u32, priority: i32| {
        format!("- {{namespace: ml, name: {gang}-{i}, priority: {priority}, requests: {{3g.40gb: 1}}, gang: ml/{gang}}}\n")
    };
    let mut yaml = String::from(
        "nodes:\n- name: n\n  gpus:\n  - {index: 0, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}\n  - {index: 1, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}\npending:\n",
    );
    for i in 0..4 {
        yaml += &member("a", i, 0);
        yaml += &member("b", i, 100);
    }
    yaml += "gangs:\n- {name: ml/a, minMembers: 4}\n- {name: ml/b, minMembers: 4}\n";
    for plan in [ilp(&snapshot(&yaml)), greedy(&snapshot(&yaml))] {
        let table = plan.render_table();
        let placed: Vec<&str> =
            plan.pods.iter().filter(|p| p.node.is_some()).map(|p| p.pod.as_str()).collect();
        assert_eq!(placed, ["ml/b-0", "ml/b-1", "ml/b-2", "ml/b-3"], "{table}");
        let gang = |name: &str| plan.gangs.iter().find(|g| g.name == name).unwrap();
        assert!(gang("ml/b").complete(), "{table}");
        assert!(!gang("ml/a").complete() && gang("ml/a").reason.is_some(), "{table}");
    }
}
