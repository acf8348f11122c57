//! `geometer demo` runs to its summary: a short, fast run of the default scenario in each mode.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use geometer_api::PolicyMode;
use geometer_simcluster::demo::{self, Console, DemoOptions};

/// Collects what the demo prints.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn short(mode: PolicyMode) -> DemoOptions {
    DemoOptions {
        mode,
        nodes: 2,
        duration_s: 60.0,
        speed: 6.0,
        serve_http: false,
        tick: Duration::from_secs(1),
        ..DemoOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_reconfigures_gpus_and_serves_the_shifting_workload() {
    let out = Captured::default();
    let summary =
        demo::run(short(PolicyMode::Auto), Console::new(Box::new(out.clone()))).await.expect("demo runs");
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert!(summary.submitted > 0);
    assert!(summary.plans_applied >= 1, "{text}");
    assert!(summary.gpus_reconfigured >= 1, "{text}");
    assert!(
        summary.served * 10 >= summary.submitted * 9,
        "most pods are served: {}/{}\n{text}",
        summary.served,
        summary.submitted
    );
    assert!(text.contains("Summary") && text.contains("pods served"), "{text}");
    let base = summary.without_geometer.as_ref().expect("the fixed-layout replay beside the run");
    // The run resubmits the pods it evicts; the replay evicts none.
    assert_eq!(base.submitted + summary.evictions, summary.submitted, "the same workload, replayed");
    assert!(text.contains("without Geometer    the same workload, replayed"), "{text}");
    assert!(text.contains("Ready ("), "node steps are shown: {text}");
    assert!(
        text.lines().any(|l| l.contains(" after:  [") && l.ends_with(']')),
        "each changed GPU is drawn as a row of its slots: {text}"
    );
    assert!(
        text.contains(
            "deployment/chat on H100-80GB: 2 pods measured, peak 7000 MiB, 5% busy -> ask for 1g.10gb"
        ),
        "the over-provisioned chat service is right-sized: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_publishes_plans_and_changes_no_gpu() {
    let summary = demo::run(short(PolicyMode::DryRun), Console::new(Box::new(std::io::sink())))
        .await
        .expect("demo runs");
    assert!(summary.plans >= 1);
    assert_eq!(summary.plans_applied, 0);
    assert_eq!(summary.gpus_reconfigured, 0);
    assert_eq!(summary.evictions, 0);
}

#[tokio::test]
async fn bad_options_name_the_flag_and_value() {
    let err = demo::run(
        DemoOptions { speed: 0.0, ..DemoOptions::default() },
        Console::new(Box::new(std::io::sink())),
    )
    .await
    .err()
    .unwrap();
    assert!(err.to_string().contains("--speed 0"), "{err}");
}
