//! The alerts of the chart (`deploy/helm/geometer/files/rules.yaml`) with the real promtool
//! (built from the Prometheus module by scripts/k8s-control-plane.sh): `promtool check rules`,
//! and `promtool test rules` firing each alert on the series that should fire it, not before.
//! (Scrapes of a running controller and agent are checked in tests/k8s/rightsizing_webhook.rs.)

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
