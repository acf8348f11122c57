//! Builders the planner's property tests share.

use std::collections::BTreeMap;

use geometer_solver::snapshot::Pod;

/// Where a property test's failing cases are kept and replayed first: the file beside its
/// source, named for it (relative to the crate, where `cargo test` runs). proptest's default
/// cannot find a module of a test binary's `main.rs` from `file!()`, and falls back to a
/// folder no test here was reading.
pub(crate) fn regressions(path: &'static str) -> Option<Box<dyn proptest::test_runner::FailurePersistence>> {
    Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct(path)))
}

/// Pending pod `p<i>` in namespace `ml` asking for `count` slices of `profile`, at priority
/// `priority * 100`, selecting nodes of zone `z<zone>` (zones 0 and 1; any other: no selector).
pub(crate) fn pending_pod(i: usize, profile: &str, count: u32, priority: i32, zone: u8) -> Pod {
    let mut pod = Pod {
        namespace: "ml".into(),
        name: format!("p{i}"),
        priority: priority * 100,
        requests: BTreeMap::from([(profile.to_string(), count)]),
        ..Pod::default()
    };
    if zone < 2 {
        pod.node_selector.insert("zone".into(), format!("z{zone}"));
    }
    pod
}
