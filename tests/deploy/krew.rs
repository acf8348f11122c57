//! The krew package of `kubectl geometer`: scripts/krew-package.sh packs the built binary and
//! fills deploy/krew/geometer.yaml; the manifest names the archive's sha256 and its `bin`, and
//! the unpacked plugin answers through kubectl's own plugin discovery (`kubectl geometer`).

use std::process::Command;

use geometer_testkit::control_plane::kubectl_or_skip;
use geometer_testkit::deploy::repo;
use serde_json::Value;

#[test]
fn the_packed_plugin_matches_its_manifest_and_runs_under_kubectl() {
    let Some(kubectl) = kubectl_or_skip() else { return };
    let out = tempfile::tempdir().unwrap();
    let packed = Command::new("bash")
        .arg(repo().join("scripts/krew-package.sh"))
        .arg(env!("CARGO_BIN_EXE_geometer"))
        .arg(out.path())
        .output()
        .unwrap();
    assert!(packed.status.success(), "{}", String::from_utf8_lossy(&packed.stderr));
    let manifest: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(out.path().join("geometer.yaml")).unwrap()).unwrap();
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "geometer");
    assert!(manifest["spec"]["version"].as_str().unwrap().starts_with('v'), "{manifest}");
    let platform = &manifest["spec"]["platforms"][0];
    assert_eq!(platform["bin"], "kubectl-geometer");
    let archive = platform["uri"].as_str().unwrap().strip_prefix("file://").unwrap().to_string();
    let sum = Command::new("sha256sum").arg(&archive).output().unwrap();
    let sum = String::from_utf8(sum.stdout).unwrap();
    assert_eq!(
        sum.split_whitespace().next(),
        platform["sha256"].as_str(),
        "the manifest names the archive's sha256"
    );

    let unpacked = tempfile::tempdir().unwrap();
    let untar = Command::new("tar").args(["xzf", &archive, "-C"]).arg(unpacked.path()).status().unwrap();
    assert!(untar.success());
    let path = format!("{}:{}", unpacked.path().display(), std::env::var("PATH").unwrap_or_default());
    let help =
        Command::new(&kubectl).args(["geometer", "plan", "--help"]).env("PATH", path).output().unwrap();
    assert!(help.status.success(), "{}", String::from_utf8_lossy(&help.stderr));
    assert!(String::from_utf8_lossy(&help.stdout).contains("--snapshot"));
}
