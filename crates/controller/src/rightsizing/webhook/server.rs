//! The HTTPS server the API server calls: TLS with the [`Serving`] certificate, HTTP/1.1, one
//! task per connection, request bodies capped.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::certs::Serving;

/// Largest AdmissionReview read: a pod is at most 1.5 MiB in etcd, and the review carries it
/// once (twice on update, which this webhook is not registered for).
const MAX_BODY: usize = 4 << 20;
/// A client that does not finish its TLS handshake, its request's headers or its body in this
/// time is dropped (the API server gives a webhook 5 s in deploy/base).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait to be accepted. The API servers keep a few each.
const MAX_CONNECTIONS: usize = 256;
/// After a failed accept (out of file descriptors, say), wait this long before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Answers a request's path and body: a status and a JSON body.
pub type Handler = Arc<dyn Fn(&str, &[u8]) -> (StatusCode, Vec<u8>) + Send + Sync>;

/// The TLS configuration presenting whatever `serving` holds at each handshake.
pub fn tls(serving: Arc<Serving>) -> Result<TlsAcceptor, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(serving);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves until `shutdown` completes. A client that fails its handshake, is slow or sends
/// garbage only ends its own connection; a failed accept is retried.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    handler: Handler,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            () = &mut shutdown => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "the right-sizing webhook cannot accept a connection; retrying");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let (acceptor, handler) = (acceptor.clone(), handler.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let stream = match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "webhook TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "webhook TLS handshake timed out"),
            };
            let service = service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(respond(req, handler).await) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(CLIENT_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
            }
        });
    }
}

async fn respond(req: Request<Incoming>, handler: Handler) -> Response<Full<Bytes>> {
    if req.method() != Method::POST {
        return reply(StatusCode::METHOD_NOT_ALLOWED, error_body("only POST"));
    }
    let path = req.uri().path().to_string();
    let body = match tokio::time::timeout(CLIENT_TIMEOUT, Limited::new(req.into_body(), MAX_BODY).collect())
        .await
    {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(e)) => {
            let message = format!("cannot read the request body (at most {MAX_BODY} bytes): {e}");
            return reply(StatusCode::PAYLOAD_TOO_LARGE, error_body(&message));
        }
        Err(_) => return reply(StatusCode::REQUEST_TIMEOUT, error_body("the request body came too slowly")),
    };
    // The answer reads the caches (every pod of a namespace): off the async workers.
    match tokio::task::spawn_blocking(move || handler(&path, &body)).await {
        Ok((status, body)) => reply(status, body),
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, error_body(&format!("the review failed: {e}"))),
    }
}

/// `{"error": message}`.
pub fn error_body(message: &str) -> Vec<u8> {
    serde_json::json!({ "error": message }).to_string().into_bytes()
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}
