//! The HTTP endpoints of the controller and of each agent: `/metrics` (Prometheus), `/healthz`
//! (liveness) and `/readyz` (readiness: for the controller, the caches are filled and it can
//! act or stand by).

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::exposition;

/// The OpenMetrics text served on `/metrics`, read at each scrape.
pub type MetricsText = Arc<dyn Fn() -> String + Send + Sync>;

/// Health as the probes see it. Not ready until [`Health::set_ready`]; unhealthy once
/// [`Health::set_failed`] says why (the kubelet then restarts the pod).
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    /// Set while a part that must serve before the replica is ready does not (the right-sizing
    /// webhook without its certificate).
    not_serving: AtomicBool,
    failed: Mutex<Option<String>>,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && !self.not_serving.load(Ordering::SeqCst)
    }

    /// Whether the parts that must serve do (see [`Health::is_ready`]).
    pub fn set_serving(&self, serving: bool) {
        self.not_serving.store(!serving, Ordering::SeqCst);
    }

    pub fn set_failed(&self, why: impl Into<String>) {
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.into());
    }

    fn failure(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Serves until `shutdown` completes. Each connection runs on its own task; a broken client
/// only ends its own connection.
pub async fn serve(
    listener: TcpListener,
    metrics: MetricsText,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = &mut shutdown => return Ok(()),
        };
        let (metrics, health) = (metrics.clone(), health.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let response = respond(&req, &metrics, &health);
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!(error = %e, "metrics connection ended with an error");
            }
        });
    }
}

fn respond(req: &Request<Incoming>, metrics: &MetricsText, health: &Health) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".to_string());
    }
    match req.uri().path() {
        "/metrics" => {
            let accept = req.headers().get(http::header::ACCEPT).and_then(|a| a.to_str().ok());
            let (body, format) = if exposition::wants_openmetrics(accept) {
                (metrics(), exposition::OPENMETRICS)
            } else {
                (exposition::classic(&metrics()), exposition::CLASSIC)
            };
            let mut response = text(StatusCode::OK, body);
            response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(format));
            response
        }
        "/healthz" => match health.failure() {
            None => text(StatusCode::OK, "ok\n".to_string()),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {why}\n")),
        },
        "/readyz" if health.is_ready() => text(StatusCode::OK, "ok\n".to_string()),
        "/readyz" => {
            text(StatusCode::SERVICE_UNAVAILABLE, "not ready: caches are still filling\n".to_string())
        }
        other => text(
            StatusCode::NOT_FOUND,
            format!("no such endpoint {other}; try /metrics, /healthz or /readyz\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let status = raw[9..12].parse().unwrap();
        let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
    }

    #[tokio::test]
    async fn probes_and_metrics_answer_over_http() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(crate::runtime::metrics::Metrics::new());
        metrics.set_leader(true);
        let health = Arc::new(Health::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let text: MetricsText = Arc::new(move || metrics.encode());
        let server = tokio::spawn(serve(listener, text, health.clone(), async {
            let _ = stopped.await;
        }));

        assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_string()));
        assert_eq!(get(addr, "/readyz").await.0, 503);
        health.set_ready(true);
        assert_eq!(get(addr, "/readyz").await, (200, "ok\n".to_string()));
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("geometer_leader 1"), "{body}");
        assert_eq!(get(addr, "/nope").await.0, 404);
        health.set_failed("leader lease lost and could not be released");
        assert_eq!(
            get(addr, "/healthz").await,
            (503, "unhealthy: leader lease lost and could not be released\n".to_string())
        );

        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
