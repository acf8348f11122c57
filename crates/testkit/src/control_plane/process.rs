//! A component (of the control plane, or Geometer's own) as a child process with its output in
//! a log file.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

pub(crate) struct Process {
    name: String,
    child: Mutex<Child>,
    log: PathBuf,
}

impl Process {
    pub(crate) fn spawn(name: &str, binary: &Path, args: &[String], log: &Path) -> Process {
        Process::spawn_with_env(name, binary, args, log, &[])
    }

    pub(crate) fn spawn_with_env(
        name: &str,
        binary: &Path,
        args: &[String],
        log: &Path,
        env: &[(&str, &Path)],
    ) -> Process {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new(binary);
        command.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        Process { name: name.to_string(), child: Mutex::new(child), log: log.to_path_buf() }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn exited(&self) -> Option<ExitStatus> {
        self.child.lock().unwrap_or_else(|p| p.into_inner()).try_wait().ok().flatten()
    }

    /// The last `lines` of its output.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, as a kubelet stopping the pod does, and reap; SIGKILL if it has not exited
    /// within `grace`.
    pub(crate) fn terminate(self, grace: std::time::Duration) -> Option<ExitStatus> {
        let mut child = self.child.into_inner().unwrap_or_else(|p| p.into_inner());
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// SIGKILL and reap: nothing outlives its test, and a kill is a crash, not a shutdown.
    pub(crate) fn stop(self) {
        let mut child = self.child.into_inner().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A loopback port free now, taken again by the component right after. It is drawn below the
/// kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`): a port from inside it
/// can be handed to any outgoing connection in the gap before the component binds it, which
/// once failed a run with "bind: address already in use". Ports are drawn in turn from a start
/// that depends on the process id, so two tests of one binary never draw the same one.
pub(crate) fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = (PORTS_FROM, ephemeral_start().max(PORTS_FROM + 1000));
    let span = u32::from(high - low);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let port = low + ((start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {low}..{high}")
}

/// The lowest port drawn: above the registered ports most services listen on.
const PORTS_FROM: u16 = 20000;

/// Where the kernel's ephemeral ports begin (Linux's default when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}
