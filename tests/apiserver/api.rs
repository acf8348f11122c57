//! The in-memory API server through the real kube client (tower service, no sockets):
//! CRUD semantics, resourceVersions, status subresources, selectors, patches, apply,
//! finalizers and garbage collection, eviction with PDBs, concurrency, faults, CRDs.

use std::collections::BTreeMap;

use geometer_apiserver::{ApiServer, Fault, Verb};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}]},
    }))
    .unwrap()
}

fn running_pod(name: &str, node: &str, labels: Value, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}}),
    )
    .unwrap()
}

fn api_code(err: kube::Error) -> u16 {
    match err {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error status, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_update_with_versions_and_conflicts() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let mut generated = pod("", json!({"app": "web"}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("web-".into());
    let created = pods.create(&PostParams::default(), &generated).await.unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "generateName adds 5 characters: {name}");
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(
        created.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending"),
        "a created pod starts Pending"
    );
    assert_eq!(created.metadata.generation, Some(1));

    let again = pods.create(&PostParams::default(), &pod(&name, json!({}))).await.unwrap_err();
    assert_eq!(api_code(again), 409);

    // A write with the version we read succeeds and moves the version on; the stale one fails.
    let mut first = pods.get(&name).await.unwrap();
    let mut second = first.clone();
    first.metadata.labels.get_or_insert_default().insert("writer".into(), "first".into());
    let updated = pods.replace(&name, &PostParams::default(), &first).await.unwrap();
    assert!(
        updated.metadata.resource_version.unwrap().parse::<u64>().unwrap()
            > created.metadata.resource_version.unwrap().parse::<u64>().unwrap()
    );
    assert_eq!(updated.metadata.generation, Some(1), "metadata changes keep the generation");
    second.metadata.labels.get_or_insert_default().insert("writer".into(), "second".into());
    let stale = pods.replace(&name, &PostParams::default(), &second).await.unwrap_err();
    assert_eq!(api_code(stale), 409);

    let missing = pods.get("nope").await.unwrap_err();
    assert_eq!(api_code(missing), 404);
    let elsewhere: Api<Pod> = Api::namespaced(server.client(), "no-such-namespace");
    assert_eq!(
        api_code(elsewhere.create(&PostParams::default(), &pod("x", json!({}))).await.unwrap_err()),
        404
    );
    let invalid = pods.create(&PostParams::default(), &pod("Bad_Name", json!({}))).await.unwrap_err();
    assert_eq!(api_code(invalid), 422);
}

#[tokio::test]
async fn generation_and_status_subresource() {
    let server = ApiServer::new();
    let nodes: Api<Node> = Api::all(server.client());
    nodes.create(&PostParams::default(), &node("gpu-1")).await.unwrap();

    // Status sent to the main resource is ignored...
    let mut n = nodes.get("gpu-1").await.unwrap();
    n.status = Some(serde_json::from_value(json!({"capacity": {"nvidia.com/gpu": "8"}})).unwrap());
    n.spec.as_mut().unwrap().unschedulable = Some(true);
    let after = nodes.replace("gpu-1", &PostParams::default(), &n).await.unwrap();
    assert_eq!(after.metadata.generation, Some(2), "a spec change bumps the generation");
    assert!(after.status.as_ref().and_then(|s| s.capacity.as_ref()).is_none());

    // ...and spec sent to /status is ignored.
    let mut n = after.clone();
    n.status = Some(serde_json::from_value(json!({"capacity": {"nvidia.com/gpu": "8"}})).unwrap());
    n.spec.as_mut().unwrap().unschedulable = Some(false);
    let after = nodes.replace_status("gpu-1", &PostParams::default(), &n).await.unwrap();
    assert_eq!(after.spec.unwrap().unschedulable, Some(true));
    assert_eq!(after.status.unwrap().capacity.unwrap()["nvidia.com/gpu"].0, "8");
    assert_eq!(after.metadata.generation, Some(2), "status writes keep the generation");

    let patched = nodes
        .patch_status(
            "gpu-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().conditions.unwrap()[0].type_, "Ready");
}

#[tokio::test]
async fn label_and_field_selectors() {
    let server = ApiServer::new();
    server.seed(&running_pod("a", "n1", json!({"app": "train", "tier": "gpu"}), true)).unwrap();
    server.seed(&running_pod("b", "n2", json!({"app": "train"}), true)).unwrap();
    let mut pending = pod("c", json!({"app": "serve"}));
    pending.metadata.namespace = Some("default".into());
    server.seed(&pending).unwrap();
    let pods: Api<Pod> = Api::all(server.client());
    let names = |list: kube::core::ObjectList<Pod>| {
        list.items.into_iter().map(|p| p.metadata.name.unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(names(pods.list(&ListParams::default().labels("app=train")).await.unwrap()), ["a", "b"]);
    assert_eq!(
        names(pods.list(&ListParams::default().labels("app=train,tier notin (cpu),!missing")).await.unwrap()),
        ["a", "b"]
    );
    assert_eq!(names(pods.list(&ListParams::default().labels("tier")).await.unwrap()), ["a"]);
    assert_eq!(names(pods.list(&ListParams::default().fields("spec.nodeName=n2")).await.unwrap()), ["b"]);
    assert_eq!(names(pods.list(&ListParams::default().fields("spec.nodeName=")).await.unwrap()), ["c"]);
    assert_eq!(
        names(
            pods.list(&ListParams::default().fields("status.phase!=Running,metadata.namespace=default"))
                .await
                .unwrap()
        ),
        ["c"]
    );
    assert_eq!(names(pods.list(&ListParams::default().fields("metadata.name=b")).await.unwrap()), ["b"]);
    let unsupported = pods.list(&ListParams::default().fields("spec.schedulerNam=x")).await.unwrap_err();
    assert_eq!(api_code(unsupported), 400);

    // Pagination hands out every object exactly once.
    for i in 0..7 {
        server.seed(&pod(&format!("page-{i}"), json!({"paged": "yes"}))).unwrap();
    }
    let mut seen = Vec::new();
    let mut lp = ListParams::default().labels("paged=yes").limit(3);
    loop {
        let page = pods.list(&lp).await.unwrap();
        seen.extend(names(page.clone()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(seen.len(), 7);

    let default: Api<Pod> = Api::default_namespaced(server.client());
    default
        .delete_collection(&DeleteParams::default(), &ListParams::default().labels("paged=yes"))
        .await
        .unwrap();
    assert!(pods.list(&ListParams::default().labels("paged=yes")).await.unwrap().items.is_empty());
    assert_eq!(pods.list(&ListParams::default()).await.unwrap().items.len(), 3, "others stay");
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let mut p = pod("p", json!({"a": "1"}));
    p.spec
        .as_mut()
        .unwrap()
        .containers
        .push(serde_json::from_value(json!({"name": "side", "image": "side:1"})).unwrap());
    pods.create(&PostParams::default(), &p).await.unwrap();

    let merged = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": null, "b": "2"}}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.metadata.labels.unwrap(), BTreeMap::from([("b".to_string(), "2".to_string())]));

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"note": "x"}},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"}]))
    .unwrap();
    let patched = pods.patch("p", &PatchParams::default(), &Patch::Json::<()>(ops)).await.unwrap();
    assert_eq!(patched.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("busybox:2"));
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/metadata/name", "value": "other"}])).unwrap();
    assert_eq!(
        api_code(pods.patch("p", &PatchParams::default(), &Patch::Json::<()>(failing)).await.unwrap_err()),
        422
    );

    // Strategic merge: containers merge by name, so naming one keeps the other.
    let smp = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "side", "image": "side:2"}]}})),
        )
        .await
        .unwrap();
    let images: Vec<_> =
        smp.spec.unwrap().containers.into_iter().map(|c| (c.name, c.image.unwrap())).collect();
    assert_eq!(
        images,
        [("main".to_string(), "busybox:2".to_string()), ("side".to_string(), "side:2".to_string())]
    );

    // Pods are mostly immutable; the node comes from a binding.
    let moved = pods
        .patch("p", &PatchParams::default(), &Patch::Merge(json!({"spec": {"nodeName": "n1"}})))
        .await
        .unwrap_err();
    assert_eq!(api_code(moved), 422);

    // A stale resourceVersion inside a patch is a conflict.
    let stale = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"c": "3"}}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(stale), 409);
}

#[tokio::test]
async fn server_side_apply_owns_fields() {
    let server = ApiServer::new();
    let nodes: Api<Node> = Api::all(server.client());
    let applied = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"pool": "a100", "team": "ml"}}});
    let created = nodes.patch("n", &PatchParams::apply("geometer"), &Patch::Apply(&applied)).await.unwrap();
    assert_eq!(created.metadata.labels.as_ref().unwrap()["pool"], "a100");
    assert_eq!(created.metadata.managed_fields.as_ref().unwrap()[0].manager.as_deref(), Some("geometer"));

    // Another manager changing an owned field conflicts unless it forces.
    let other =
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"pool": "h100"}}});
    let err = nodes.patch("n", &PatchParams::apply("admin"), &Patch::Apply(&other)).await.unwrap_err();
    assert_eq!(api_code(err), 409);
    let forced = nodes.patch("n", &PatchParams::apply("admin").force(), &Patch::Apply(&other)).await.unwrap();
    assert_eq!(forced.metadata.labels.as_ref().unwrap()["pool"], "h100");

    // Dropping a field from the applied configuration removes it when nobody else owns it.
    let fewer = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {}}});
    let after = nodes.patch("n", &PatchParams::apply("geometer"), &Patch::Apply(&fewer)).await.unwrap();
    let labels = after.metadata.labels.unwrap();
    assert!(!labels.contains_key("team"), "geometer stopped applying team");
    assert_eq!(labels["pool"], "h100", "admin owns pool now");

    // kube-lease-manager applies without metadata: the URL names the object.
    let nameless = json!({"apiVersion": "v1", "kind": "Node", "spec": {"podCIDR": "10.0.0.0/24"}});
    let applied = nodes.patch("n", &PatchParams::apply("leases"), &Patch::Apply(&nameless)).await.unwrap();
    assert_eq!(applied.spec.unwrap().pod_cidr.as_deref(), Some("10.0.0.0/24"));
    let wrong_kind = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "n"}});
    assert_eq!(
        api_code(nodes.patch("n", &PatchParams::apply("x"), &Patch::Apply(&wrong_kind)).await.unwrap_err()),
        400
    );

    let missing_manager = nodes.patch("n", &PatchParams::default(), &Patch::Apply(&fewer)).await.unwrap_err();
    assert_eq!(api_code(missing_manager), 422);
}

#[tokio::test]
async fn finalizers_and_owner_cascade() {
    let server = ApiServer::new();
    let client = server.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut n = node("owner");
    n.metadata.finalizers = Some(vec!["geometer.dev/drain".into()]);
    let owner = nodes.create(&PostParams::default(), &n).await.unwrap();
    let owner_ref = json!([{"apiVersion": "v1", "kind": "Node", "name": "owner", "uid": owner.metadata.uid.clone().unwrap()}]);
    for name in ["d1", "d2"] {
        let mut p = pod(name, json!({}));
        p.metadata.owner_references = Some(serde_json::from_value(owner_ref.clone()).unwrap());
        pods.create(&PostParams::default(), &p).await.unwrap();
    }

    // With a finalizer, delete only marks the object.
    let marked = nodes.delete("owner", &DeleteParams::default()).await.unwrap();
    let marked = marked.left().expect("still present while a finalizer remains");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(
        pods.list(&ListParams::default()).await.unwrap().items.len(),
        2,
        "dependents stay while the owner does"
    );
    let adding = nodes
        .patch(
            "owner",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["geometer.dev/drain", "new"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(adding), 422, "no new finalizers once deleting");

    // Removing the last finalizer deletes it, and the garbage collector takes the dependents.
    nodes
        .patch("owner", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    assert_eq!(api_code(nodes.get("owner").await.unwrap_err()), 404);
    assert!(pods.list(&ListParams::default()).await.unwrap().items.is_empty());

    // Orphan propagation keeps dependents and strips the reference.
    let owner = nodes.create(&PostParams::default(), &node("owner2")).await.unwrap();
    let mut p = pod("kept", json!({}));
    p.metadata.owner_references = Some(serde_json::from_value(json!([{"apiVersion": "v1", "kind": "Node", "name": "owner2", "uid": owner.metadata.uid.unwrap()}])).unwrap());
    pods.create(&PostParams::default(), &p).await.unwrap();
    nodes.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    assert!(pods.get("kept").await.unwrap().metadata.owner_references.is_none());

    // Preconditions protect against deleting a newer object.
    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions { resource_version: Some("1".into()), uid: None }),
        ..Default::default()
    };
    assert_eq!(api_code(pods.delete("kept", &stale).await.unwrap_err()), 409);
}

#[tokio::test]
async fn namespace_deletion_takes_its_contents() {
    let server = ApiServer::new();
    let namespaces: Api<Namespace> = Api::all(server.client());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(server.client(), "team");
    pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    namespaces.delete("team", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(namespaces.get("team").await.unwrap_err()), 404);
    assert!(server.object::<Pod>("team", "p").is_none());
}

fn pdb(name: &str, spec: Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"}, "spec": spec})).unwrap()
}

#[tokio::test]
async fn eviction_honours_disruption_budgets() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(server.client());

    // No budget: eviction deletes.
    server.seed(&running_pod("free", "n1", json!({"app": "free"}), true)).unwrap();
    pods.evict("free", &EvictParams::default()).await.unwrap();
    assert_eq!(api_code(pods.get("free").await.unwrap_err()), 404);
    assert_eq!(api_code(pods.evict("free", &EvictParams::default()).await.unwrap_err()), 404);

    // minAvailable 2 of 3 ready pods: one eviction allowed, the next refused with 429.
    for i in 0..3 {
        server.seed(&running_pod(&format!("t{i}"), "n1", json!({"app": "train"}), true)).unwrap();
    }
    pdbs.create(
        &PostParams::default(),
        &pdb("train", json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "train"}}})),
    )
    .await
    .unwrap();
    let status = pdbs.get_status("train").await.unwrap().status.unwrap();
    assert_eq!(
        (status.disruptions_allowed, status.current_healthy, status.desired_healthy, status.expected_pods),
        (1, 3, 2, 3)
    );
    pods.evict("t0", &EvictParams::default()).await.unwrap();
    assert_eq!(pdbs.get("train").await.unwrap().status.unwrap().disruptions_allowed, 0);
    let refused = pods.evict("t1", &EvictParams::default()).await.unwrap_err();
    match refused {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 429);
            assert!(s.message.contains("disruption budget"), "{}", s.message);
        }
        other => panic!("{other:?}"),
    }
    assert!(pods.get("t1").await.is_ok(), "a refused eviction deletes nothing");

    // A replacement becoming ready frees the budget again.
    server.seed(&running_pod("t3", "n2", json!({"app": "train"}), true)).unwrap();
    pods.evict("t1", &EvictParams::default()).await.unwrap();

    // maxUnavailable as a percentage, and unready pods: evictable while the budget holds.
    for i in 0..4 {
        server.seed(&running_pod(&format!("s{i}"), "n1", json!({"app": "serve"}), i != 0)).unwrap();
    }
    pdbs.create(
        &PostParams::default(),
        &pdb("serve", json!({"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "serve"}}})),
    )
    .await
    .unwrap();
    assert_eq!(
        pdbs.get("serve").await.unwrap().status.unwrap().disruptions_allowed,
        0,
        "3 healthy of 4, 3 desired"
    );
    pods.evict("s0", &EvictParams::default()).await.unwrap();
    assert_eq!(api_code(pods.evict("s1", &EvictParams::default()).await.unwrap_err()), 429);

    // Pending pods are not protected.
    let mut p = pod("waiting", json!({"app": "serve"}));
    p.metadata.namespace = Some("default".into());
    server.seed(&p).unwrap();
    pods.evict("waiting", &EvictParams::default()).await.unwrap();
}

#[tokio::test]
async fn concurrent_writers_lose_no_update() {
    let server = ApiServer::new();
    let nodes: Api<Node> = Api::all(server.client());
    nodes.create(&PostParams::default(), &node("shared")).await.unwrap();
    let writers = 8;
    let increments = 25;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let nodes = nodes.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0;
            for _ in 0..increments {
                loop {
                    let mut n = nodes.get("shared").await.unwrap();
                    let annotations = n.metadata.annotations.get_or_insert_default();
                    let count: u64 = annotations.get("count").map_or(0, |c| c.parse().unwrap());
                    annotations.insert("count".into(), (count + 1).to_string());
                    annotations.insert(format!("writer-{w}"), "yes".into());
                    match nodes.replace("shared", &PostParams::default(), &n).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 409 => conflicts += 1,
                        Err(e) => panic!("{e}"),
                    }
                    tokio::task::yield_now().await;
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for t in tasks {
        conflicts += t.await.unwrap();
    }
    let n = nodes.get("shared").await.unwrap();
    assert_eq!(n.metadata.annotations.unwrap()["count"], (writers * increments).to_string());
    assert!(conflicts > 0, "interleaved read-modify-write cycles must have collided at least once");
}

#[tokio::test]
async fn injected_faults_and_clear_errors() {
    let server = ApiServer::new();
    let nodes: Api<Node> = Api::all(server.client());
    nodes.create(&PostParams::default(), &node("n")).await.unwrap();
    server.faults().inject(Fault::error(500).verb(Verb::Get).resource("nodes").name("n").times(2));
    server.faults().inject(Fault::error(429).verb(Verb::Create).resource("pods/eviction").times(1));
    assert_eq!(api_code(nodes.get("n").await.unwrap_err()), 500);
    assert_eq!(api_code(nodes.get("n").await.unwrap_err()), 500);
    assert!(nodes.get("n").await.is_ok(), "the fault ran out");
    assert!(nodes.list(&ListParams::default()).await.is_ok(), "list is not a get");
    server.seed(&running_pod("p", "n", json!({}), true)).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    assert_eq!(api_code(pods.evict("p", &EvictParams::default()).await.unwrap_err()), 429);
    pods.evict("p", &EvictParams::default()).await.unwrap();
    assert_eq!(server.faults().hits(), 3);

    server.faults().inject(Fault::delay(std::time::Duration::from_millis(1)).resource("nodes").times(1));
    assert!(nodes.get("n").await.is_ok(), "a delay still answers");

    // What the server does not serve is a Status, never a crash.
    let gvk = GroupVersionKind::gvk("apps", "v1", "Deployment");
    let deployments: Api<DynamicObject> = Api::all_with(server.client(), &ApiResource::from_gvk(&gvk));
    assert_eq!(api_code(deployments.list(&ListParams::default()).await.unwrap_err()), 404);
    let pods_status =
        pods.patch_status("nope", &PatchParams::default(), &Patch::Strategic(json!({}))).await.unwrap_err();
    assert_eq!(api_code(pods_status), 404);
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.resource.as_deref() == Some("pods/eviction") && r.status == 429));
}

const MIGPLAN_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.dev}
spec:
  group: example.dev
  scope: Cluster
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              mode: {type: string, default: DryRun, enum: [DryRun, Auto]}
          status:
            type: object
            properties:
              phase: {type: string}
"#;

#[tokio::test]
async fn crd_created_at_run_time_is_served_with_schema_rules() {
    let server = ApiServer::new();
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    let crd: CustomResourceDefinition = serde_saphyr::from_str(MIGPLAN_CRD).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let established = crds.get("widgets.example.dev").await.unwrap();
    let conditions = established.status.unwrap().conditions.unwrap();
    assert!(conditions.iter().any(|c| c.type_ == "Established" && c.status == "True"));

    let gvk = GroupVersionKind::gvk("example.dev", "v1", "Widget");
    let widgets: Api<DynamicObject> = Api::all_with(server.client(), &ApiResource::from_gvk(&gvk));
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.dev/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 3, "unknown": true}, "status": {"phase": "Ignored"}}))
    .unwrap();
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.data["spec"], json!({"size": 3, "mode": "DryRun"}), "defaulted and pruned");
    assert!(created.data.get("status").is_none(), "create ignores status when status is a subresource");

    let bad: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.dev/v1", "kind": "Widget",
        "metadata": {"name": "w2"}, "spec": {"size": 0, "mode": "Sometimes"}}))
    .unwrap();
    match widgets.create(&PostParams::default(), &bad).await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(s.message.contains("spec.size") && s.message.contains("spec.mode"), "{}", s.message);
        }
        other => panic!("{other:?}"),
    }
    let smp = widgets
        .patch("w1", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"size": 4}})))
        .await
        .unwrap_err();
    assert_eq!(api_code(smp), 415, "strategic merge patch is for built-in types only");
    let status = widgets
        .patch_status("w1", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Ready"}})))
        .await
        .unwrap();
    assert_eq!(status.data["status"]["phase"], "Ready");

    // Deleting the CRD takes its objects and its endpoint with it.
    crds.delete("widgets.example.dev", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(widgets.list(&ListParams::default()).await.unwrap_err()), 404);
}

#[tokio::test]
async fn recorder_events_show_up_as_core_events() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let server = ApiServer::new();
    let node = server.seed(&node("gpu-1")).unwrap();
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        server.client(),
        Reporter { controller: "geometer-agent".into(), instance: Some("gpu-1".into()) },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "Repartitioned".into(),
        note: Some("3 x 2g.20gb".into()),
        action: "Reconfigure".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();

    // kubectl describe node lists core events by the involved object.
    let core: Api<CoreEvent> = Api::all(server.client());
    let selector = format!(
        "involvedObject.kind=Node,involvedObject.name=gpu-1,involvedObject.uid={}",
        node.metadata.uid.unwrap()
    );
    let found = core.list(&ListParams::default().fields(&selector)).await.unwrap().items;
    assert_eq!(found.len(), 1, "the repeat updates the same event");
    assert_eq!(found[0].message.as_deref(), Some("3 x 2g.20gb"));
    assert_eq!(found[0].reporting_component.as_deref(), Some("geometer-agent"));
    assert_eq!(found[0].series.as_ref().and_then(|s| s.count), Some(2));
}
