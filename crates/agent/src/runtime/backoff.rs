//! Exponential backoff for retries (failed steps, PDB refusals).
//!
//! Deterministic on purpose: the agent is one per node, so there is no herd to spread, and
//! tests can predict how many retries fit in a window without measuring time.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay before the first retry.
    pub initial: Duration,
    /// Longest delay between retries.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(300) }
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { initial, max: max.max(initial) }
    }

    /// Delay before retry number `attempt` (1 = the first retry): `initial * 2^(attempt-1)`,
    /// capped at `max`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(32);
        self.initial.checked_mul(1u32 << doublings.min(31)).map_or(self.max, |d| d.min(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_until_the_cap() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<_> = (1..=6).map(|a| b.delay(a).as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn a_cap_below_the_first_delay_is_raised_to_it() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(1));
        assert_eq!(b.delay(3), Duration::from_secs(5));
    }
}
