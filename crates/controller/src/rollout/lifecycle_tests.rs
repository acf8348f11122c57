#![allow(clippy::unwrap_used)] // test code
use crate::adapter::PodView;
use crate::fixtures::{self, by_name, in_phase, mignode, plan, pod, Inst};
use crate::rollout::lifecycle::*;
use crate::world::world_view;
use geometer_api::{MigPlanPhase, NodeProgressPhase};

const SEVEN: &[Inst<'static>] = &[("7g.80gb", 0, None)];

struct Scenario {
    plan: MigPlan,
    policy: Option<MigPolicy>,
    valid: bool,
    newer: Option<&'static str>,
    another_applying: Option<&'static str>,
    pods: Vec<PodView>,
    nodes: Vec<MigNode>,
    now: i64,
}

impl Scenario {
    fn new(mode: &str, phase: &str, approved: bool) -> Scenario {
        Scenario {
            plan: plan("p1", "pool", phase, approved, "gpu-a", "ml/infer-0"),
            policy: Some(fixtures::policy("pool", mode)),
            valid: true,
            newer: None,
            another_applying: None,
            pods: vec![pod("ml", "infer-0", None)],
            nodes: vec![mignode("gpu-a", 1, None, &[(0, SEVEN)])],
            now: 1_700_000_000,
        }
    }

    fn run(&self) -> Vec<Action> {
        let world = world_view(self.pods.iter(), self.nodes.iter());
        let mignodes = by_name(self.nodes.clone());
        reconcile_plan(&PlanInputs {
            plan: &self.plan,
            policy: self.policy.as_ref(),
            policy_valid: self.valid,
            newer: self.newer,
            another_applying: self.another_applying,
            world: &world,
            mignodes: &mignodes,
            now: Timestamp::from_second(self.now).unwrap(),
        })
        .actions
    }
}

fn status_of(actions: &[Action]) -> Option<&MigPlanStatus> {
    actions.iter().find_map(|a| match a {
        Action::PlanStatus { status, .. } => Some(status),
        _ => None,
    })
}

fn node_writes(actions: &[Action]) -> Vec<&MigNodeSpec> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::NodeSpec { spec, .. } => Some(spec),
            _ => None,
        })
        .collect()
}

fn event_reasons(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) => Some(e.reason),
            _ => None,
        })
        .collect()
}

#[test]
fn dry_run_publishes_only_and_never_writes_a_mignode() {
    let actions = Scenario::new("DryRun", "Proposed", false).run();
    assert!(node_writes(&actions).is_empty());
    let status = status_of(&actions).expect("message explains DryRun");
    assert_eq!(status.phase, MigPlanPhase::Proposed);
    assert!(status.message.as_deref().unwrap().starts_with("DryRun: published for review only"));
    // Even approved, a DryRun plan is not applied.
    let actions = Scenario::new("DryRun", "Proposed", true).run();
    assert!(node_writes(&actions).is_empty());
}

#[test]
fn approve_mode_waits_for_approval_then_applies() {
    let actions = Scenario::new("Approve", "Proposed", false).run();
    assert!(node_writes(&actions).is_empty());
    let message = status_of(&actions).unwrap().message.clone().unwrap();
    assert!(message.contains("kubectl geometer approve p1"), "{message}");

    let actions = Scenario::new("Approve", "Proposed", true).run();
    let status = status_of(&actions).unwrap();
    assert_eq!(status.phase, MigPlanPhase::Applying);
    assert_eq!(status.nodes[0].phase, NodeProgressPhase::Applying);
    let writes = node_writes(&actions);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].plan.as_deref(), Some("p1"));
    assert_eq!(writes[0].gpus[0].index, 0);
    assert_eq!(writes[0].gpus[0].geometry.len(), 7);
    assert_eq!(event_reasons(&actions), vec!["Applying"]);
}

#[test]
fn auto_mode_applies_at_once() {
    let actions = Scenario::new("Auto", "Proposed", false).run();
    assert_eq!(status_of(&actions).unwrap().phase, MigPlanPhase::Applying);
    assert_eq!(node_writes(&actions).len(), 1);
}

#[test]
fn a_pod_scheduled_elsewhere_supersedes_a_proposed_plan() {
    let mut s = Scenario::new("Approve", "Proposed", true);
    s.pods = vec![pod("ml", "infer-0", Some("gpu-b"))];
    let actions = s.run();
    let status = status_of(&actions).unwrap();
    assert_eq!(status.phase, MigPlanPhase::Superseded);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "superseded: pod ml/infer-0 was scheduled on gpu-b, not on gpu-a where the plan made room for it"
        )
    );
    assert!(node_writes(&actions).is_empty());
    assert_eq!(event_reasons(&actions), vec!["Superseded"]);
}

#[test]
fn a_newer_plan_or_a_deleted_policy_supersedes_it() {
    let mut s = Scenario::new("DryRun", "Proposed", false);
    s.newer = Some("p2");
    assert_eq!(
        status_of(&s.run()).unwrap().message.as_deref(),
        Some("superseded: replaced by the newer plan p2")
    );
    s.policy = None;
    assert_eq!(
        status_of(&s.run()).unwrap().message.as_deref(),
        Some("superseded: its policy pool was deleted")
    );
}

#[test]
fn an_invalid_policy_holds_the_plan() {
    let mut s = Scenario::new("Auto", "Proposed", false);
    s.valid = false;
    let actions = s.run();
    assert!(node_writes(&actions).is_empty());
    assert!(status_of(&actions).unwrap().message.as_deref().unwrap().contains("policy pool is invalid"));
}

#[test]
fn an_approved_plan_waits_for_another_applying_plan() {
    let mut s = Scenario::new("Auto", "Proposed", false);
    s.another_applying = Some("p0");
    let actions = s.run();
    let status = status_of(&actions).unwrap();
    assert_eq!(status.phase, MigPlanPhase::Approved);
    assert!(node_writes(&actions).is_empty());
}

/// The plan after its first write: status Applying, and the MigNode naming it at generation 2.
fn applying(agent_phase: &str, observed: i64, message: &str) -> Scenario {
    let mut s = Scenario::new("Auto", "Proposed", false);
    let first = s.run();
    s.plan.status = Some(status_of(&first).unwrap().clone());
    let mut node = mignode("gpu-a", 2, Some("p1"), &[(0, SEVEN)]);
    node.annotations_mut().insert(
        world::SPEC_WRITTEN_AT.to_string(),
        world::written_at_value(Timestamp::from_second(s.now).unwrap()),
    );
    node.status.as_mut().unwrap().observed_generation = Some(observed);
    s.nodes = vec![in_phase(node, agent_phase, message)];
    s.now += 60;
    s
}

#[test]
fn following_the_agent_to_success() {
    let working = applying("Draining", 2, "");
    let actions = working.run();
    assert!(node_writes(&actions).is_empty(), "no second write while the agent works");
    assert!(event_reasons(&actions).is_empty());

    let done = applying("Ready", 2, "");
    let actions = done.run();
    let status = status_of(&actions).unwrap();
    assert_eq!(status.phase, MigPlanPhase::Succeeded);
    assert_eq!(status.nodes[0].phase, NodeProgressPhase::Succeeded);
    assert!(status.nodes[0].started_at.is_some() && status.nodes[0].finished_at.is_some());
    assert_eq!(event_reasons(&actions), vec!["Succeeded"]);
}

#[test]
fn an_agent_failure_fails_the_plan_with_the_reason() {
    let failed = applying("Failed", 2, "pod ml/db is do-not-disrupt; drain timed out after 600s");
    let actions = failed.run();
    let status = status_of(&actions).unwrap();
    assert_eq!(status.phase, MigPlanPhase::Failed);
    assert_eq!(
        status.message.as_deref(),
        Some("failed: node gpu-a: pod ml/db is do-not-disrupt; drain timed out after 600s")
    );
    assert_eq!(event_reasons(&actions), vec!["Failed"]);
}

#[test]
fn a_settled_plan_or_an_unchanged_one_needs_nothing() {
    let mut s = Scenario::new("Auto", "Succeeded", false);
    assert!(s.run().is_empty());
    s = Scenario::new("DryRun", "Proposed", false);
    let first = s.run();
    s.plan.status = Some(status_of(&first).unwrap().clone());
    assert!(s.run().is_empty(), "a second reconcile of the same world changes nothing");
}

#[test]
fn the_spec_keeps_gpus_of_earlier_plans() {
    let mut s = Scenario::new("Auto", "Proposed", false);
    let mut node = mignode("gpu-a", 1, Some("p0"), &[(0, SEVEN), (1, &[("3g.40gb", 4, None)])]);
    node.spec.gpus = vec![geometer_api::GpuGeometry {
        index: 1,
        geometry: vec![geometer_api::PlacedInstance::new("3g.40gb", 4)],
    }];
    s.nodes = vec![node];
    let actions = s.run();
    let spec = node_writes(&actions)[0];
    assert_eq!(spec.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), vec![0, 1]);
}
