//! Pods whose MIG devices must share one GPU, or each have a GPU of their own (a DRA claim's
//! constraint on the parent GPU): placed only where the planned geometry gives them that.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanOptions, SliceSource, UnmetReason};
use geometer_solver::snapshot::{GpuSpread, Snapshot};

/// Node `a`: GPU 0 has a free 3g.20gb and one in use; GPU 1 as `gpu1` says.
fn two_gpus(gpu1: &str, spread: GpuSpread) -> Snapshot {
    let mut s: Snapshot = serde_saphyr::from_str(&format!(
        r#"
nodes:
- name: a
  gpus:
  - index: 0
    model: A100-40GB
    instances: [{{profile: 3g.20gb, start: 0}}, {{profile: 3g.20gb, start: 4, pod: ml/busy0}}]
  - index: 1
    model: A100-40GB
    instances: {gpu1}
pending:
- {{namespace: ml, name: pair, requests: {{3g.20gb: 2}}}}
"#
    ))
    .unwrap();
    s.pending[0].gpu_spread = spread;
    s
}

const ONE_FREE: &str = "[{profile: 3g.20gb, start: 0}, {profile: 3g.20gb, start: 4, pod: ml/busy1}]";
const TWO_FREE: &str = "[{profile: 3g.20gb, start: 0}, {profile: 3g.20gb, start: 4}]";

fn plans(s: &Snapshot) -> [Plan; 2] {
    let options = PlanOptions::default();
    [
        geometer_solver::plan(s, Catalog::builtin(), &options).unwrap(),
        geometer_solver::greedy::plan(s, Catalog::builtin(), &options).unwrap(),
    ]
}

fn unmet_detail(plan: &Plan) -> String {
    match &plan.pods[0].reason {
        Some(UnmetReason::Capacity { detail }) => detail.clone(),
        other => panic!("expected a capacity reason, got {other:?}: {}", plan.render_table()),
    }
}

#[test]
fn devices_that_must_share_a_gpu_are_not_split_over_two() {
    for plan in plans(&two_gpus(ONE_FREE, GpuSpread::Any)) {
        assert_eq!(plan.pods[0].node.as_deref(), Some("a"), "one free slice on each GPU serves it");
        assert_eq!(plan.pods[0].placement, SliceSource::ExistingSlices);
    }
    for plan in plans(&two_gpus(ONE_FREE, GpuSpread::OneGpu)) {
        assert_eq!(plan.pods[0].node, None, "{}", plan.render_table());
        assert!(unmet_detail(&plan).contains("2x 3g.20gb on one GPU"), "{}", unmet_detail(&plan));
        assert!(plan.gpus.iter().all(|g| !g.changed), "nothing to change for it: {}", plan.render_table());
    }
}

#[test]
fn devices_that_must_share_a_gpu_take_one_with_room_for_all() {
    for plan in plans(&two_gpus(TWO_FREE, GpuSpread::OneGpu)) {
        assert_eq!(plan.pods[0].node.as_deref(), Some("a"), "{}", plan.render_table());
        assert_eq!(plan.pods[0].placement, SliceSource::ExistingSlices);
    }
}

#[test]
fn devices_that_need_a_gpu_each_never_share_one() {
    // GPU 1 is in use whole by another pod: only GPU 0 is left, with room for both.
    let gpu1_busy = "[{profile: 7g.40gb, start: 0, pod: ml/whole}]";
    let mut both_on_gpu0 = two_gpus(gpu1_busy, GpuSpread::DistinctGpus);
    both_on_gpu0.nodes[0].gpus[0].instances[1].pod = None;
    for plan in plans(&both_on_gpu0) {
        assert_eq!(plan.pods[0].node, None, "{}", plan.render_table());
        assert!(unmet_detail(&plan).contains("each on its own GPU"), "{}", unmet_detail(&plan));
    }
    both_on_gpu0.pending[0].gpu_spread = GpuSpread::Any;
    for plan in plans(&both_on_gpu0) {
        assert_eq!(plan.pods[0].node.as_deref(), Some("a"), "{}", plan.render_table());
    }
    for plan in plans(&two_gpus(ONE_FREE, GpuSpread::DistinctGpus)) {
        assert_eq!(
            plan.pods[0].node.as_deref(),
            Some("a"),
            "a free slice on each GPU: {}",
            plan.render_table()
        );
    }
}

#[test]
fn a_planner_snapshot_names_the_spread() {
    let s = two_gpus(ONE_FREE, GpuSpread::OneGpu);
    let yaml = serde_saphyr::to_string(&s).unwrap();
    assert!(yaml.contains("gpuSpread: oneGpu"), "{yaml}");
    let back: Snapshot = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(back.pending[0].gpu_spread, GpuSpread::OneGpu);
    let plain = serde_saphyr::to_string(&two_gpus(ONE_FREE, GpuSpread::Any)).unwrap();
    assert!(!plain.contains("gpuSpread"), "the default is not written: {plain}");
}
