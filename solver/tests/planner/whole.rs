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

/// Under a policy that lets the agent reset GPUs (`gpuResetAllowed`), an Ampere GPU may change
/// mode like a Hopper: the idle whole A100 is carved for the 7g slice.
#[test]
fn an_ampere_gpu_changes_mode_where_the_policy_allows_a_reset() {
    let s = snapshot(
        r#"
nodes:
- name: a
  gpus:
  - {index: 0, model: A100-40GB, instances: [{profile: whole, start: 0}]}
pending:
- {namespace: ml, name: big, requests: {7g.40gb: 1}}
policy: {gpuResetAllowed: true}
"#,
    );
    for plan in plans(&s) {
        let table = plan.render_table();
        assert!(gpu(&plan, "a", 0).mode_change().is_some(), "{table}");
        assert_eq!(plan.objective.pods_met, 1, "{table}");
    }
}

/// Four empty GPUs in MIG mode on four nodes, two Hopper (which can still turn whole and take
/// a whole-GPU pod) and two Ampere (which cannot without a reset), the Hopper nodes first by
/// name.
const MIXED_EMPTY: &str = r#"
nodes:
- name: a-hopper
  gpus: [{index: 0, model: H100-80GB}]
- name: b-hopper
  gpus: [{index: 0, model: H100-80GB}]
- name: c-ampere
  gpus: [{index: 0, model: A100-80GB}]
- name: d-ampere
  gpus: [{index: 0, model: A100-80GB}]
"#;

/// The ILP's plan for `fleet` with one pending pod per `(namespace/name, requests)`.
fn plan_for(fleet: &str, pods: &[(&str, &str)]) -> (Plan, String) {
    let mut yaml = format!("{fleet}pending:\n");
    for (pod, requests) in pods {
        let (namespace, name) = pod.split_once('/').unwrap();
        yaml.push_str(&format!("- {{namespace: {namespace}, name: {name}, requests: {{{requests}}}}}\n"));
    }
    let plan = geometer_solver::plan(&snapshot(&yaml), Catalog::builtin(), &PlanOptions::default()).unwrap();
    let table = plan.render_table();
    (plan, table)
}

fn changed_nodes(plan: &Plan) -> Vec<&str> {
    plan.gpus.iter().filter(|g| g.changed).map(|g| g.node.as_str()).collect()
}

/// Slices that a Hopper or an Ampere could hold go on the Ampere GPUs: every plan that does so
/// is as good by every level of the objective, and the Hopper GPUs stay able to take the
/// whole-GPU pods that only they can run.
#[test]
fn slices_go_on_gpus_that_cannot_turn_whole() {
    let pods = [("ml/p0", "3g.40gb: 1"), ("ml/p1", "4g.40gb: 1"), ("ml/p2", "7g.80gb: 1")];
    let (plan, table) = plan_for(MIXED_EMPTY, &pods);
    assert_eq!(plan.objective.pods_met, 3, "{table}");
    assert_eq!(plan.objective.gpus_changed, 2, "{table}");
    assert_eq!(changed_nodes(&plan), ["c-ampere", "d-ampere"], "{table}");
}

/// Likewise when the Hopper GPUs are whole already: the slices are made on the Ampere GPUs
/// rather than turning a whole GPU back to MIG.
#[test]
fn a_whole_gpu_is_not_carved_where_an_ampere_can_hold_the_slices() {
    let fleet = MIXED_EMPTY
        .replace("model: H100-80GB}", "model: H100-80GB, instances: [{profile: whole, start: 0}]}");
    let (plan, table) = plan_for(&fleet, &[("ml/p0", "2g.20gb: 3")]);
    assert_eq!(plan.objective.pods_met, 1, "{table}");
    assert_eq!(changed_nodes(&plan).len(), 1, "{table}");
    assert!(changed_nodes(&plan)[0].ends_with("ampere"), "{table}");
    assert_eq!(plan.gpus.iter().filter(|g| is_whole(g)).count(), 2, "{table}");
}

/// With a whole-GPU pod waiting too, the Hopper GPUs look different to the planner (they can
/// take it) and the Ampere ones do not: the whole-GPU pod gets a Hopper, the slices an Ampere,
/// and the other Hopper stays as it is.
#[test]
fn slices_beside_a_whole_gpu_pod_go_on_an_ampere() {
    let pods = [("train/job", "whole: 1"), ("ml/p0", "3g.40gb: 1"), ("ml/p1", "4g.40gb: 1")];
    let (plan, table) = plan_for(MIXED_EMPTY, &pods);
    assert_eq!(plan.objective.pods_met, 3, "{table}");
    let changed = changed_nodes(&plan);
    assert_eq!(changed.len(), 2, "{table}");
    assert_eq!(changed.iter().filter(|n| n.ends_with("ampere")).count(), 1, "{table}");
    assert_eq!(plan.gpus.iter().filter(|g| is_whole(g)).count(), 1, "{table}");
}

/// A pod of two slices must get both on one node, so the planner models each node on its own;
/// the slices still go on the Ampere GPUs, and the pods that take them with them.
#[test]
fn slices_go_on_gpus_that_cannot_turn_whole_across_nodes() {
    let pods = [("ml/pair", "2g.20gb: 2"), ("ml/p0", "3g.40gb: 1"), ("ml/p1", "4g.40gb: 1")];
    let (plan, table) = plan_for(MIXED_EMPTY, &pods);
    assert_eq!(plan.objective.pods_met, 3, "{table}");
    assert_eq!(changed_nodes(&plan), ["c-ampere", "d-ampere"], "{table}");
    for pod in ["ml/pair", "ml/p0", "ml/p1"] {
        let node = plan.pods.iter().find(|p| p.pod == pod).unwrap().node.as_deref().unwrap();
        assert!(node.ends_with("ampere"), "{pod} on {node}: {table}");
    }
}
