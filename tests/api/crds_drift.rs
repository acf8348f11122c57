//! `crds/` must hold exactly what the code generates, so that `kubectl apply -f crds/` installs
//! the schema the operator was built with.

use std::collections::BTreeSet;
use std::path::Path;

use geometer_api as api;

const REGENERATE: &str = "regenerate with `cargo run -- crds --out-dir crds` and commit the result";

#[test]
fn crds_directory_matches_the_generated_crds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut expected = BTreeSet::new();
    for crd in api::crds() {
        let name = api::crd_file_name(&crd);
        let path = dir.join(&name);
        let generated = api::crd_yaml(&crd).expect("CRD renders as YAML");
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}; {REGENERATE}", path.display()));
        assert!(
            on_disk == generated,
            "{} differs from what src/api generates (first differing line: {}); {REGENERATE}",
            path.display(),
            first_difference(&on_disk, &generated)
        );
        expected.insert(name);
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}; {REGENERATE}", dir.display()))
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    let stale: Vec<_> = present.difference(&expected).collect();
    assert!(stale.is_empty(), "crds/ holds files no CRD generates: {stale:?}; delete them or {REGENERATE}");
}

#[test]
fn the_stream_printed_by_geometer_crds_is_the_three_files_in_order() {
    let stream = api::crds_yaml().expect("CRDs render as YAML");
    let joined: String =
        api::crds().iter().map(|crd| format!("---\n{}", api::crd_yaml(crd).unwrap())).collect();
    assert_eq!(stream, joined);
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&stream).expect("the stream parses as YAML");
    let names: Vec<&str> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["migpolicies.geometer.dev", "migplans.geometer.dev", "mignodes.geometer.dev"]);
}

fn first_difference(a: &str, b: &str) -> String {
    for (n, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}: on disk {x:?}, generated {y:?}", n + 1);
        }
    }
    format!("lengths differ: {} vs {} lines", a.lines().count(), b.lines().count())
}
