//! The exact requests the controller's writes become (tower-test): MigNode spec writes, plan
//! status changes, plan creation and events.

use geometer_testkit::controller as controller_support;

use controller_support::mock_api::pair;
use geometer_api::{GpuGeometry, MigNodeSpec, MigPlanPhase, MigPlanStatus, PlacedInstance};
use geometer_controller::Executor;
use geometer_controller::{Action, EventSpec};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::json;

fn at() -> Timestamp {
    "2025-06-01T12:00:00Z".parse().unwrap()
}

#[tokio::test]
async fn a_mignode_write_is_one_merge_patch_with_plan_geometry_time_and_version() {
    let (client, mut api) = pair();
    let executor = Executor::new(client, "controller-0");
    let spec = MigNodeSpec {
        plan: Some("pool-20250601-120000-abcdef".into()),
        gpus: vec![GpuGeometry {
            index: 0,
            geometry: vec![PlacedInstance::new("1g.10gb", 0), PlacedInstance::new("3g.40gb", 4)],
        }],
        compaction: None,
    };
    let action = Action::NodeSpec {
        node: "gpu-a".into(),
        resource_version: Some("17".into()),
        spec,
        written_at: at(),
    };
    let run = tokio::spawn(async move { executor.run_group(vec![action]).await });
    let seen = api.expect("PATCH", "/apis/geometer.dev/v1alpha1/mignodes/gpu-a", 200, json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode", "metadata": {"name": "gpu-a"}, "spec": {}
    })).await;
    assert_eq!(seen.content_type.as_deref(), Some("application/merge-patch+json"));
    assert_eq!(
        seen.body,
        json!({
            "metadata": {"resourceVersion": "17", "annotations": {"geometer.dev/spec-written-at": "2025-06-01T12:00:00Z"}},
            "spec": {"plan": "pool-20250601-120000-abcdef", "gpus": [{"index": 0, "geometry": [
                {"profile": "1g.10gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}]}
        })
    );
    assert_eq!(run.await.unwrap().done, 1);
}

#[tokio::test]
async fn a_plan_status_change_patches_only_what_changed_and_a_conflict_skips_the_rest() {
    let (client, mut api) = pair();
    let executor = Executor::new(client, "controller-0");
    let before = MigPlanStatus {
        phase: MigPlanPhase::Proposed,
        message: Some("waiting for approval".into()),
        ..Default::default()
    };
    let after = MigPlanStatus { phase: MigPlanPhase::Applying, ..Default::default() };
    let status = Action::PlanStatus {
        plan: "p1".into(),
        resource_version: Some("5".into()),
        before: Some(before),
        status: after,
    };
    let write = Action::NodeSpec {
        node: "gpu-a".into(),
        resource_version: Some("9".into()),
        spec: Default::default(),
        written_at: at(),
    };
    let run = tokio::spawn(async move { executor.run_group(vec![status, write]).await });
    let seen = api
        .expect(
            "PATCH",
            "/apis/geometer.dev/v1alpha1/migplans/p1/status",
            409,
            controller_support::mock_api::status_error(409, "Conflict", "the object has been modified"),
        )
        .await;
    assert_eq!(
        seen.body,
        json!({"metadata": {"resourceVersion": "5"}, "status": {"phase": "Applying", "message": null}})
    );
    let outcome = run.await.unwrap();
    assert_eq!((outcome.done, outcome.conflicts), (0, 1));
    api.expect_no_more().await;
}

#[tokio::test]
async fn events_go_to_events_k8s_io_with_reason_note_and_the_plan_as_related() {
    let (client, mut api) = pair();
    let executor = Executor::new(client, "controller-0");
    let pod = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some("ml".into()),
        name: Some("infer-0".into()),
        uid: Some("pod-uid".into()),
        ..Default::default()
    };
    let plan = ObjectReference {
        api_version: Some("geometer.dev/v1alpha1".into()),
        kind: Some("MigPlan".into()),
        name: Some("p1".into()),
        uid: Some("plan-uid".into()),
        ..Default::default()
    };
    let event = Action::Event(EventSpec {
        regarding: pod,
        related: Some(plan),
        warning: false,
        reason: "SlicePlanned",
        action: "Plan",
        note: "slice 1g.10gb planned on node gpu-a by plan p1".into(),
    });
    let run = tokio::spawn(async move { executor.run_group(vec![event]).await });
    let seen = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ml/events", 201, json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "ml"}, "eventTime": "2025-06-01T12:00:00.000000Z"
    })).await;
    let body = &seen.body;
    assert_eq!(body["reason"], "SlicePlanned");
    assert_eq!(body["type"], "Normal");
    assert_eq!(body["action"], "Plan");
    assert_eq!(body["note"], "slice 1g.10gb planned on node gpu-a by plan p1");
    assert_eq!(body["regarding"]["name"], "infer-0");
    assert_eq!(body["related"]["kind"], "MigPlan");
    assert_eq!(body["reportingController"], "geometer-controller");
    assert_eq!(body["reportingInstance"], "controller-0");
    assert_eq!(run.await.unwrap().done, 1);
}
