//! Rendering `deploy/` with the real `kubectl kustomize` (the control plane's kubectl, see
//! [`crate::control_plane::kubectl`]), for the deploy tests.
#![allow(dead_code)]

pub mod rbac;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `deploy/base` and every directory under `deploy/overlays`, as paths relative to the repo.
pub fn kustomizations() -> Vec<String> {
    let mut dirs = vec!["deploy/base".to_string()];
    let overlays = repo().join("deploy/overlays");
    let mut names: Vec<String> = std::fs::read_dir(&overlays)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", overlays.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("kustomization.yaml").exists())
        .map(|e| format!("deploy/overlays/{}", e.file_name().to_string_lossy()))
        .collect();
    names.sort();
    dirs.extend(names);
    dirs
}

/// Whether the control plane's kubectl is built; says so on stderr when it is not, so a skipped
/// test is visible, and fails the test instead when the control plane is required
/// ([`crate::control_plane::REQUIRE_ENV`]).
pub fn kubectl_available() -> bool {
    crate::control_plane::kubectl_or_skip().is_some()
}

/// The objects `kubectl kustomize DIR` renders. Panics with kubectl's message when it fails.
pub fn render(dir: &str) -> Vec<Value> {
    let kubectl = crate::control_plane::kubectl().unwrap_or_else(|why| panic!("{why}"));
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(repo().join(dir))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "kubectl kustomize {dir} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("kustomize prints UTF-8");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("kubectl kustomize {dir} printed no YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The one object of `kind` named `name`.
pub fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendering"))
}

/// The one `K` named `name`, as its type.
pub fn object_as<K>(objects: &[Value], name: &str) -> K
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let kind = K::kind(&());
    serde_json::from_value(object(objects, &kind, name).clone())
        .unwrap_or_else(|e| panic!("{kind} {name} does not parse: {e}"))
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}
