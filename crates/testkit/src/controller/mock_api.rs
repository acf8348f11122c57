//! A scripted API server for request-shape tests (kube-rs's tower-test pattern): the test
//! states each request it expects and the answer, and fails on anything else.

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::Value;
use tower_test::mock::{self, Handle};

pub struct MockApi {
    handle: Handle<Request<Body>, Response<Body>>,
}

/// One request as the server got it.
#[derive(Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    pub body: Value,
}

pub fn pair() -> (kube::Client, MockApi) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), MockApi { handle })
}

impl MockApi {
    /// Waits for the next request, checks method and path, answers `status` with `body`.
    pub async fn expect(&mut self, method: &str, path: &str, status: u16, answer: Value) -> Seen {
        let (request, send) = self
            .handle
            .next_request()
            .await
            .unwrap_or_else(|| panic!("expected {method} {path}, got no request"));
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("request body");
        let seen = Seen {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_string()),
            body: if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("JSON body")
            },
        };
        assert_eq!((seen.method.as_str(), seen.path.as_str()), (method, path), "unexpected request {seen:?}");
        let response = Response::builder()
            .status(StatusCode::from_u16(status).unwrap())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&answer).unwrap()))
            .unwrap();
        send.send_response(response);
        seen
    }

    /// Asserts that no further request comes (call after the code under test finished and the
    /// client was dropped).
    pub async fn expect_no_more(mut self) {
        if let Some((request, _)) = self.handle.next_request().await {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}

/// A Kubernetes `Status` error body.
pub fn status_error(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "code": code, "reason": reason, "message": message
    })
}
