//! The one poller of the integration tests: waits for a condition on state the test can read,
//! instead of sleeping a guessed time. The deadline only stops a broken test from hanging; it
//! is no timing assertion (timings are benchmarks).

use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(10);
/// A real control plane schedules, evicts and recreates at its own pace (the ReplicaSet
/// controller's backoff, the scheduler's retry of unschedulable pods every few seconds).
const REAL_DEADLINE: Duration = Duration::from_secs(300);

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

/// [`wait_for`] for checks that must await (reads through an API server), polled every
/// 200 ms against a real control plane's pace; `context` is added to the failure.
pub async fn wait_until<T, F, Fut>(what: &str, mut check: F, context: impl FnOnce() -> String) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + REAL_DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("gave up waiting for {what} after {REAL_DEADLINE:?}{}", context());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
