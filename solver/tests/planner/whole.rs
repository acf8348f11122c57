//! Whole GPUs (MIG mode off) as a geometry: whole-GPU demand turns MIG off, slice demand turns
//! it back on, a GPU a whole-GPU pod runs on keeps its mode, an Ampere GPU (whose mode changes
//! only through a reset) keeps its mode, and the policy's mode limits hold. Hopper GPUs unless
//! said otherwise.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{GpuPlan, Plan, PlanOptions, SliceSource};
use geometer_solver::snapshot::Snapshot;

fn snapshot(yaml: &str) -> Snapshot {
    serde_saphyr::from_str(yaml).expect("test snapshot parses")
}

fn plans(s: &Snapshot) -> [Plan; 2] {
    let (catalog, options) = (Catalog::builtin(), PlanOptions::default());
    [
        geometer_solver::plan(s, catalog, &options).unwrap(),
        geometer_solver::greedy::plan(s, catalog, &options).unwrap(),
    ]
}

fn is_whole(gpu: &GpuPlan) -> bool {
    gpu.to.len() == 1 && gpu.to[0].profile == "whole"
}

fn gpu<'p>(plan: &'p Plan, node: &str, index: u32) -> &'p GpuPlan {
    plan.gpus.iter().find(|g| g.node == node && g.index == index).unwrap()
}

/// Two GPUs in MIG mode with idle slices, one running a slice pod; a training pod asks for a
/// whole GPU.
const MIG_FLEET: &str = r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: 3g.40gb, start: 0, pod: ml/serve}, {profile: 3g.40gb, start: 4}]}
  - {index: 1, model: H100-80GB, instances: [{profile: 3g.40gb, start: 0}, {profile: 3g.40gb, start: 4}]}
running:
- {namespace: ml, name: serve, node: a, requests: {3g.40gb: 1}}
"#;

#[test]
fn whole_gpu_demand_turns_mig_off_on_an_idle_gpu() {
    let s = snapshot(&format!(
        "{MIG_FLEET}pending:\n- {{namespace: train, name: job-0, requests: {{whole: 1}}}}\n"
    ));
    for plan in plans(&s) {
        let table = plan.render_table();
        assert_eq!(plan.objective.pods_met, 1, "{table}");
        let job = plan.pods.iter().find(|p| p.pod == "train/job-0").unwrap();
        assert_eq!((job.node.as_deref(), job.placement), (Some("a"), SliceSource::NewSlices), "{table}");
        assert!(is_whole(gpu(&plan, "a", 1)), "the idle GPU leaves MIG mode: {table}");
        assert!(!gpu(&plan, "a", 0).changed, "the GPU with a slice in use keeps its geometry: {table}");
        assert!(table.contains("MIG off: a whole GPU"), "the table shows the mode: {table}");
        assert_eq!(gpu(&plan, "a", 1).mode_change(), Some("MIG off: a whole GPU"));
    }
}

/// The reverse: slice demand returns and a whole GPU nobody uses goes back to MIG.
#[test]
fn slice_demand_turns_mig_back_on() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: whole, start: 0}]}
pending:
- {namespace: ml, name: small, requests: {1g.10gb: 2}}
"#,
    );
    for plan in plans(&s) {
        let g = gpu(&plan, "a", 0);
        assert!(g.changed && !is_whole(g), "{}", plan.render_table());
        assert_eq!(g.mode_change(), Some("MIG on"));
        assert_eq!(plan.objective.pods_met, 1);
    }
}

/// A GPU a whole-GPU pod runs on keeps its mode, whatever the slice demand, without eviction.
#[test]
fn a_running_whole_gpu_pod_keeps_its_gpu_whole() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: whole, start: 0, pod: train/job}]}
running:
- {namespace: train, name: job, node: a, requests: {whole: 1}}
pending:
- {namespace: ml, name: small, requests: {1g.10gb: 1}, priority: 1000}
"#,
    );
    for plan in plans(&s) {
        assert!(!plan.gpus[0].changed, "{}", plan.render_table());
        assert_eq!(plan.objective.pods_met, 0);
    }
    // With eviction allowed the whole-GPU pod is a candidate like any other, but it has
    // nowhere to go, so it stays.
    let mut s = s;
    s.policy = Some(serde_saphyr::from_str("evictionAllowed: true").unwrap());
    let plan = geometer_solver::plan(&s, Catalog::builtin(), &PlanOptions::default()).unwrap();
    assert!(plan.evictions.is_empty() && !plan.gpus[0].changed, "{}", plan.render_table());
}

/// With eviction allowed a whole-GPU pod moves to another whole GPU so that slices can be made
/// where only slice pods may land.
#[test]
fn an_evictable_whole_gpu_pod_moves_for_slices() {
    let s = snapshot(
        r#"
nodes:
- name: a
  labels: {pool: inference}
  gpus: [{index: 0, model: H100-80GB, instances: [{profile: whole, start: 0, pod: train/job}]}]
- name: b
  gpus: [{index: 0, model: H100-80GB, instances: [{profile: whole, start: 0}]}]
running:
- {namespace: train, name: job, node: a, requests: {whole: 1}}
pending:
- {namespace: ml, name: small, requests: {1g.10gb: 1}, nodeSelector: {pool: inference}}
policy: {evictionAllowed: true}
"#,
    );
    let plan = geometer_solver::plan(&s, Catalog::builtin(), &PlanOptions::default()).unwrap();
    let table = plan.render_table();
    assert_eq!(plan.objective.pods_met, 1, "{table}");
    assert_eq!(plan.evictions.len(), 1, "{table}");
    assert_eq!(plan.evictions[0].rescheduled_to, "b", "{table}");
    assert!(!is_whole(gpu(&plan, "a", 0)), "{table}");
}

/// A whole-GPU pod and a slice pod compete by priority, not by kind.
#[test]
fn whole_and_slice_pods_compete_by_priority() {
    let fleet = r#"
nodes:
- name: a
  gpus: [{index: 0, model: H100-80GB, instances: [{profile: 7g.80gb, start: 0}]}]
pending:
"#;
    for (whole, slice, winner) in [(10, 0, "train/job"), (0, 10, "ml/small")] {
        let s = snapshot(&format!(
            "{fleet}- {{namespace: train, name: job, requests: {{whole: 1}}, priority: {whole}}}\n\
             - {{namespace: ml, name: small, requests: {{1g.10gb: 1}}, priority: {slice}}}\n"
        ));
        let plan = geometer_solver::plan(&s, Catalog::builtin(), &PlanOptions::default()).unwrap();
        let met: Vec<String> =
            plan.pods.iter().filter(|p| p.node.is_some()).map(|p| p.pod.to_string()).collect();
        assert_eq!(met, [winner], "{}", plan.render_table());
    }
}

/// `allowedModes: [MIG]` makes no whole GPU and says why; `minWholeGpus` keeps whole GPUs.
#[test]
fn the_policy_mode_limits_hold() {
    let s = snapshot(&format!(
        "{MIG_FLEET}pending:\n- {{namespace: train, name: job-0, requests: {{whole: 1}}}}\npolicy: {{allowedModes: [MIG]}}\n"
    ));
    for plan in plans(&s) {
        assert!(plan.gpus.iter().all(|g| !is_whole(g)), "{}", plan.render_table());
        let job = plan.pods.iter().find(|p| p.pod == "train/job-0").unwrap();
        assert!(job.reason.as_ref().unwrap().summary().contains("allowedModes"), "{:?}", job.reason);
    }

    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: whole, start: 0}]}
  - {index: 1, model: H100-80GB, instances: [{profile: whole, start: 0}]}
  - {index: 2, model: H100-80GB, instances: [{profile: whole, start: 0}]}
pending:
- {namespace: ml, name: s0, requests: {7g.80gb: 1}}
- {namespace: ml, name: s1, requests: {7g.80gb: 1}}
- {namespace: ml, name: s2, requests: {7g.80gb: 1}}
policy: {minWholeGpus: 2}
"#,
    );
    for plan in plans(&s) {
        let table = plan.render_table();
        assert_eq!(plan.gpus.iter().filter(|g| is_whole(g)).count(), 2, "{table}");
        assert_eq!(plan.objective.pods_met, 1, "{table}");
    }
}

/// An Ampere GPU changes MIG mode only through a GPU reset, which the agent leaves to an
/// administrator: neither planner changes its mode, and a whole-GPU pod that only an A100 could
/// take waits; a Hopper GPU beside it changes.
#[test]
fn an_ampere_gpu_keeps_its_mode() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: A100-40GB, instances: [{profile: 3g.20gb, start: 0}, {profile: 3g.20gb, start: 4}]}
  - {index: 1, model: A100-40GB, instances: [{profile: whole, start: 0}]}
pending:
- {namespace: train, name: job, requests: {whole: 2}}
- {namespace: ml, name: big, requests: {7g.40gb: 1}}
"#,
    );
    for plan in plans(&s) {
        let table = plan.render_table();
        // The job needs a second whole GPU and the 7g slice a MIG GPU without slices in use:
        // only mode changes could serve them.
        assert!(plan.gpus.iter().all(|g| g.mode_change().is_none()), "{table}");
        assert!(!is_whole(gpu(&plan, "a", 0)) && is_whole(gpu(&plan, "a", 1)), "{table}");
    }
    let mixed = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: A100-40GB, instances: [{profile: 3g.20gb, start: 0}, {profile: 3g.20gb, start: 4}]}
- name: h
  gpus:
  - {index: 0, model: H100-80GB, instances: [{profile: 3g.40gb, start: 0}, {profile: 3g.40gb, start: 4}]}
pending:
- {namespace: train, name: job, requests: {whole: 1}}
"#,
    );
    for plan in plans(&mixed) {
        let table = plan.render_table();
        assert!(is_whole(gpu(&plan, "h", 0)) && !gpu(&plan, "a", 0).changed, "{table}");
    }
}
