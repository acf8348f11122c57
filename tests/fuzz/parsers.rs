//! One fuzz test per parser. Each case must return (an answer or an error) without panicking,
//! within a minute, with no single allocation over 256 MiB.

use std::time::{Duration, Instant};

use geometer_api::migparted::MigPartedConfig;
use geometer_controller::adapter;
use geometer_sim::trace::{alibaba, geometer as geometer_trace};
use geometer_solver::catalog::Catalog;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::allocations::take_largest;
use crate::mutate::{corpus, inputs};

const MAX_ALLOCATION: usize = 256 << 20;
const MAX_CASE: Duration = Duration::from_secs(60);

fn cases() -> u32 {
    std::env::var("GEOMETER_FUZZ_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(200)
}

/// Runs `parse` on the inputs of `corpus_name`, failing on a panic, a slow case or a large
/// allocation. `parse` says whether it accepted the input; a run where every input is
/// refused (or every one accepted) did not reach the parser's interesting paths and fails.
fn fuzz(corpus_name: &str, parse: impl Fn(&str) -> bool) {
    let config = Config { cases: cases(), failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let accepted = std::cell::Cell::new(0u32);
    let result = runner.run(&inputs(corpus(corpus_name)), |text| {
        take_largest();
        let started = Instant::now();
        accepted.set(accepted.get() + u32::from(parse(&text)));
        let (took, largest) = (started.elapsed(), take_largest());
        prop_assert!(took < MAX_CASE, "took {took:?}");
        prop_assert!(largest < MAX_ALLOCATION, "allocated {largest} bytes at once");
        Ok(())
    });
    if let Err(e) = result {
        panic!("{corpus_name}: {e}");
    }
    let (accepted, all) = (accepted.get(), cases());
    assert!(accepted > 0 && accepted < all, "{corpus_name}: {accepted} of {all} inputs accepted");
}

#[test]
fn snapshots() {
    let catalog = Catalog::builtin();
    fuzz("snapshot", |text| {
        let Ok(objects) = adapter::parse_objects(text) else { return false };
        match adapter::build_snapshot(&objects, catalog, None, jiff::Timestamp::UNIX_EPOCH) {
            Ok(built) => built.snapshot.validate(catalog).is_ok(),
            Err(_) => false,
        }
    });
}

#[test]
fn catalogs() {
    fuzz("catalog", |text| Catalog::from_yaml(text).is_ok());
}

#[test]
fn policy_files() {
    fuzz("policy", |text| adapter::parse_policy(text).is_ok());
}

#[test]
fn traces() {
    fuzz("trace", |text| {
        let csv = geometer_trace::parse("fuzz.csv", text).is_ok();
        let yaml = geometer_trace::parse_yaml("fuzz.yaml", text).is_ok();
        let _ = alibaba::read_pods("fuzz.csv", text);
        let _ = alibaba::read_nodes("fuzz.csv", text);
        csv || yaml
    });
}

#[test]
fn migparted_configs() {
    let catalog = Catalog::builtin();
    fuzz("migparted", |text| {
        let Ok(config) = MigPartedConfig::parse(text) else { return false };
        geometer_api::migparted::import::allowed_profiles(&config, None, catalog).is_ok()
    });
}
