//! The controller's RBAC in deploy/ allows every API call the controller's code makes, and
//! nothing more (the agent's is checked in deploy_rbac.rs).
//!
//! The controller's parts that talk to the API server run against the in-memory API server with
//! a client that signs its requests `geometer-controller`: the caches (one reflector per kind),
//! the executor (every kind of action, an event published twice so it folds into a series) and
//! the leader election (join, lead, release); then the real controller loop (`geometer
//! controller`'s `run`) plans and starts applying a plan for a pending pod. The server's request
//! log then says which (group, resource, verb, namespace, name) the controller used.

use geometer_testkit::deploy as deploy_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use deploy_support::observe::{accesses, client_as};
use deploy_support::rbac::{compare, Access, Authorizer};
use deploy_support::{kubectl_available, kustomizations, render};
use geometer_api::{MigNode, MigNodeSpec, MigPlan, MigPlanPhase, MigPlanStatus, MigPolicy, MigPolicyStatus};
use geometer_apiserver::ApiServer;
use geometer_controller::Executor;
use geometer_controller::Health;
use geometer_controller::Metrics;
use geometer_controller::{self as controller, Settings};
use geometer_controller::{Action, EventSpec};
use geometer_controller::{Caches, OptionalKinds};
use geometer_controller::{Leadership, LeaseSettings};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Resource;
use serde_json::json;
use tokio::sync::Notify;

const NAMESPACE: &str = "geometer-system";
const CONTROLLER: &str = "geometer-controller";

/// Permissions granted although no scenario exercises them, each with the reason it is needed.
/// (group, resource, verb, reason)
/// The right-sizing webhook's certificate calls are not made against the in-memory API server
/// (it serves no Secrets or webhook configurations); tests/k8s/rightsizing_webhook.rs and
/// tests/k8s/agent_identity.rs make them on the real control plane as this ServiceAccount,
/// with RBAC enforced.
const CONTROLLER_UNOBSERVED: &[(&str, &str, &str, &str)] = &[
    ("", "secrets", "create", "the webhook's certificate Secret, on first start"),
    ("", "secrets", "get", "the webhook's certificate, read by every replica"),
    ("", "secrets", "update", "the webhook's certificate, renewed before it expires"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", "the webhook's caBundle"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update", "the webhook's caBundle"),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "get",
        "the eviction webhook's caBundle",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "update",
        "the eviction webhook's caBundle",
    ),
];

/// Guards against a hang only.
const PATIENCE: Duration = Duration::from_secs(60);

fn seeded_server() -> ApiServer {
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).expect("CRD");
    }
    for ns in [NAMESPACE, "team-a"] {
        server
            .seed(&serde_json::from_value::<Namespace>(json!({"metadata": {"name": ns}})).unwrap())
            .expect("namespace");
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "trainer", "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "train:1",
            "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
        "status": {"phase": "Pending"},
    }))
    .unwrap();
    server.seed(&pod).expect("pod");
    let policy: MigPolicy = serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "pool"}, "spec": {"mode": "Auto"},
    }))
    .unwrap();
    server.seed(&policy).expect("policy");
    let mignode: MigNode = serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode", "metadata": {"name": "gpu-a"}, "spec": {},
    }))
    .unwrap();
    server.seed(&mignode).expect("mignode");
    server
}

/// Everything the controller does against the API server, signed `geometer-controller`.
async fn controller_scenario() -> BTreeSet<Access> {
    let server = seeded_server();
    let client = client_as(&server, CONTROLLER);

    let mut leadership = Leadership::join(client.clone(), &LeaseSettings::new(NAMESPACE, "controller-0"))
        .await
        .expect("joins the election");
    tokio::time::timeout(PATIENCE, leadership.acquired())
        .await
        .expect("leads in time")
        .expect("election runs");

    let (caches, watches) = Caches::start(&client, Arc::new(Notify::new()), &OptionalKinds::default());
    tokio::time::timeout(PATIENCE, caches.ready()).await.expect("caches fill");
    assert_eq!(caches.pods.state().len(), 1, "the pod cache holds the seeded pod");

    let executor = Executor::new(client.clone(), "controller-0");
    let plan: MigPlan = serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlan", "metadata": {"name": "pool-20250601-120000-abcdef"},
        "spec": {"policy": "pool"}, "status": {"phase": "Proposed"},
    }))
    .unwrap();
    let outcome = executor.run_group(vec![Action::CreatePlan(Box::new(plan))]).await;
    assert_eq!((outcome.done, outcome.errors), (1, 0), "the plan is published");

    let created: MigPlan = server.object("", "pool-20250601-120000-abcdef").expect("plan created");
    let pod_ref = server.object::<Pod>("team-a", "trainer").unwrap().object_ref(&());
    let event = || {
        Action::Event(EventSpec {
            regarding: pod_ref.clone(),
            related: Some(created.object_ref(&())),
            warning: false,
            reason: "SlicePlanned",
            action: "Plan",
            note: "1g.10gb planned on gpu-a".into(),
        })
    };
    let applying = MigPlanStatus { phase: MigPlanPhase::Applying, ..Default::default() };
    let actions = vec![
        Action::PlanStatus {
            plan: created.metadata.name.clone().unwrap(),
            resource_version: created.metadata.resource_version.clone(),
            before: created.status.clone(),
            status: applying,
        },
        Action::NodeSpec {
            node: "gpu-a".into(),
            resource_version: None,
            spec: MigNodeSpec::default(),
            written_at: jiff::Timestamp::now(),
        },
        Action::PolicyStatus {
            policy: "pool".into(),
            resource_version: None,
            before: None,
            status: MigPolicyStatus { managed_nodes: 1, ..Default::default() },
        },
        event(),
        event(),
        Action::Event(EventSpec {
            regarding: created.object_ref(&()),
            related: None,
            warning: true,
            reason: "PlanFailed",
            action: "Apply",
            note: "gpu-a failed".into(),
        }),
    ];
    let outcome = executor.run_group(actions).await;
    assert_eq!((outcome.done, outcome.conflicts, outcome.errors), (6, 0, 0), "every write succeeds");

    drop(watches);
    leadership.release().await;
    let seen = accesses(&server, CONTROLLER);
    let used = |verb: &str, resource: &str| seen.iter().any(|a| a.verb == verb && a.resource == resource);
    for (verb, resource) in [
        ("watch", "pods"),
        ("create", "migplans"),
        ("patch", "migplans/status"),
        ("patch", "events"),
        ("patch", "leases"),
    ] {
        assert!(used(verb, resource), "the scenario never did {verb} {resource}: {seen:#?}");
    }
    seen
}

/// The real controller loop, leader-elected, from a pending pod to a plan being applied.
async fn loop_scenario() -> BTreeSet<Access> {
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).expect("CRD");
    }
    for ns in [NAMESPACE, "team-a"] {
        server
            .seed(&serde_json::from_value::<Namespace>(json!({"metadata": {"name": ns}})).unwrap())
            .expect("namespace");
    }
    // The gang schedulers' PodGroup CRDs, so that the controller watches PodGroups.
    for (group, version) in [("scheduling.x-k8s.io", "v1alpha1"), ("scheduling.volcano.sh", "v1beta1")] {
        server
            .seed_value(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("podgroups.{group}")},
                "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "listKind": "PodGroupList"},
                    "versions": [{"name": version, "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))
            .expect("PodGroup CRD");
    }
    // DRA's kinds, which the in-memory server serves as custom resources of the built-in
    // kinds' group and version, so that the controller watches them as it does on Kubernetes
    // 1.34 and later; one node's slice, so that it is left alone.
    for (kind, plural, scope) in [
        ("ResourceSlice", "resourceslices", "Cluster"),
        ("ResourceClaim", "resourceclaims", "Namespaced"),
        ("ResourceClaimTemplate", "resourceclaimtemplates", "Namespaced"),
        ("DeviceClass", "deviceclasses", "Cluster"),
    ] {
        let singular = kind.to_lowercase();
        server
            .seed_value(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.resource.k8s.io")},
                "spec": {"group": "resource.k8s.io", "scope": scope,
                    "names": {"plural": plural, "singular": singular, "kind": kind, "listKind": format!("{kind}List")},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))
            .expect("DRA kind");
    }
    for object in [
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "gpu-dra-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-dra", "pool": {"name": "gpu-dra", "generation": 1, "resourceSliceCount": 1}}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a"},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}}),
        json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode", "metadata": {"name": "gpu-a", "generation": 1}, "spec": {"gpus": []},
            "status": {"phase": "Ready", "observedGeneration": 1, "gpuCount": 1, "gpus": [{"index": 0, "uuid": "GPU-0", "model": "H100-80GB",
                "pciDeviceId": "0x233010DE", "migMode": {"current": true, "pending": true},
                "instances": [{"profile": "7g.80gb", "start": 0, "size": 8, "gpuInstanceId": 0}]}]}}),
        json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "pool"},
            "spec": {"mode": "Auto", "batching": {"idleSeconds": 1, "maxSeconds": 2}, "stabilisationSeconds": 0}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "team-a"},
            "spec": {"containers": [{"name": "main", "image": "train:1", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
    ] {
        server.seed_value(object).expect("seed");
    }
    let client = client_as(&server, CONTROLLER);
    let mut settings =
        Settings::new("controller-0", Arc::new(geometer_solver::catalog::Catalog::builtin().clone()));
    settings.lease = Some(LeaseSettings::new(NAMESPACE, "controller-0"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller::run(
        client,
        settings,
        Arc::new(Metrics::new()),
        Arc::new(Health::default()),
        async move {
            let _ = stopped.await;
        },
    ));
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while server.object::<MigNode>("", "gpu-a").and_then(|m| m.spec.plan).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the controller never applied a plan");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(());
    task.await.expect("controller task").expect("controller stops cleanly");
    accesses(&server, CONTROLLER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_rbac_allows_exactly_the_calls_the_controller_makes() {
    if !kubectl_available() {
        return;
    }
    let mut seen = controller_scenario().await;
    seen.extend(loop_scenario().await);
    for dir in kustomizations() {
        let objects = render(&dir);
        let authorizer = Authorizer::for_service_account(&objects, NAMESPACE, CONTROLLER);
        compare("controller", &dir, &authorizer, &seen, CONTROLLER_UNOBSERVED);
    }
}
