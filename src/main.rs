//! The `geometer` binary: a thin shell over the library (also usable as `kubectl-geometer`).
use std::process::ExitCode;

/// mimalloc, not glibc's malloc. A planning round at 5,000 nodes / 150,000 pods allocates its
/// snapshot anew (150,000 planner pods, 280,000 GPU instances); glibc handed those pages back
/// and faulted them in again every round. `benches/controller_scale.rs`, same machine and day:
/// window -> plan 3.36-3.83 -> 2.77-2.90 s, peak RSS 1,116-1,141 -> 1,081-1,092 MiB
/// (BENCHMARKS.md; jemalloc gave 2.77-3.07 s and 1,042-1,063 MiB, and builds 1.5 min longer).
/// Its v2 line (Cargo.toml): v3 holds freed pages for a second, and `geometer plan` on a
/// 5,000-node DRA List peaked 90 MiB higher with what its decoding threads had freed.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match geometer::cli::parse(geometer::cli::plugin_args(std::env::args_os())) {
        Ok(cli) => geometer::cli::run(cli),
        Err(code) => code,
    }
}
