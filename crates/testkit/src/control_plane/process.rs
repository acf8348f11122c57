//! A component (of the control plane, or Geometer's own) as a child process with its output in
//! a log file.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
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

    /// SIGKILL and reap: nothing outlives its test, and a kill is a crash, not a shutdown.
    pub(crate) fn stop(self) {
        let mut child = self.child.into_inner().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A loopback port free now (the kernel's choice; taken again by the component right after).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}
