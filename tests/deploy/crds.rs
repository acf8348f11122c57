//! deploy/base/crds holds copies of crds/ (kustomize cannot read files outside its directory);
//! both must be exactly what src/api generates, so that `kubectl apply -k` installs the schema
//! the operator was built with.

use geometer_testkit::deploy as deploy_support;

use deploy_support::{read, repo};
use geometer_api as api;

const REGENERATE: &str =
    "regenerate them with `cargo run -- crds --out-dir crds && cargo run -- crds --out-dir deploy/base/crds && cargo run -- crds --out-dir deploy/helm/geometer/crds`";

#[test]
fn deploy_base_crds_are_the_generated_crds() {
    let dir = repo().join("deploy/base/crds");
    let mut expected = Vec::new();
    for crd in api::crds() {
        let name = api::crd_file_name(&crd);
        let generated = api::crd_yaml(&crd).expect("CRD renders as YAML");
        let copy = read(&dir.join(&name));
        assert!(
            copy == generated,
            "deploy/base/crds/{name} differs from what src/api generates; {REGENERATE}"
        );
        assert_eq!(
            copy,
            read(&repo().join("crds").join(&name)),
            "deploy/base/crds/{name} differs from crds/{name}; {REGENERATE}"
        );
        expected.push(name);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(present, expected, "deploy/base/crds holds other files than the CRDs; {REGENERATE}");
}

#[test]
fn the_base_kustomization_lists_every_crd_file() {
    let kustomization = read(&repo().join("deploy/base/kustomization.yaml"));
    for crd in api::crds() {
        let entry = format!("- crds/{}", api::crd_file_name(&crd));
        assert!(kustomization.contains(&entry), "deploy/base/kustomization.yaml does not list {entry}");
    }
}
