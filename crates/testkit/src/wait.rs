//! The one poller of the integration tests: waits for a condition on state the test can read,
//! instead of sleeping a guessed time. The deadline only stops a broken test from hanging; it
//! is no timing assertion (timings are benchmarks).

use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(10);

/// Polls `check` until it gives a value.
pub async fn wait_for<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait_for_or(what, check, String::new).await
}

/// [`wait_for`], adding what `context` says to the failure when it gives up.
pub async fn wait_for_or<T>(
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    context: impl FnOnce() -> String,
) -> T {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("gave up waiting for {what} after {DEADLINE:?}{}", context());
        }
        tokio::time::sleep(POLL).await;
    }
}
