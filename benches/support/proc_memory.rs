//! A process's memory as Linux reports it in `/proc/<pid>/status`.

/// `VmHWM` (peak resident) and `VmRSS` (resident now) of process `pid`, in MiB; 0 where the
/// file or field cannot be read.
pub(crate) fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Peak resident memory (`VmHWM`) of this process, in MiB.
#[allow(dead_code)] // not every bench that includes this file reads its own memory
pub(crate) fn own_peak() -> f64 {
    memory(std::process::id()).0
}
