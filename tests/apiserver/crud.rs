//! Reads and writes through the real kube client: resourceVersions and conflicts,
//! generation and the status subresource, label and field selectors.

use crate::objects::{api_code, node, pod, running_pod};
use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

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
