//! Waiting for what a bench watches, and printing how far apart two moments are.

use std::time::{Duration, Instant};

/// Polls `check` every 25 ms until it holds; returns when it did. Panics after `limit`.
pub(crate) async fn wait(what: &str, limit: Duration, mut check: impl FnMut() -> bool) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `a - b` in seconds, negative when `a` came first.
pub(crate) fn signed(a: Instant, b: Instant) -> String {
    if a >= b {
        format!("{:.2} s", (a - b).as_secs_f64())
    } else {
        format!("-{:.2} s", (b - a).as_secs_f64())
    }
}
