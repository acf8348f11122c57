//! Merge, JSON and strategic-merge patches, server-side apply and field ownership, and
//! concurrent writers.

use std::collections::BTreeMap;

use crate::objects::{api_code, node, pod};
use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

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
