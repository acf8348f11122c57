//! Where the control-plane binaries are: `GEOMETER_CONTROL_PLANE_BIN`, or the cache folder of
//! `scripts/k8s-control-plane.sh` (which `make control-plane` and `make test` run). kubectl is
//! always the one built there from the control plane's own Kubernetes release, never the one on
//! PATH, whose version may not match kube-apiserver's.

use std::path::PathBuf;
use std::process::Command;

/// Set to `1` to make a missing control plane fail the tests instead of skipping them.
pub const REQUIRE_ENV: &str = "GEOMETER_REQUIRE_CONTROL_PLANE";

#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub apiserver: PathBuf,
    pub scheduler: PathBuf,
    pub controller_manager: PathBuf,
    /// kubectl of the same Kubernetes release, which the tests drive the cluster with.
    pub kubectl: PathBuf,
}

fn folder() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("GEOMETER_CONTROL_PLANE_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let script = crate::deploy::repo().join("scripts/k8s-control-plane.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--print")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The four binaries, or what is missing and how to build it.
pub fn binaries() -> Result<Binaries, String> {
    let dir = folder()?;
    let bins = Binaries {
        etcd: dir.join("etcd"),
        apiserver: dir.join("kube-apiserver"),
        scheduler: dir.join("kube-scheduler"),
        controller_manager: dir.join("kube-controller-manager"),
        kubectl: dir.join("kubectl"),
    };
    for b in [&bins.etcd, &bins.apiserver, &bins.scheduler, &bins.controller_manager, &bins.kubectl] {
        if !b.is_file() {
            return Err(format!(
                "the real control plane is not built ({} is missing); run `make control-plane` \
                 (make test does) or set GEOMETER_CONTROL_PLANE_BIN to a folder with etcd, kubectl and the kube binaries",
                b.display()
            ));
        }
    }
    Ok(bins)
}

/// `helm`, built into the control plane's folder by the same script, or what is missing.
pub fn helm() -> Result<PathBuf, String> {
    tool("helm")
}

/// `promtool`, likewise.
pub fn promtool() -> Result<PathBuf, String> {
    tool("promtool")
}

/// `kubectl`, built by the same script from the control plane's Kubernetes release (so that
/// its version is kube-apiserver's), or what is missing. Never the kubectl on PATH.
pub fn kubectl() -> Result<PathBuf, String> {
    tool("kubectl")
}

/// The path of [`kubectl`] for a test that runs it; `None` (the test skips, saying why) when it
/// is not built, and a failed test instead when the control plane is required ([`REQUIRE_ENV`]).
pub fn kubectl_or_skip() -> Option<PathBuf> {
    tool_or_skip(kubectl())
}

fn tool(name: &str) -> Result<PathBuf, String> {
    let path = folder()?.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{name} is not built ({} is missing); run `make control-plane` (make test does)",
            path.display()
        ))
    }
}

/// The tool `found`, or `None` (the test skips, saying why) unless the control plane is
/// required ([`REQUIRE_ENV`]), when its absence fails the test.
pub fn tool_or_skip(found: Result<PathBuf, String>) -> Option<PathBuf> {
    match found {
        Ok(path) => Some(path),
        Err(why) if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") => panic!("{why}"),
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}
