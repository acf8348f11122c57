//! The real controller against the in-memory API server: from pending demand to a published
//! plan, and what each policy mode does with it.

use geometer_testkit::controller as controller_support;

use controller_support::world::{wait_for, World};
use geometer_api::MigPlanPhase;
use kube::api::{Patch, PatchParams};
use kube::Api;

use serde_json::json;

const SEVEN: &[(&str, u8, Option<&str>)] = &[("7g.80gb", 0, None)];

fn geometry_of(world: &World, node: &str) -> Vec<String> {
    world.mignode(node).spec.gpus.iter().flat_map(|g| g.geometry.iter().map(|p| p.to_string())).collect()
}

#[tokio::test]
async fn a_pending_pod_for_a_missing_profile_gets_a_plan_with_the_target_geometry() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.policy("pool", "DryRun", json!({}));
    world.pending("infer-0", "3g.40gb");
    let _controller = world.start(None);

    let plan = wait_for("a plan", || world.plans().into_iter().next()).await;
    assert_eq!(plan.spec.policy, "pool");
    assert_eq!(plan.spec.demand.met.len(), 1);
    assert_eq!(plan.spec.demand.met[0].pod, "ml/infer-0");
    assert_eq!(plan.spec.demand.met[0].node, "gpu-a");
    let gpu = &plan.spec.nodes[0].gpus[0];
    assert_eq!(gpu.from.iter().map(|p| p.to_string()).collect::<Vec<_>>(), ["7g.80gb@0"]);
    assert!(gpu.to.iter().any(|p| p.profile == "3g.40gb"), "{:?}", gpu.to);
    assert_eq!(plan.metadata.labels.as_ref().unwrap()["geometer.dev/policy"], "pool");

    // The pod is told where its slice comes from.
    let note = wait_for("the pod's event", || {
        world.server.objects::<k8s_openapi::api::events::v1::Event>().into_iter().find_map(|e| {
            (e.regarding.as_ref()?.name.as_deref() == Some("infer-0")).then(|| e.note.unwrap_or_default())
        })
    })
    .await;
    assert!(
        note.contains("3g.40gb")
            && note.contains("gpu-a")
            && note.contains(plan.metadata.name.as_deref().unwrap()),
        "{note}"
    );
}

#[tokio::test]
async fn dry_run_publishes_and_never_touches_a_mignode() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.policy("pool", "DryRun", json!({}));
    world.pending("infer-0", "1g.10gb");
    let controller = world.start(None);

    let plan = wait_for("a plan held for review", || {
        world.plans().into_iter().find(|p| {
            p.status.as_ref().and_then(|s| s.message.as_deref()).is_some_and(|m| m.contains("DryRun"))
        })
    })
    .await;
    assert_eq!(plan.phase(), MigPlanPhase::Proposed);
    // Several passes later, each of which could have applied it, it is still only a proposal.
    controller.wait_for_passes(3).await;
    let mignode = world.mignode("gpu-a");
    assert_eq!(mignode.metadata.generation, Some(1), "DryRun never writes a MigNode");
    assert!(mignode.spec.gpus.is_empty());
    assert_eq!(world.plans()[0].phase(), MigPlanPhase::Proposed);
}

#[tokio::test]
async fn an_identical_second_round_publishes_nothing() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.policy("pool", "DryRun", json!({}));
    world.pending("infer-0", "1g.10gb");
    let controller = world.start(None);
    wait_for("a plan", || world.plans().into_iter().next()).await;
    // Editing the policy (a new generation) opens a new batch over the same demand.
    Api::<geometer_api::MigPolicy>::all(world.server.client())
        .patch("pool", &PatchParams::default(), &Patch::Merge(json!({"spec": {"stabilisationSeconds": 5}})))
        .await
        .unwrap();
    wait_for("the round after the edit", || {
        (controller.metric("geometer_rounds_total{outcome=\"unchanged\"}") >= 1.0).then_some(())
    })
    .await;
    assert_eq!(world.plans().len(), 1, "the same plan is not published twice");
}

#[tokio::test]
async fn approve_mode_waits_for_approval_then_writes_the_mignode() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.policy("pool", "Approve", json!({}));
    world.pending("infer-0", "2g.20gb");
    let _controller = world.start(None);

    let plan = wait_for("a proposed plan", || {
        world.plans().into_iter().find(|p| {
            p.status.as_ref().and_then(|s| s.message.as_deref()).is_some_and(|m| m.contains("approval"))
        })
    })
    .await;
    let name = plan.metadata.name.clone().unwrap();
    assert_eq!(plan.phase(), MigPlanPhase::Proposed);
    assert!(world.mignode("gpu-a").spec.gpus.is_empty(), "nothing applied before approval");

    geometer_controller::approve(world.server.client(), &name).await.expect("approve");
    let written = wait_for("the MigNode spec", || {
        Some(world.mignode("gpu-a")).filter(|m| m.spec.plan.as_deref() == Some(&name))
    })
    .await;
    let target: Vec<String> = plan.spec.nodes[0].gpus[0].to.iter().map(|p| p.to_string()).collect();
    assert_eq!(geometry_of(&world, "gpu-a"), target);
    assert_eq!(written.metadata.generation, Some(2));
    let applying =
        wait_for("Applying", || world.plans().into_iter().find(|p| p.phase() == MigPlanPhase::Applying))
            .await;
    assert_eq!(applying.metadata.name.as_deref(), Some(name.as_str()));
}

#[tokio::test]
async fn auto_mode_applies_at_once() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.policy("pool", "Auto", json!({}));
    world.pending("infer-0", "1g.10gb");
    let _controller = world.start(None);
    let node =
        wait_for("the MigNode spec", || Some(world.mignode("gpu-a")).filter(|m| m.spec.plan.is_some())).await;
    assert!(node.spec.gpus[0].geometry.iter().any(|p| p.profile == "1g.10gb"), "{:?}", node.spec);
    assert!(node.metadata.annotations.unwrap_or_default().contains_key("geometer.dev/spec-written-at"));
}

#[tokio::test]
async fn a_pod_scheduled_elsewhere_supersedes_the_plan() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.node("other", "elsewhere", &[SEVEN]);
    world.policy("pool", "DryRun", json!({}));
    world.pending("infer-0", "1g.10gb");
    let _controller = world.start(None);
    let plan = wait_for("a plan", || world.plans().into_iter().next()).await;

    let mut pod = world.pod("infer-0");
    pod.spec.as_mut().unwrap().node_name = Some("other".into());
    pod.status.as_mut().unwrap().conditions = None;
    world.server.seed(&pod).unwrap();
    let done =
        wait_for("Superseded", || world.plans().into_iter().find(|p| p.phase() == MigPlanPhase::Superseded))
            .await;
    assert_eq!(done.metadata.name, plan.metadata.name);
    let message = done.status.unwrap().message.unwrap();
    assert!(message.contains("ml/infer-0") && message.contains("other"), "{message}");
}

#[tokio::test]
async fn an_invalid_policy_gets_a_condition_and_no_plan() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.policy("pool", "Auto", json!({"allowedProfiles": ["5g.99gb"]}));
    world.pending("infer-0", "1g.10gb");
    let controller = world.start(None);
    let condition = wait_for("the Ready condition", || {
        world.policy_object("pool").status?.conditions.into_iter().find(|c| c.type_ == "Ready")
    })
    .await;
    assert_eq!(condition.status, "False");
    assert!(condition.message.contains("5g.99gb"), "{}", condition.message);
    // Passes continue, seeing the pending pod, but an invalid policy never plans.
    controller.wait_for_passes(3).await;
    assert!(world.plans().is_empty());
}

#[tokio::test]
async fn of_two_controllers_only_the_leader_plans() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.policy("pool", "DryRun", json!({}));
    world.pending("infer-0", "1g.10gb");
    let a = world.start(Some("controller-a"));
    let b = world.start(Some("controller-b"));
    wait_for("a plan", || world.plans().into_iter().next()).await;
    let leaders = [&a, &b].iter().filter(|c| c.metric("geometer_leader") == 1.0).count();
    assert_eq!(leaders, 1, "exactly one controller leads");
    let (leader, standby) = if a.metric("geometer_leader") == 1.0 { (&a, &b) } else { (&b, &a) };
    // The leader goes on passing over the same demand while the other stands by.
    leader.wait_for_passes(5).await;
    assert_eq!(world.plans().len(), 1, "the standby published nothing");
    assert!(!standby.task.is_finished(), "the standby is still standing by");
    assert_eq!(standby.metric("geometer_leader"), 0.0);
    let standby_metrics = standby.metrics.encode();
    assert!(
        !standby_metrics.contains("geometer_rounds_total{"),
        "the standby planned no round: {standby_metrics}"
    );
}

#[tokio::test]
async fn with_a_forecast_the_plan_also_prepares_room_for_the_next_pod_like_the_last() {
    let world = World::new();
    world.node("gpu-a", "pool", &[SEVEN]);
    world.node("gpu-b", "pool", &[SEVEN]);
    world.policy("pool", "DryRun", json!({"forecastWindowSeconds": 600}));
    world.pending("infer-0", "4g.40gb");
    let _controller = world.start(None);

    let plan = wait_for("a plan", || world.plans().into_iter().next()).await;
    assert_eq!(plan.spec.demand.met.len(), 1, "the forecast is no pod of the plan: {:?}", plan.spec.demand);
    // One GPU for infer-0 and the other with a 4g.40gb ready for the next pod like it; the
    // rollout takes the pod's node first.
    let fours: usize = plan
        .spec
        .nodes
        .iter()
        .flat_map(|n| &n.gpus)
        .flat_map(|g| &g.to)
        .filter(|p| p.profile == "4g.40gb")
        .count();
    assert_eq!((plan.spec.nodes.len(), fours), (2, 2), "{:?}", plan.spec.nodes);
    assert_eq!(plan.spec.nodes[0].node, plan.spec.demand.met[0].node);
    let planned = plan
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Planned"))
        .expect("Planned condition");
    assert!(
        planned.message.contains("forecast: room for 1 of 1 pod(s) like those created in the last 600 s"),
        "{}",
        planned.message
    );
}
