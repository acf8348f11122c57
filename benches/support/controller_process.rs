//! `geometer controller` as its own process against the in-memory API server over HTTP, so
//! that its memory (`/proc/<pid>/status`) is its own. Shared by the scale benches.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use geometer_apiserver::{ApiServer, ServeHandle};

/// The controller process; killed when dropped.
pub(crate) struct Controller {
    child: Child,
    metrics_port: u16,
    _kubeconfig: tempfile::TempDir,
    _serving: ServeHandle,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Controller {
    /// Serves `server` over HTTP and starts `geometer controller` against it.
    pub(crate) async fn start(server: &ApiServer) -> Controller {
        let (_addr, serving) = server.serve_http("127.0.0.1:0").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let metrics_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(env!("CARGO_BIN_EXE_geometer"))
            .args([
                "controller",
                "--no-leader-election",
                "--metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
            ])
            .env("KUBECONFIG", &kubeconfig)
            // `GEOMETER_BENCH_LOG=info` shows the controller's rounds on stderr.
            .env("GEOMETER_LOG", std::env::var("GEOMETER_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .spawn()
            .expect("start geometer controller");
        Controller { child, metrics_port, _kubeconfig: dir, _serving: serving }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `/readyz` answers 200 (every cache holds a full list); returns how long that
    /// took.
    pub(crate) async fn ready(&self, limit: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let ok = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).is_ok_and(|mut s| {
                use std::io::{Read, Write};
                let _ = s.write_all(b"GET /readyz HTTP/1.0\r\n\r\n");
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/1.0 200")
            });
            if ok {
                return started.elapsed();
            }
            assert!(started.elapsed() < limit, "controller never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
