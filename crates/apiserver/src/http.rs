//! Plain HTTP on a loopback port (hyper 1), so that `kubectl` can talk to the server.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use super::service::ApiService;
use super::Inner;

/// Keeps the HTTP listener running; dropping it (or [`ServeHandle::shutdown`]) stops the
/// listener and closes open connections, watches included.
pub struct ServeHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl ServeHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for ServeHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn serve(inner: Arc<Inner>, addr: &str) -> std::io::Result<(SocketAddr, ServeHandle)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    inner.set_served_at(local);
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    // As kube-apiserver (Go sets TCP_NODELAY on every connection): without it a
                    // watch event written right after another waits for the client's delayed
                    // ACK, up to 40 ms on Linux (benches/apiserver.rs measured it).
                    let _ = stream.set_nodelay(true);
                    let service = ApiService { inner: inner.clone() };
                    connections.spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            let mut service = service.clone();
                            async move { Ok::<_, Infallible>(tower::Service::call(&mut service, req).await.unwrap_or_else(|e| match e {})) }
                        });
                        let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                _ = &mut stop_rx => break,
            }
        }
        connections.shutdown().await;
    });
    Ok((local, ServeHandle { addr: local, stop: Some(stop_tx), task }))
}
