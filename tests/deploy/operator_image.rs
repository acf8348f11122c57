//! The operator's image (`--no-default-features --features highs`, as the Dockerfile builds it)
//! contains no test infrastructure: no in-memory API server, simulated cluster or simulator.

use std::process::Command;

fn crates_in(features: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--offline", "--locked", "-p", "geometer", "-e", "normal", "--prefix", "none"])
        .args(features)
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("geometer"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_operator_build_has_no_test_infrastructure() {
    assert_eq!(
        crates_in(&["--no-default-features", "--features", "highs"]),
        ["geometer", "geometer-agent", "geometer-api", "geometer-controller", "geometer-solver"]
    );
}

#[test]
fn the_developer_build_keeps_the_demo_tools() {
    let names = crates_in(&[]);
    for tool in ["geometer-apiserver", "geometer-simcluster", "geometer-sim"] {
        assert!(names.iter().any(|n| n == tool), "{tool} missing from {names:?}");
    }
}
