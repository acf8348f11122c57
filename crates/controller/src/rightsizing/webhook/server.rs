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
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::certs::Serving;

/// Largest AdmissionReview read: a pod is at most 1.5 MiB in etcd, and the review carries it
/// once (twice on update, which this webhook is not registered for).
const MAX_BODY: usize = 4 << 20;
/// A client that does not finish its TLS handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Serves until `shutdown` completes. A client that fails its handshake or sends garbage only
/// ends its own connection.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    handler: Handler,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = &mut shutdown => return Ok(()),
        };
        let (acceptor, handler) = (acceptor.clone(), handler.clone());
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "webhook TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "webhook TLS handshake timed out"),
            };
            let service = service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(respond(req, &handler).await) }
            });
            if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
            }
        });
    }
}

async fn respond(req: Request<Incoming>, handler: &Handler) -> Response<Full<Bytes>> {
    if req.method() != Method::POST {
        return reply(StatusCode::METHOD_NOT_ALLOWED, b"{\"error\":\"only POST\"}".to_vec());
    }
    let path = req.uri().path().to_string();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            let message = serde_json::json!({ "error": format!("cannot read the request body (at most {MAX_BODY} bytes): {e}") });
            return reply(StatusCode::PAYLOAD_TOO_LARGE, message.to_string().into_bytes());
        }
    };
    let (status, body) = handler(&path, &body);
    reply(status, body)
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}
