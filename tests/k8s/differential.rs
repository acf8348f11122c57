//! The same requests against the in-memory API server and the real kube-apiserver: the answers
//! Geometer relies on (status codes, eviction answers, PDB status, graceful deletion, optimistic
//! concurrency, server-side apply ownership, CRD validation, list-type uniqueness) must agree.
//! Each step records what a client observes; the two records are compared step by step.

use std::time::Duration;

use std::fmt::Debug;

use geometer_apiserver::ApiServer;
use geometer_testkit::control_plane::{start_or_skip, Identity};
use geometer_testkit::real_cluster::install;
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "diff";

/// What a client sees of an answer: the status code of an error, or `ok` and what matters.
fn seen<T: Debug>(result: Result<T, kube::Error>, what: impl FnOnce(T) -> String) -> String {
    match result {
        Ok(v) => format!("ok {}", what(v)),
        Err(kube::Error::Api(e)) => format!("error {} {}", e.code, e.reason),
        Err(e) => format!("client error {e}"),
    }
}

async fn observe(client: kube::Client) -> Vec<(&'static str, String)> {
    let mut steps: Vec<(&'static str, String)> = Vec::new();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());

    // The pod's node exists (the real pod garbage collector deletes pods of missing nodes).
    let n1: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    nodes.create(&PostParams::default(), &n1).await.unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox:1"}]},
        "status": {"phase": "Running"},
    }))
    .unwrap();
    // A new namespace takes pods once its default ServiceAccount exists (real server).
    let created = wait_until(
        "the pod created",
        || async { pods.create(&PostParams::default(), &pod).await.ok() },
        String::new,
    )
    .await;
    let phase = |p: Pod| format!("{:?}", p.status.and_then(|s| s.phase));
    for (what, resource, value) in [
        ("a pod whose cpu request is not a quantity", "cpu", "plenty"),
        ("a pod asking for 1.5 of an extended resource", "example.com/gpu", "1.5"),
        ("a pod asking for 500m of an extended resource", "example.com/gpu", "500m"),
    ] {
        let bad = json!({"metadata": {"name": "bad-quantity"},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox:1",
                "resources": {"limits": {resource: value}, "requests": {resource: value}}}]}});
        let request = http::Request::post(format!("/api/v1/namespaces/{NS}/pods"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&bad).unwrap())
            .unwrap();
        steps.push((what, seen(client.request_text(request).await, |_| String::new())));
    }
    steps.push(("create a pod with a status: the status is dropped", phase(created)));
    let running =
        json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let patched = pods.patch_status("web", &PatchParams::default(), &Patch::Merge(&running)).await;
    steps.push(("patch the pod's status", seen(patched, phase)));

    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let status = wait_until(
        "the budget's status",
        || async { pdbs.get("web").await.ok()?.status.filter(|s| s.expected_pods == Some(1)) },
        String::new,
    )
    .await;
    steps.push((
        "PDB status (allowed, healthy, desired, expected)",
        format!(
            "{:?} {:?} {:?} {:?}",
            status.disruptions_allowed, status.current_healthy, status.desired_healthy, status.expected_pods
        ),
    ));
    let refused = pods.evict("web", &EvictParams::default()).await;
    steps.push(("evict against the budget", seen(refused, |_| String::new())));
    pdbs.delete("web", &DeleteParams::default()).await.unwrap();
    let evicted = pods.evict("web", &EvictParams::default()).await;
    steps.push(("evict without a budget", seen(evicted, |s| format!("{:?}", s.code))));
    let huge: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "huge"}, "data": {"blob": "x".repeat(4 << 20)},
    }))
    .unwrap();
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), NS);
    let too_large = configmaps.create(&PostParams::default(), &huge).await;
    steps.push(("a 4 MiB request body", seen(too_large, |_| String::new())));
    let terminating = pods.get("web").await;
    let marked = |p: Pod| format!("terminating {}", p.metadata.deletion_timestamp.is_some());
    steps.push(("the evicted pod", seen(terminating, marked)));
    let again = pods.evict("web", &EvictParams::default()).await;
    steps.push(("evict the terminating pod", seen(again, |s| format!("{:?}", s.code))));
    let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    let deleted = pods.delete("web", &now).await;
    steps.push(("delete it with grace 0", seen(deleted, |d| format!("left {}", d.is_left()))));
    steps.push(("get it", seen(pods.get("web").await, |_| String::new())));

    // Optimistic concurrency on an object no controller of the control plane touches (the
    // node-lifecycle controller updates Nodes on its own).
    let resource = kube::api::ApiResource::erase::<geometer_api::MigPolicy>(&());
    let policies: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
    let policy = json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "rv"}, "spec": {"mode": "DryRun"}});
    let policy =
        policies.create(&PostParams::default(), &serde_json::from_value(policy).unwrap()).await.unwrap();
    let read = policy.metadata.resource_version.clone().unwrap();
    let change = |mode: &str| json!({"metadata": {"resourceVersion": read}, "spec": {"mode": mode}});
    let mode = |p: kube::api::DynamicObject| p.data["spec"]["mode"].to_string();
    let first = policies.patch("rv", &PatchParams::default(), &Patch::Merge(&change("Approve"))).await;
    steps.push(("merge patch at the read resourceVersion", seen(first, mode)));
    let stale = policies.patch("rv", &PatchParams::default(), &Patch::Merge(&change("Auto"))).await;
    steps.push(("merge patch at a stale resourceVersion", seen(stale, |_| String::new())));
    let garbled = json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "rv", "resourceVersion": "abc"}, "spec": {"mode": "Auto"}});
    let garbled =
        policies.replace("rv", &PostParams::default(), &serde_json::from_value(garbled).unwrap()).await;
    steps.push(("update with a resourceVersion that is not a number", seen(garbled, |_| String::new())));
    for (what, query) in [
        ("list with resourceVersionMatch=Bogus", "resourceVersion=1&resourceVersionMatch=Bogus"),
        ("list with resourceVersionMatch but no resourceVersion", "resourceVersionMatch=Exact"),
        ("list with sendInitialEvents", "sendInitialEvents=true"),
        ("watch with sendInitialEvents but no resourceVersionMatch", "watch=true&sendInitialEvents=true"),
        (
            "watch with sendInitialEvents=maybe",
            "watch=true&sendInitialEvents=maybe&resourceVersionMatch=NotOlderThan",
        ),
    ] {
        let request =
            http::Request::get(format!("/api/v1/namespaces/{NS}/pods?{query}")).body(Vec::new()).unwrap();
        // A watch the server accepts streams until closed: one that answers nothing within a
        // few seconds was accepted.
        let answered = tokio::time::timeout(Duration::from_secs(3), client.request_text(request)).await;
        let seen =
            answered.map_or_else(|_| "accepted (streaming)".to_string(), |a| seen(a, |_| String::new()));
        steps.push((what, seen));
    }

    let node: Node = serde_json::from_value(json!({"metadata": {"name": "diff-node"}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let label = |value: &str| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "diff-node", "labels": {"k": value}}});
    let labels = |n: Node| format!("{:?}", n.metadata.labels.and_then(|l| l.get("k").cloned()));
    let a = nodes.patch("diff-node", &PatchParams::apply("manager-a"), &Patch::Apply(label("a"))).await;
    steps.push(("apply a label as manager-a", seen(a, labels)));
    let b = nodes.patch("diff-node", &PatchParams::apply("manager-b"), &Patch::Apply(label("b"))).await;
    steps.push(("apply the same label as manager-b", seen(b, |_| String::new())));
    let forced =
        nodes.patch("diff-node", &PatchParams::apply("manager-b").force(), &Patch::Apply(label("b"))).await;
    steps.push(("force it", seen(forced, labels)));
    let gone = nodes.delete("diff-node", &DeleteParams::default()).await;
    steps.push(("delete a node", seen(gone, |d| format!("left {}", d.is_left()))));

    let bad = json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "bad"}, "spec": {"mode": "Sometimes"}});
    let bad: kube::api::DynamicObject = serde_json::from_value(bad).unwrap();
    let created = policies.create(&PostParams::default(), &bad).await;
    steps.push(("create a MigPolicy with mode Sometimes", seen(created, |_| String::new())));
    steps.extend(list_type_steps(&policies).await);
    steps
}

/// A refusal with its causes (field, type, message), for steps where what is wrong matters.
fn refusal<T: Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(e)) => {
            let causes = e.details.iter().flat_map(|d| &d.causes);
            let mut causes: Vec<String> =
                causes.map(|c| format!("{} {} {}", c.field, c.reason, c.message)).collect();
            causes.sort();
            format!("error {} {} {}", e.code, e.reason, causes.join("; "))
        }
        other => seen(other, |_| String::new()),
    }
}

/// `x-kubernetes-list-type` rules: a `set` list with an item twice, a `map` list with a key twice.
async fn list_type_steps(policies: &Api<kube::api::DynamicObject>) -> Vec<(&'static str, String)> {
    let mut steps = Vec::new();
    let twice = json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "twice"}, "spec": {"allowedProfiles": ["1g.10gb", "1g.10gb"]}});
    let created = policies.create(&PostParams::default(), &serde_json::from_value(twice).unwrap()).await;
    steps.push(("create a MigPolicy allowing a profile twice (a set)", refusal(created)));
    // `status.conditions` is the map list (keyed by type). A create drops the status (status
    // subresource), so the repeated condition is refused only when the status is written.
    let condition = |status: &str| json!({"type": "Ready", "status": status, "reason": "Checked", "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"});
    let status = json!({"conditions": [condition("True"), condition("False")]});
    let policy = json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "conditions"}, "spec": {}, "status": status.clone()});
    let created = policies.create(&PostParams::default(), &serde_json::from_value(policy).unwrap()).await;
    let kept = |p: kube::api::DynamicObject| format!("status {:?}", p.data.get("status"));
    steps.push(("create a MigPolicy whose status has a condition twice", seen(created, kept)));
    let patch = Patch::Merge(json!({"status": status}));
    let written = policies.patch_status("conditions", &PatchParams::default(), &patch).await;
    steps.push(("write a status with a condition type twice (a map list)", refusal(written)));
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_server_answers_as_kube_apiserver_does() {
    let Some(cp) = start_or_skip("differential").await else { return };
    install(&cp);
    let real = cp.raw_client(Identity::Admin).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(real.clone()).create(&PostParams::default(), &ns).await.unwrap();

    let memory = ApiServer::new();
    memory.set_graceful_pod_deletion(true);
    for crd in geometer_api::crds() {
        memory.seed(&crd).unwrap();
    }
    memory.seed(&ns).unwrap();

    let expected = observe(real).await;
    let got = observe(memory.client()).await;
    let differences: Vec<String> = expected
        .iter()
        .zip(&got)
        .filter(|(r, m)| r != m)
        .map(|((step, r), (_, m))| format!("{step}: kube-apiserver {r:?}, in-memory {m:?}"))
        .collect();
    assert!(differences.is_empty(), "the servers differ:\n{}", differences.join("\n"));
}
