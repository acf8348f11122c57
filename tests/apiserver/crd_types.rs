//! The generated CRDs installed in the in-memory API server: defaults filled by the schema,
//! bad values rejected, status subresources, and `kubectl get migplans` as a review screen.

use std::process::Command;

use geometer_api::*;
use geometer_apiserver::ApiServer;
use geometer_testkit::control_plane::kubectl_or_skip;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{json, Value};

fn server_with_crds() -> ApiServer {
    let server = ApiServer::new();
    server.load_yaml(&crds_yaml().unwrap()).expect("the API server accepts the generated CRDs");
    server
}

fn plan_spec() -> MigPlanSpec {
    let mut spec = MigPlanSpec {
        policy: "inference".into(),
        approved: false,
        nodes: vec![NodeChange {
            node: "gpu-1".into(),
            gpus: vec![GpuChange {
                index: 0,
                model: "H100-80GB".into(),
                from: vec![PlacedInstance::new("7g.80gb", 0)],
                to: vec![PlacedInstance::new("3g.40gb", 0), PlacedInstance::new("3g.40gb", 4)],
                operations: GpuOperations {
                    destroy: vec![PlacedInstance::new("7g.80gb", 0)],
                    create: vec![PlacedInstance::new("3g.40gb", 0), PlacedInstance::new("3g.40gb", 4)],
                },
            }],
        }],
        evictions: vec![],
        demand: Demand {
            met: vec![
                DemandMet { pod: "ml/a".into(), profile: "3g.40gb".into(), node: "gpu-1".into() },
                DemandMet { pod: "ml/b".into(), profile: "3g.40gb".into(), node: "gpu-1".into() },
            ],
            unmet: vec![],
            gangs: vec![],
        },
        objective: 2.0,
        bound: Some(2.0),
        solve_ms: 7,
        summary: PlanSummary::default(),
    };
    spec.summary = spec.summarize();
    spec
}

#[tokio::test]
async fn a_policy_written_with_an_empty_spec_gets_the_schema_defaults() {
    let server = server_with_crds();
    let policies: Api<MigPolicy> = Api::all(server.client());
    let raw = Api::<DynamicObject>::all_with(server.client(), &ApiResource::erase::<MigPolicy>(&()));
    let created = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy",
                "metadata": {"name": "default"}, "spec": {}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["mode"], "DryRun", "{}", created.data);
    assert_eq!(created.data["spec"]["disruption"]["maxNodesReconfiguring"], 1);
    let typed = policies.get("default").await.unwrap();
    assert_eq!(typed.spec.disruption.do_not_disrupt_annotations, DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS);
}

#[tokio::test]
async fn an_unknown_mode_is_rejected_by_the_schema() {
    let server = server_with_crds();
    let raw = Api::<DynamicObject>::all_with(server.client(), &ApiResource::erase::<MigPolicy>(&()));
    let bad = serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy",
        "metadata": {"name": "bad"}, "spec": {"mode": "Yolo"}
    }))
    .unwrap();
    let err = raw.create(&PostParams::default(), &bad).await.unwrap_err().to_string();
    assert!(err.contains("mode") && err.contains("Yolo"), "{err}");
}

/// The one cause of a 422, as `field reason message`.
fn only_cause<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    let e = match result {
        Err(kube::Error::Api(e)) => e,
        other => panic!("not refused by the API: {other:?}"),
    };
    assert_eq!(e.code, 422, "{e:?}");
    let causes = e.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(causes.len(), 1, "{causes:?}");
    format!("{} {} {}", causes[0].field, causes[0].reason, causes[0].message)
}

#[tokio::test]
async fn a_repeated_set_item_or_map_list_key_is_refused_with_its_field() {
    let server = server_with_crds();
    let raw = Api::<DynamicObject>::all_with(server.client(), &ApiResource::erase::<MigPolicy>(&()));
    let policy = |name: &str, profiles: Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy",
            "metadata": {"name": name}, "spec": {"allowedProfiles": profiles}}))
        .unwrap()
    };
    let twice = raw.create(&PostParams::default(), &policy("twice", json!(["1g.10gb", "1g.10gb"]))).await;
    let expected = "spec.allowedProfiles[1] FieldValueDuplicate Duplicate value: \"1g.10gb\"";
    assert_eq!(only_cause(twice), expected);
    raw.create(&PostParams::default(), &policy("once", json!(["1g.10gb", "2g.20gb"]))).await.unwrap();
    let ready = json!({"type": "Ready", "status": "True", "reason": "Checked", "message": "",
        "lastTransitionTime": "2024-01-01T00:00:00Z"});
    let status = Patch::Merge(json!({"status": {"conditions": [ready.clone(), ready]}}));
    let written = raw.patch_status("once", &PatchParams::default(), &status).await;
    let expected = "status.conditions[1] FieldValueDuplicate Duplicate value: {\"type\":\"Ready\"}";
    assert_eq!(only_cause(written), expected);
}

#[tokio::test]
async fn plan_and_node_status_are_subresources() {
    let server = server_with_crds();
    let plans: Api<MigPlan> = Api::all(server.client());
    let mut plan =
        plans.create(&PostParams::default(), &MigPlan::new("inference-1", plan_spec())).await.unwrap();
    assert!(plan.status.is_none(), "status is not written through the main resource");
    let status = MigPlanStatus { phase: MigPlanPhase::Proposed, ..Default::default() };
    plans
        .patch_status("inference-1", &PatchParams::default(), &Patch::Merge(json!({ "status": status })))
        .await
        .unwrap();
    plan = plans.get("inference-1").await.unwrap();
    assert_eq!(plan.status.unwrap().phase, MigPlanPhase::Proposed);
    assert_eq!(plan.spec, plan_spec());

    let nodes: Api<MigNode> = Api::all(server.client());
    nodes.create(&PostParams::default(), &MigNode::new("gpu-1", MigNodeSpec::default())).await.unwrap();
    let status =
        MigNodeStatus { phase: MigNodePhase::Ready, cordoned_by_geometer: false, ..Default::default() };
    nodes
        .patch_status("gpu-1", &PatchParams::default(), &Patch::Merge(json!({ "status": status })))
        .await
        .unwrap();
    assert_eq!(nodes.get("gpu-1").await.unwrap().status.unwrap().phase, MigNodePhase::Ready);
}

#[tokio::test]
async fn kubectl_get_migplans_is_a_review_screen() {
    let Some(kubectl) = kubectl_or_skip() else { return };
    let server = server_with_crds();
    let plans: Api<MigPlan> = Api::all(server.client());
    plans.create(&PostParams::default(), &MigPlan::new("inference-1", plan_spec())).await.unwrap();
    let status = json!({ "status": { "phase": "Proposed" } });
    plans.patch_status("inference-1", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();

    let (_, _http) = server.serve_http("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let mut cmd = Command::new(kubectl);
    cmd.arg("--kubeconfig").arg(&kubeconfig).arg("--cache-dir").arg(dir.path().join("cache"));
    cmd.args(["get", "mplan"]).env("HOME", dir.path()).env_remove("KUBECONFIG");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Vec<&str>> = stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        rows[0],
        ["NAME", "POLICY", "PHASE", "PODS-HELPED", "GPUS-CHANGED", "EVICTIONS", "AGE"],
        "{stdout}"
    );
    assert_eq!(&rows[1][..6], ["inference-1", "inference", "Proposed", "2", "1", "0"], "{stdout}");
}
