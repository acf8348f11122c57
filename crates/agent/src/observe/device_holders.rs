//! Which processes on the node hold an NVIDIA device open. NVML answers IN_USE to a destroy
//! when another client (DCGM, dcgm-exporter, the device plugin, GPU feature discovery,
//! nvidia-persistenced) holds a handle, even with no compute process on the instance, and it
//! has no call that says who. The kernel does: every process's open files are links under
//! `/proc/<pid>/fd`, and NVML clients hold `/dev/nvidiactl`, `/dev/nvidia<N>` or
//! `/dev/nvidia-caps/*` open (what `fuser -v /dev/nvidia*` shows; the GPU operator's driver
//! manager looks for the same before unloading the driver). The agent sees other processes
//! only with the host's PID namespace (`hostPID: true`, as its DaemonSet runs).

use std::fs;
use std::path::Path;

/// A process with an NVIDIA device file open.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DeviceHolder {
    pub(crate) pid: u32,
    /// `/proc/<pid>/comm`: the command name (e.g. `nv-hostengine`, `dcgm-exporter`).
    pub(crate) command: String,
}

impl std::fmt::Display for DeviceHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {})", self.command, self.pid)
    }
}

/// Processes under `proc_root` (normally `/proc`) with a file whose path starts with
/// `device_prefix` (normally `/dev/nvidia`) open, other than `own_pid`, by pid. Processes the
/// agent may not look into are skipped: this is a hint for the operator, never a safety check.
pub(crate) fn device_holders(proc_root: &Path, device_prefix: &str, own_pid: u32) -> Vec<DeviceHolder> {
    let Ok(entries) = fs::read_dir(proc_root) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == own_pid || !holds_device(&entry.path().join("fd"), device_prefix) {
            continue;
        }
        let command = fs::read_to_string(entry.path().join("comm")).unwrap_or_default().trim().to_string();
        out.push(DeviceHolder { pid, command });
    }
    out.sort();
    out
}

fn holds_device(fd_dir: &Path, device_prefix: &str) -> bool {
    let Ok(fds) = fs::read_dir(fd_dir) else { return false };
    fds.flatten()
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .any(|target| target.to_str().is_some_and(|t| t.starts_with(device_prefix)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_holding_a_device_file_is_found_with_its_command() {
        let dir = tempfile::tempdir().expect("tempdir");
        let device = dir.path().join("nvidia0");
        let _held = fs::File::create(&device).expect("device file");
        let prefix = dir.path().join("nvidia").display().to_string();
        let me = std::process::id();
        let found = device_holders(Path::new("/proc"), &prefix, 0);
        assert!(found.iter().any(|h| h.pid == me && !h.command.is_empty()), "{found:?}");
        assert!(!device_holders(Path::new("/proc"), &prefix, me).iter().any(|h| h.pid == me));
    }

    #[test]
    fn nothing_holds_a_device_nobody_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let prefix = dir.path().join("nvidia").display().to_string();
        assert!(device_holders(Path::new("/proc"), &prefix, 0).is_empty());
    }
}
