//! `crds/` (and its copies for kustomize and Helm) must hold exactly what `geometer crds`
//! writes, so that `kubectl apply -f crds/` installs the schema the operator was built with.
//! The files are compared with what the built binary writes, byte for byte: the test does not
//! render the CRDs itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const REGENERATE: &str = "regenerate with `cargo run -- crds --out-dir crds && cargo run -- crds --out-dir deploy/base/crds && cargo run -- crds --out-dir deploy/helm/geometer/crds` and commit the result";

/// Where the repository keeps the CRDs: `crds/`, kustomize's copy and the Helm chart's.
const CRD_DIRS: [&str; 3] = ["crds", "deploy/base/crds", "deploy/helm/geometer/crds"];

fn geometer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_geometer"))
}

/// The `.yaml` files of `dir`, by name.
fn yaml_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}; {REGENERATE}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

/// What `geometer crds --out-dir` writes into an empty directory.
fn generated() -> BTreeMap<String, Vec<u8>> {
    let out = tempfile::tempdir().unwrap();
    let run = geometer().args(["crds", "--out-dir"]).arg(out.path()).output().expect("geometer runs");
    assert!(run.status.success(), "geometer crds --out-dir failed: {}", String::from_utf8_lossy(&run.stderr));
    let files = yaml_files(out.path());
    let all: Vec<PathBuf> = std::fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(all.len(), files.len(), "geometer crds writes only the CRD files: {all:?}");
    files
}

#[test]
fn every_crd_directory_holds_exactly_what_geometer_crds_writes() {
    let generated = generated();
    assert_eq!(
        generated.keys().map(String::as_str).collect::<Vec<_>>(),
        ["mignodes.geometer.dev.yaml", "migplans.geometer.dev.yaml", "migpolicies.geometer.dev.yaml"]
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in CRD_DIRS {
        let on_disk = yaml_files(&repo.join(dir));
        for (name, text) in &generated {
            let path = format!("{dir}/{name}");
            let Some(found) = on_disk.get(name) else { panic!("{path} is missing; {REGENERATE}") };
            assert!(
                found == text,
                "{path} differs from what `geometer crds` writes ({}); {REGENERATE}",
                first_difference(found, text)
            );
        }
        let stale: Vec<&String> = on_disk.keys().filter(|name| !generated.contains_key(*name)).collect();
        assert!(
            stale.is_empty(),
            "{dir}/ holds files `geometer crds` does not write: {stale:?}; delete them or {REGENERATE}"
        );
    }
}

#[test]
fn the_stream_printed_by_geometer_crds_is_the_three_files_in_order() {
    let run = geometer().arg("crds").output().expect("geometer runs");
    assert!(run.status.success(), "geometer crds failed: {}", String::from_utf8_lossy(&run.stderr));
    let files = generated();
    let order = ["migpolicies.geometer.dev.yaml", "migplans.geometer.dev.yaml", "mignodes.geometer.dev.yaml"];
    let mut joined = Vec::new();
    for name in order {
        joined.extend_from_slice(b"---\n");
        joined.extend_from_slice(&files[name]);
    }
    assert!(
        run.stdout == joined,
        "`geometer crds` differs from its files joined with `---` ({})",
        first_difference(&run.stdout, &joined)
    );
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(std::str::from_utf8(&run.stdout).unwrap())
        .expect("the stream parses as YAML");
    let names: Vec<&str> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["migpolicies.geometer.dev", "migplans.geometer.dev", "mignodes.geometer.dev"]);
}

fn first_difference(a: &[u8], b: &[u8]) -> String {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    for (n, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("first differing line {}: {x:?}, expected {y:?}", n + 1);
        }
    }
    format!("lengths differ: {} vs {} lines", a.lines().count(), b.lines().count())
}
