//! The server as a `tower::Service`, which `kube::Client::new` accepts: no sockets involved.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;

use super::response::Body;
use super::{router, Inner};

/// A handle on the server that serves requests in-process (see [`ApiServer::service`](super::ApiServer::service)).
#[derive(Clone)]
pub struct ApiService {
    pub(crate) inner: Arc<Inner>,
}

/// kube-apiserver's largest request body (`DefaultMaxRequestSizeBytes`, kubernetes
/// `staging/src/k8s.io/apiserver/pkg/server/config.go`): larger ones get 413.
const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

impl<B> tower::Service<http::Request<B>> for ApiService
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Display,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) => {
                    let err =
                        super::error::ApiError::bad_request(format!("could not read the request body: {e}"));
                    return Ok(super::response::error_response(&err));
                }
            };
            if bytes.len() > MAX_REQUEST_BODY_BYTES {
                let err = super::error::ApiError::new(
                    413,
                    "RequestEntityTooLarge",
                    format!("Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}"),
                );
                return Ok(super::response::error_response(&err));
            }
            Ok(router::handle(&inner, http::Request::from_parts(parts, bytes)).await)
        })
    }
}
