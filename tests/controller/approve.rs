//! `kubectl geometer approve`: the exact requests it sends, and when it refuses.

use geometer_testkit::controller as controller_support;

use controller_support::mock_api::{pair, status_error};
use geometer_controller::{approve, ApprovalError, Approved};
use serde_json::{json, Value};

const PLAN_PATH: &str = "/apis/geometer.dev/v1alpha1/migplans/pool-20250101-000000-abc123";
const NAME: &str = "pool-20250101-000000-abc123";

fn plan(phase: &str, approved: bool) -> Value {
    json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlan",
        "metadata": {"name": NAME, "resourceVersion": "42", "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {"policy": "pool", "approved": approved, "nodes": [], "evictions": [], "demand": {}, "objective": 0.0, "solveMs": 1},
        "status": {"phase": phase, "message": "replaced by the newer plan pool-20250101-000100-def456"}
    })
}

fn policy(mode: &str) -> Value {
    json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy",
        "metadata": {"name": "pool", "resourceVersion": "7"},
        "spec": {"mode": mode}
    })
}

#[tokio::test]
async fn approving_sends_one_merge_patch_guarded_by_the_checked_version() {
    let (client, mut api) = pair();
    let task = tokio::spawn(async move { approve(client, NAME).await });
    api.expect("GET", PLAN_PATH, 200, plan("Proposed", false)).await;
    api.expect("GET", "/apis/geometer.dev/v1alpha1/migpolicies/pool", 200, policy("Approve")).await;
    let patch = api.expect("PATCH", PLAN_PATH, 200, plan("Proposed", true)).await;
    assert_eq!(patch.content_type.as_deref(), Some("application/merge-patch+json"));
    assert_eq!(patch.body, json!({"metadata": {"resourceVersion": "42"}, "spec": {"approved": true}}));
    let done = task.await.unwrap().unwrap();
    assert_eq!(done, Approved::Now { plan: NAME.into(), policy: "pool".into() });
    api.expect_no_more().await;
}

#[tokio::test]
async fn a_dry_run_policy_is_refused_with_the_command_that_changes_its_mode() {
    let (client, mut api) = pair();
    let task = tokio::spawn(async move { approve(client, NAME).await });
    api.expect("GET", PLAN_PATH, 200, plan("Proposed", false)).await;
    api.expect("GET", "/apis/geometer.dev/v1alpha1/migpolicies/pool", 200, policy("DryRun")).await;
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(err, ApprovalError::DryRun { .. }));
    assert_eq!(err.exit_code(), 1);
    assert!(
        err.to_string()
            .contains("kubectl patch migpolicy pool --type=merge -p '{\"spec\":{\"mode\":\"Approve\"}}'"),
        "{err}"
    );
    api.expect_no_more().await;
}

#[tokio::test]
async fn a_superseded_plan_is_refused_and_the_newest_plan_is_named() {
    let (client, mut api) = pair();
    let task = tokio::spawn(async move { approve(client, NAME).await });
    api.expect("GET", PLAN_PATH, 200, plan("Superseded", false)).await;
    let mut newer = plan("Proposed", false);
    newer["metadata"]["name"] = json!("pool-20250101-000100-def456");
    newer["metadata"]["creationTimestamp"] = json!("2025-01-01T00:01:00Z");
    let list = json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlanList", "metadata": {"resourceVersion": "50"},
        "items": [plan("Superseded", false), newer]});
    api.expect("GET", "/apis/geometer.dev/v1alpha1/migplans", 200, list).await;
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "migplan pool-20250101-000000-abc123 is Superseded (replaced by the newer plan pool-20250101-000100-def456); only a Proposed or Approved plan can be approved; the newest plan of policy pool is pool-20250101-000100-def456"
    );
    api.expect_no_more().await;
}

#[tokio::test]
async fn an_unknown_plan_is_bad_input_and_a_conflict_asks_to_rerun() {
    let (client, mut api) = pair();
    let task = tokio::spawn(async move { approve(client, NAME).await });
    api.expect("GET", PLAN_PATH, 404, status_error(404, "NotFound", "migplans \"x\" not found")).await;
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(err.exit_code(), 2);

    let (client, mut api) = pair();
    let task = tokio::spawn(async move { approve(client, NAME).await });
    api.expect("GET", PLAN_PATH, 200, plan("Proposed", false)).await;
    api.expect("GET", "/apis/geometer.dev/v1alpha1/migpolicies/pool", 200, policy("Approve")).await;
    api.expect("PATCH", PLAN_PATH, 409, status_error(409, "Conflict", "the object has been modified")).await;
    assert!(matches!(task.await.unwrap().unwrap_err(), ApprovalError::Changed(_)));
}
