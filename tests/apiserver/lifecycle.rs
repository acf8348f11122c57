//! How objects leave: finalizers, owner cascades, namespace deletion, and eviction
//! against disruption budgets.

use crate::objects::{api_code, node, pdb, pod, running_pod};
use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

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
        (Some(1), Some(3), Some(2), Some(3))
    );
    pods.evict("t0", &EvictParams::default()).await.unwrap();
    assert_eq!(pdbs.get("train").await.unwrap().status.unwrap().disruptions_allowed, Some(0));
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
        Some(0),
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
