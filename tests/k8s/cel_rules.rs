//! The CRDs' CEL rules (`x-kubernetes-validations`) enforced by the real kube-apiserver: a
//! published MigPlan keeps every field as the controller wrote it except `spec.approved`, which
//! can be set and never withdrawn; a MigPolicy's batching times and headroom keys are checked on
//! every write. Each refused write is answered as a user sees it: 422 Invalid, naming the field
//! and the rule's message, and the object is left as it was. The in-memory API server runs no
//! CEL rule, so these tests are where the rules are shown to hold.

use std::collections::BTreeSet;

use geometer_testkit::control_plane::{start_or_skip, ControlPlane, Identity};
use geometer_testkit::real_cluster::install;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::crd_bounds::cel_messages;

const PLAN: &str = "published";

fn api(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("geometer.dev", "v1alpha1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, plural))
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

/// A plan as the controller publishes it: one GPU split in two, one pod evicted for it, two
/// pending pods helped.
fn plan() -> Value {
    let whole = json!([{"profile": "7g.80gb", "start": 0}]);
    let halves = json!([{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]);
    json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlan", "metadata": {"name": PLAN},
        "spec": {
            "policy": "inference",
            "approved": false,
            "nodes": [{"node": "gpu-1", "gpus": [{"index": 0, "model": "H100-80GB", "from": whole, "to": halves,
                "operations": {"destroy": whole, "create": halves}}]}],
            "evictions": [{"namespace": "ml", "name": "old", "node": "gpu-1",
                "reason": "uses 7g.80gb@0 on GPU 0, which the plan replaces"}],
            "demand": {"met": [{"pod": "ml/a", "profile": "3g.40gb", "node": "gpu-1"},
                {"pod": "ml/b", "profile": "3g.40gb", "node": "gpu-1"}], "unmet": [], "gangs": []},
            "objective": 2.0,
            "bound": 2.5,
            "solveMs": 7,
            "summary": {"nodesChanged": 1, "gpusChanged": 1, "evictions": 1, "podsHelped": 2, "podsUnmet": 0}
        }
    })
}

/// Changes to a published plan that its rules refuse: the field each names and the rule's
/// message. Every field but `spec.approved`.
fn changes_to_a_published_plan() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        ("spec.policy", json!({"policy": "training"}), "spec.policy is immutable"),
        ("spec.nodes", json!({"nodes": []}), "spec.nodes is immutable"),
        ("spec.evictions", json!({"evictions": []}), "spec.evictions is immutable"),
        ("spec.demand", json!({"demand": {"met": []}}), "spec.demand is immutable"),
        ("spec.objective", json!({"objective": 3.0}), "spec.objective is immutable"),
        ("spec.bound", json!({"bound": 9.5}), "spec.bound is immutable"),
        (
            "spec.bound",
            json!({"bound": null}),
            "spec.bound cannot be added to or removed from a published plan",
        ),
        ("spec.solveMs", json!({"solveMs": 8}), "spec.solveMs is immutable"),
        ("spec.summary", json!({"summary": {"podsHelped": 3}}), "spec.summary is immutable"),
    ]
}

const NO_WITHDRAWAL: &str =
    "spec.approved cannot go back to false; let a newer plan supersede this one instead";

/// Asserts that kube-apiserver refused the write by the rule on `field` as a user sees it: 422
/// Invalid, `<kind> "<name>" is invalid: <field>: Invalid value: ...: <message>`, with `field`
/// the one cause.
fn assert_refused<T: std::fmt::Debug>(
    answer: Result<T, kube::Error>,
    what: &str,
    field: &str,
    message: &str,
) {
    let status = match answer {
        Err(kube::Error::Api(status)) => status,
        other => panic!("{what}: {field} changed, not refused: {other:?}"),
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"), "{what}: {status:?}");
    assert!(
        status.message.starts_with(&format!("{what} is invalid: {field}: Invalid value: ")),
        "{status:?}"
    );
    assert!(status.message.ends_with(message), "{what}: {status:?}");
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(causes.len(), 1, "{what}: {causes:?}");
    assert_eq!(
        (causes[0].reason.as_str(), causes[0].field.as_str()),
        ("FieldValueInvalid", field),
        "{causes:?}"
    );
    assert!(causes[0].message.ends_with(message), "{causes:?}");
}

/// Tries every refused change on the plan; asserts each is refused and leaves the spec as it was.
async fn assert_every_change_refused(plans: &Api<DynamicObject>, seen: &mut BTreeSet<String>) {
    let before = plans.get(PLAN).await.unwrap();
    for (field, change, message) in changes_to_a_published_plan() {
        let answer =
            plans.patch(PLAN, &PatchParams::default(), &Patch::Merge(json!({ "spec": change }))).await;
        assert_refused(answer, &format!("MigPlan.geometer.dev \"{PLAN}\""), field, message);
        seen.insert(message.to_string());
    }
    let after = plans.get(PLAN).await.unwrap();
    assert_eq!(after.data["spec"], before.data["spec"]);
    assert_eq!(after.metadata.generation, before.metadata.generation);
}

/// kubectl as the admin; its error output, failing the test when kubectl succeeds.
fn kubectl_refused(cp: &ControlPlane, args: &[&str]) -> String {
    match cp.kubectl(Identity::Admin, args) {
        Ok(out) => panic!("kubectl {} succeeded: {out}", args.join(" ")),
        Err(stderr) => stderr,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_plan_can_be_approved_and_nothing_else_changed() {
    let Some(cp) = start_or_skip("cel-migplan").await else { return };
    install(&cp);
    let plans = api(&cp.raw_client(Identity::Admin).await, "MigPlan", "migplans");
    let created =
        plans.create(&PostParams::default(), &object(plan())).await.expect("kube-apiserver takes the plan");
    let mut seen = BTreeSet::new();

    assert_every_change_refused(&plans, &mut seen).await;

    // The whole object written back unchanged (as `kubectl edit` or a controller's update does)
    // breaks no rule: every field equals its old value.
    let current = plans.get(PLAN).await.unwrap();
    plans.replace(PLAN, &PostParams::default(), &current).await.expect("an unchanged plan is written back");
    cp.kubectl(Identity::Admin, &["label", "migplan", PLAN, "team=ml"]).expect("labels are not the spec");
    plans
        .patch_status(PLAN, &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Proposed"}})))
        .await
        .expect("the status is not the spec");

    // Approving with kubectl patch, then approving the approved plan again: both allowed.
    for printed in ["patched", "patched (no change)"] {
        let approve = ["patch", "migplan", PLAN, "--type=merge", "-p", r#"{"spec":{"approved":true}}"#];
        let out =
            cp.kubectl(Identity::Admin, &approve).expect("approving a plan with kubectl patch is allowed");
        assert_eq!(out.trim(), format!("migplan.geometer.dev/{PLAN} {printed}"));
    }

    // Withdrawing the approval: what kubectl prints, and what the API answers.
    let withdrawn = kubectl_refused(
        &cp,
        &["patch", "migplan", PLAN, "--type=merge", "-p", r#"{"spec":{"approved":false}}"#],
    );
    assert!(
        withdrawn.contains(&format!(
            "The MigPlan \"{PLAN}\" is invalid: spec.approved: Invalid value: false: {NO_WITHDRAWAL}"
        )),
        "{withdrawn}"
    );
    // Removing the field is withdrawing too: the schema's default (false) fills it.
    for withdrawal in [json!(false), Value::Null] {
        let answer = plans
            .patch(PLAN, &PatchParams::default(), &Patch::Merge(json!({"spec": {"approved": withdrawal}})))
            .await;
        assert_refused(answer, &format!("MigPlan.geometer.dev \"{PLAN}\""), "spec.approved", NO_WITHDRAWAL);
    }
    seen.insert(NO_WITHDRAWAL.to_string());

    // Approved, it is as immutable as before.
    assert_every_change_refused(&plans, &mut seen).await;

    let stored = plans.get(PLAN).await.unwrap();
    let mut expected = created.data["spec"].clone();
    expected["approved"] = json!(true);
    assert_eq!(stored.data["spec"], expected, "only the approval changed");
    assert_eq!(stored.data["status"]["phase"], "Proposed");
    assert_eq!(stored.metadata.labels.unwrap_or_default().get("team").map(String::as_str), Some("ml"));

    let rules: BTreeSet<String> = cel_messages("MigPlan").into_iter().collect();
    assert_eq!(seen, rules, "every CEL rule of the MigPlan CRD is tried against kube-apiserver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_with_idle_batching_longer_than_max_or_an_unknown_headroom_key_is_refused() {
    let Some(cp) = start_or_skip("cel-migpolicy").await else { return };
    install(&cp);
    let policies = api(&cp.raw_client(Identity::Admin).await, "MigPolicy", "migpolicies");
    let batching = "batching.idleSeconds must not exceed batching.maxSeconds";
    let headroom = "headroom keys must be MIG profile names such as 1g.10gb, or whole";
    let policy = |name: &str, spec: Value| {
        object(
            json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": name}, "spec": spec}),
        )
    };
    let what = |name: &str| format!("MigPolicy.geometer.dev \"{name}\"");
    let mut seen = BTreeSet::new();

    // Created with a broken rule: refused, and nothing is stored.
    let created = policies
        .create(
            &PostParams::default(),
            &policy("slow", json!({"batching": {"idleSeconds": 301, "maxSeconds": 300}})),
        )
        .await;
    assert_refused(created, &what("slow"), "spec.batching", batching);
    // Only idleSeconds given: maxSeconds takes its default (300) before the rule is checked.
    let created = policies
        .create(&PostParams::default(), &policy("slow", json!({"batching": {"idleSeconds": 400}})))
        .await;
    assert_refused(created, &what("slow"), "spec.batching", batching);
    seen.insert(batching.to_string());
    for key in ["2g.banana", "1g", "Whole", "mig-1g.10gb"] {
        let created =
            policies.create(&PostParams::default(), &policy("odd", json!({"headroom": {key: 1}}))).await;
        assert_refused(created, &what("odd"), "spec.headroom", headroom);
    }
    seen.insert(headroom.to_string());
    let stored = policies.list(&Default::default()).await.unwrap();
    assert!(stored.items.is_empty(), "{:?}", stored.items);

    // Within the rules: idle equal to max, every kind of profile name, and `whole`.
    let spec = json!({"batching": {"idleSeconds": 60, "maxSeconds": 60},
        "headroom": {"1g.10gb": 2, "1g.10gb+me": 1, "1g.20gb-me": 1, "7g.80gb+gfx": 1, "1g.10gb+me.all": 1, "whole": 1}});
    policies
        .create(&PostParams::default(), &policy("pool", spec.clone()))
        .await
        .expect("a policy within the rules");

    // Updates are checked too, and a refused one leaves the policy as it was.
    let answer = policies
        .patch(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"batching": {"idleSeconds": 61}}})),
        )
        .await;
    assert_refused(answer, &what("pool"), "spec.batching", batching);
    let answer = policies
        .patch("pool", &PatchParams::default(), &Patch::Merge(json!({"spec": {"headroom": {"3g": 1}}})))
        .await;
    assert_refused(answer, &what("pool"), "spec.headroom", headroom);
    let stored = policies.get("pool").await.unwrap();
    assert_eq!(stored.data["spec"]["batching"], spec["batching"]);
    assert_eq!(stored.data["spec"]["headroom"], spec["headroom"]);

    let changed = cp
        .kubectl(
            Identity::Admin,
            &[
                "patch",
                "migpolicy",
                "pool",
                "--type=merge",
                "-p",
                r#"{"spec":{"batching":{"idleSeconds":90,"maxSeconds":120}}}"#,
            ],
        )
        .expect("longer batching within the rule");
    assert_eq!(changed.trim(), "migpolicy.geometer.dev/pool patched");
    let refused = kubectl_refused(
        &cp,
        &["patch", "migpolicy", "pool", "--type=merge", "-p", r#"{"spec":{"batching":{"idleSeconds":121}}}"#],
    );
    assert!(
        refused.contains(&format!(
            "The MigPolicy \"pool\" is invalid: spec.batching: Invalid value: {batching}"
        )),
        "{refused}"
    );
    let stored = policies.get("pool").await.unwrap();
    assert_eq!(stored.data["spec"]["batching"], json!({"idleSeconds": 90, "maxSeconds": 120}));

    let rules: BTreeSet<String> = cel_messages("MigPolicy").into_iter().collect();
    assert_eq!(seen, rules, "every CEL rule of the MigPolicy CRD is tried against kube-apiserver");
    assert!(
        cel_messages("MigNode").is_empty(),
        "a MigNode rule needs its case here: {:?}",
        cel_messages("MigNode")
    );
}
