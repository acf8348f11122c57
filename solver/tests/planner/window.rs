//! Under a stabilisation window a node the plan changes stays as planned, so its GPUs left in
//! MIG mode with no instance would serve no pod until the window ends: the plan shapes them
//! like the node's changed GPUs. Without a window they stay as they are.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanOptions};
use geometer_solver::snapshot::Snapshot;

/// Two H100 nodes in MIG mode with no instances, and an A100 node likewise; one whole-GPU pod
/// and one `3g.40gb` pod that may run only on the A100s.
fn snapshot(stabilisation_seconds: u32) -> Snapshot {
    let empty = |node: &str, model: &str| {
        let gpus: Vec<String> = (0..4).map(|i| format!("  - {{index: {i}, model: {model}}}")).collect();
        format!("- name: {node}\n  labels: {{gpu: {model}}}\n  gpus:\n{}\n", gpus.join("\n"))
    };
    let yaml = format!(
        "nodes:\n{}{}{}pending:\n\
         - {{namespace: train, name: job, requests: {{whole: 1}}}}\n\
         - {{namespace: serve, name: small, requests: {{3g.40gb: 1}}, nodeSelector: {{gpu: A100-80GB}}}}\n\
         policy: {{stabilisationSeconds: {stabilisation_seconds}}}\n",
        empty("h100-a", "H100-80GB"),
        empty("h100-b", "H100-80GB"),
        empty("a100", "A100-80GB"),
    );
    serde_saphyr::from_str(&yaml).expect("test snapshot parses")
}

fn plans(s: &Snapshot) -> [Plan; 2] {
    let (catalog, options) = (Catalog::builtin(), PlanOptions::default());
    [
        geometer_solver::plan(s, catalog, &options).unwrap(),
        geometer_solver::greedy::plan(s, catalog, &options).unwrap(),
    ]
}

/// `node`'s GPUs as the plan leaves them, one profile list each.
fn node_targets(plan: &Plan, node: &str) -> Vec<Vec<String>> {
    let gpus = plan.gpus.iter().filter(|g| g.node == node);
    gpus.map(|g| g.to.iter().map(|p| p.profile.clone()).collect()).collect()
}

#[test]
fn under_a_window_the_empty_gpus_of_a_changed_node_are_shaped_like_its_changed_ones() {
    for plan in plans(&snapshot(600)) {
        let table = plan.render_table();
        assert_eq!(plan.objective.pods_met, 2, "{table}");
        let whole_node = plan.pods.iter().find(|p| p.pod == "train/job").unwrap().node.clone().unwrap();
        assert_eq!(node_targets(&plan, &whole_node), vec![vec!["whole".to_string()]; 4], "{table}");
        let a100 = node_targets(&plan, "a100");
        assert!(a100.iter().all(|g| g == &a100[0] && g.contains(&"3g.40gb".to_string())), "{table}");
        let other = if whole_node == "h100-a" { "h100-b" } else { "h100-a" };
        assert!(
            node_targets(&plan, other).iter().all(Vec::is_empty),
            "a node the plan leaves stays: {table}"
        );
        // The objective scores what the planner chose; the plan lists every change.
        assert_eq!(plan.objective.gpus_changed, 2, "{table}");
        assert_eq!(plan.changed_gpus().count(), 8, "{table}");
        assert!(plan.notes.iter().any(|n| n.contains("6 empty GPU(s) on 2 node(s)")), "{:?}", plan.notes);
    }
}

#[test]
fn without_a_window_only_the_gpus_the_pods_need_change() {
    for plan in plans(&snapshot(0)) {
        let table = plan.render_table();
        assert_eq!(plan.objective.pods_met, 2, "{table}");
        assert_eq!((plan.objective.gpus_changed, plan.changed_gpus().count()), (2, 2), "{table}");
        assert!(plan.notes.iter().all(|n| !n.contains("empty GPU(s)")), "{:?}", plan.notes);
    }
}
