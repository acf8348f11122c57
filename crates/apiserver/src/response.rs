//! Response bodies (whole or streamed) and the JSON responses every handler builds.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use serde_json::Value;

use super::error::ApiError;

/// The body type of every response: a whole JSON document or a watch stream.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

pub(crate) fn streamed(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    use futures::StreamExt;
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(|b| Ok::<_, Infallible>(hyper::body::Frame::data(b)));
    StreamBody::new(stream).boxed_unsync()
}

pub(crate) fn bytes_response(code: u16, content_type: &str, body: impl Into<Bytes>) -> http::Response<Body> {
    http::Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, content_type)
        .header("Cache-Control", "no-cache, private")
        .body(full(body))
        .expect("static headers are valid")
}

pub(crate) fn json_response(code: u16, value: &Value) -> http::Response<Body> {
    bytes_response(code, "application/json", serde_json::to_vec(value).expect("a Value always serializes"))
}

pub(crate) fn error_response(err: &ApiError) -> http::Response<Body> {
    let mut resp = json_response(err.code, &err.to_status());
    if err.code == 429 {
        resp.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
    }
    resp
}
