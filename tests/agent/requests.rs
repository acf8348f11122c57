//! The exact shape of the API requests the agent makes (tower-test mock service): the cordon
//! and uncordon patches, and the eviction.

use geometer_agent::{cordon, uncordon, Applied};
use geometer_agent::{evict, EvictionOutcome};
use http::{Request, Response};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::client::Body;
use kube::{Api, Client};
use serde_json::{json, Value};
use tower_test::mock::{self, Handle};

type MockHandle = Handle<Request<Body>, Response<Body>>;

fn mock_client() -> (Client, MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// The next request: method, path with query, content type and JSON body; answered with
/// `status` and `reply`.
async fn next(handle: &mut MockHandle, status: u16, reply: Value) -> (String, String, String, Value) {
    let (request, send) = handle.next_request().await.expect("a request");
    let method = request.method().to_string();
    let uri = request.uri().to_string();
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body: Value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    send.send_response(
        Response::builder().status(status).body(Body::from(serde_json::to_vec(&reply).unwrap())).unwrap(),
    );
    (method, uri, content_type, body)
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": if code < 300 { "Success" } else { "Failure" },
           "code": code, "reason": reason, "message": message})
}

fn node(unschedulable: bool, marked: bool) -> Node {
    let mut annotations = serde_json::Map::new();
    if marked {
        annotations.insert("geometer.dev/cordoned-by".into(), json!("geometer-agent"));
    }
    serde_json::from_value(json!({
        "metadata": {"name": "gpu-1", "resourceVersion": "17", "annotations": annotations},
        "spec": {"unschedulable": unschedulable},
    }))
    .unwrap()
}

#[tokio::test]
async fn cordon_is_one_merge_patch_with_the_mark_and_the_read_version() {
    let (client, mut handle) = mock_client();
    let open = node(false, false);
    let call = tokio::spawn(async move { cordon(&Api::all(client), &open).await });
    let (method, uri, content_type, body) =
        next(&mut handle, 200, serde_json::to_value(node(true, true)).unwrap()).await;
    assert_eq!(method, "PATCH");
    assert_eq!(uri, "/api/v1/nodes/gpu-1?&fieldManager=geometer-agent");
    assert_eq!(content_type, "application/merge-patch+json");
    assert_eq!(
        body,
        json!({
            "metadata": {"resourceVersion": "17", "annotations": {"geometer.dev/cordoned-by": "geometer-agent"}},
            "spec": {"unschedulable": true},
        })
    );
    assert_eq!(call.await.unwrap().unwrap(), Applied::Patched);
}

#[tokio::test]
async fn uncordon_removes_flag_and_mark_together() {
    let (client, mut handle) = mock_client();
    let ours = node(true, true);
    let call = tokio::spawn(async move { uncordon(&Api::all(client), &ours).await });
    let (method, uri, _, body) =
        next(&mut handle, 200, serde_json::to_value(node(false, false)).unwrap()).await;
    assert_eq!(
        (method.as_str(), uri.as_str()),
        ("PATCH", "/api/v1/nodes/gpu-1?&fieldManager=geometer-agent")
    );
    assert_eq!(
        body,
        json!({
            "metadata": {"resourceVersion": "17", "annotations": {"geometer.dev/cordoned-by": null}},
            "spec": {"unschedulable": null},
        })
    );
    assert_eq!(call.await.unwrap().unwrap(), Applied::Patched);
}

#[tokio::test]
async fn a_persons_cordon_sends_no_request_at_all() {
    let (client, handle) = mock_client();
    let theirs = node(true, false);
    assert_eq!(uncordon(&Api::all(client.clone()), &theirs).await.unwrap(), Applied::Nothing);
    assert_eq!(cordon(&Api::all(client), &theirs).await.unwrap(), Applied::Nothing);
    drop(handle);
}

#[tokio::test]
async fn a_node_changed_meanwhile_is_read_again_not_overwritten() {
    let (client, mut handle) = mock_client();
    let open = node(false, false);
    let call = tokio::spawn(async move { cordon(&Api::all(client), &open).await });
    next(&mut handle, 409, status(409, "Conflict", "the object has been modified")).await;
    assert_eq!(call.await.unwrap().unwrap(), Applied::Stale);
}

fn pod() -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "train-0", "namespace": "ml", "uid": "6a1f-uid"}}))
        .unwrap()
}

#[tokio::test]
async fn eviction_is_a_policy_v1_eviction_pinned_to_the_pod_uid() {
    let (client, mut handle) = mock_client();
    let call = tokio::spawn(async move { evict(&client, &pod()).await });
    let (method, uri, content_type, body) = next(&mut handle, 201, status(201, "", "")).await;
    assert_eq!(method, "POST");
    assert_eq!(uri, "/api/v1/namespaces/ml/pods/train-0/eviction");
    assert_eq!(content_type, "application/json");
    assert_eq!(
        body,
        json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "train-0", "namespace": "ml"},
            "deleteOptions": {"preconditions": {"uid": "6a1f-uid"}},
        })
    );
    assert_eq!(call.await.unwrap().unwrap(), EvictionOutcome::Evicted);
}

#[tokio::test]
async fn eviction_answers_map_to_refused_gone_or_error() {
    for (code, expected) in [
        (
            429,
            Some(EvictionOutcome::Refused {
                message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            }),
        ),
        (404, Some(EvictionOutcome::Gone)),
        (409, Some(EvictionOutcome::Gone)),
        (500, None),
    ] {
        let (client, mut handle) = mock_client();
        let call = tokio::spawn(async move { evict(&client, &pod()).await });
        next(
            &mut handle,
            code,
            status(code, "Whatever", "Cannot evict pod as it would violate the pod's disruption budget."),
        )
        .await;
        let got = call.await.unwrap();
        match expected {
            Some(outcome) => assert_eq!(got.unwrap(), outcome, "HTTP {code}"),
            None => match got {
                Err(kube::Error::Api(s)) => {
                    assert_eq!((s.code, s.reason.as_str()), (code, "Whatever"), "HTTP {code}")
                }
                other => panic!("HTTP {code} is an error from the API server, got {other:?}"),
            },
        }
    }
}
