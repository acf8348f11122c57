//! The alerts of the chart (`deploy/helm/geometer/files/rules.yaml`) with the real promtool
//! (built from the Prometheus module by scripts/k8s-control-plane.sh): `promtool check rules`,
//! and `promtool test rules` firing each alert on the series that should fire it, not before.
//! The dashboard's queries (files/dashboard.json) parse. (Scrapes of a running controller and agent are checked in
//! tests/k8s/rightsizing_webhook.rs.)

use std::process::Command;

use geometer_testkit::control_plane::{promtool, tool_or_skip};
use geometer_testkit::deploy::repo;

#[test]
fn the_alerts_pass_promtools_checks_and_unit_tests() {
    let Some(promtool) = tool_or_skip(promtool()) else { return };
    let files = repo().join("deploy/helm/geometer/files");
    for args in [&["check", "rules", "rules.yaml"][..], &["test", "rules", "rules.test.yaml"][..]] {
        let out = Command::new(&promtool).args(args).current_dir(&files).output().expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_dashboard_query_parses() {
    let files = repo().join("deploy/helm/geometer/files");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(files.join("dashboard.json")).unwrap()).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            p["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_string())
        })
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    // The queries parse: promtool checks them as recording rules.
    let Some(promtool) = tool_or_skip(promtool()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard:panel{i}\n        expr: {}\n",
            serde_json::to_string(expr).unwrap()
        ));
    }
    std::fs::write(dir.path().join("panels.yaml"), rules).unwrap();
    let out = Command::new(&promtool)
        .args(["check", "rules", "panels.yaml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
