//! Demand batching: when a planning round starts.
//!
//! Planning on every pod event would publish a plan per pod of a burst. A round starts when the
//! demand has been quiet for the idle window, or when the max window has passed since the batch
//! opened, whichever comes first. After a round the batcher remembers what it planned for, so the
//! same demand does not start another round; a change does.
//!
//! Pure state machine over timestamps: the caller passes `now` (tokio's clock, so tests run on
//! paused time) and sleeps until [`Batcher::due_at`].

use std::time::Duration;

use tokio::time::Instant;

use crate::planning::fingerprint::Fingerprint;

/// The two windows of a policy's `batching` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchWindows {
    /// Quiet time after the last demand change.
    pub idle: Duration,
    /// Longest wait after the batch opened.
    pub max: Duration,
}

impl BatchWindows {
    pub(crate) fn from_seconds(idle: u32, max: u32) -> Self {
        // A max window shorter than the idle one would make the idle window meaningless; the
        // CRD rejects it, this keeps a hand-built value sane too.
        let idle = Duration::from_secs(idle.into());
        let max = Duration::from_secs(max.into()).max(idle);
        BatchWindows { idle, max }
    }
}

/// Why a round started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// Demand did not change for the idle window.
    Quiet,
    /// Demand kept changing; the max window ran out.
    MaxWindow,
}

impl Trigger {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::Quiet => "demand quiet for the idle window",
            Trigger::MaxWindow => "max batching window reached",
        }
    }
}

/// A round that is due: what demand it is for and why now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Round {
    pub demand: Fingerprint,
    pub trigger: Trigger,
    /// Time from the batch opening to the round.
    pub waited: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No demand.
    Empty,
    /// Demand changed; waiting for a window to close.
    Collecting { opened: Instant, last_change: Instant, demand: Fingerprint },
    /// A round ran for this demand; nothing to do until it changes.
    Settled { demand: Fingerprint },
}

#[derive(Debug, Clone)]
pub(crate) struct Batcher {
    windows: BatchWindows,
    state: State,
}

impl Batcher {
    pub(crate) fn new(windows: BatchWindows) -> Self {
        Batcher { windows, state: State::Empty }
    }

    /// New windows apply to the open batch at once (a policy edit should not wait out the old
    /// max window).
    pub(crate) fn set_windows(&mut self, windows: BatchWindows) {
        self.windows = windows;
    }

    /// Records the demand seen at `now`; `None` when there is none.
    pub(crate) fn observe(&mut self, now: Instant, demand: Option<Fingerprint>) {
        self.state = match (self.state, demand) {
            (_, None) => State::Empty,
            (State::Empty, Some(demand)) => State::Collecting { opened: now, last_change: now, demand },
            (State::Settled { demand: planned }, Some(demand)) if planned == demand => self.state,
            (State::Settled { .. }, Some(demand)) => {
                State::Collecting { opened: now, last_change: now, demand }
            }
            (State::Collecting { demand: seen, .. }, Some(demand)) if seen == demand => self.state,
            (State::Collecting { opened, .. }, Some(demand)) => {
                State::Collecting { opened, last_change: now, demand }
            }
        };
    }

    /// When the open batch becomes a round; `None` when nothing is waiting.
    pub(crate) fn due_at(&self) -> Option<Instant> {
        match self.state {
            State::Collecting { opened, last_change, .. } => {
                Some((last_change + self.windows.idle).min(opened + self.windows.max))
            }
            State::Empty | State::Settled { .. } => None,
        }
    }

    /// The round that is due at `now`, if any. Taking it settles the batch: the same demand
    /// starts no new round.
    pub(crate) fn poll(&mut self, now: Instant) -> Option<Round> {
        let State::Collecting { opened, last_change, demand } = self.state else {
            return None;
        };
        let quiet_at = last_change + self.windows.idle;
        let max_at = opened + self.windows.max;
        let trigger = if now >= quiet_at {
            Trigger::Quiet
        } else if now >= max_at {
            Trigger::MaxWindow
        } else {
            return None;
        };
        self.state = State::Settled { demand };
        Some(Round { demand, trigger, waited: now.saturating_duration_since(opened) })
    }

    /// Opens the batch again for the same demand, e.g. after a round failed to publish, so that
    /// it is retried after another idle window.
    pub(crate) fn retry(&mut self, now: Instant) {
        if let State::Settled { demand } = self.state {
            self.state = State::Collecting { opened: now, last_change: now, demand };
        }
    }

    /// Forgets the settled demand, so the next observation opens a batch even if unchanged
    /// (e.g. when the policy changed and the same demand deserves a new look).
    pub(crate) fn reset(&mut self) {
        if let State::Settled { .. } = self.state {
            self.state = State::Empty;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::{advance, Instant};

    fn fp(n: u64) -> Option<Fingerprint> {
        Some(Fingerprint::from_raw(n))
    }

    fn windows() -> BatchWindows {
        BatchWindows::from_seconds(10, 60)
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_demand_starts_a_round_after_the_idle_window() {
        let mut b = Batcher::new(windows());
        b.observe(Instant::now(), fp(1));
        advance(Duration::from_secs(9)).await;
        assert_eq!(b.poll(Instant::now()), None, "idle window not over yet");
        advance(Duration::from_secs(1)).await;
        let round = b.poll(Instant::now()).expect("round after 10 s of quiet");
        assert_eq!(round.trigger, Trigger::Quiet);
        assert_eq!(round.demand, Fingerprint::from_raw(1));
        assert_eq!(round.waited, Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn each_change_restarts_the_idle_window() {
        let mut b = Batcher::new(windows());
        b.observe(Instant::now(), fp(1));
        advance(Duration::from_secs(8)).await;
        b.observe(Instant::now(), fp(2));
        advance(Duration::from_secs(8)).await;
        assert_eq!(b.poll(Instant::now()), None, "second change restarted the window");
        // The same demand seen again is not a change.
        b.observe(Instant::now(), fp(2));
        advance(Duration::from_secs(2)).await;
        assert_eq!(b.poll(Instant::now()).map(|r| r.demand), Some(Fingerprint::from_raw(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn demand_that_keeps_changing_is_planned_at_the_max_window() {
        let mut b = Batcher::new(windows());
        let opened = Instant::now();
        for n in 0..20 {
            b.observe(Instant::now(), fp(n));
            if let Some(round) = b.poll(Instant::now()) {
                assert_eq!(round.trigger, Trigger::MaxWindow);
                assert_eq!(Instant::now() - opened, Duration::from_secs(60));
                return;
            }
            advance(Duration::from_secs(5)).await;
        }
        panic!("no round within the max window");
    }

    #[tokio::test(start_paused = true)]
    async fn due_at_is_the_earlier_of_both_windows() {
        let mut b = Batcher::new(windows());
        let t0 = Instant::now();
        assert_eq!(b.due_at(), None);
        b.observe(t0, fp(1));
        assert_eq!(b.due_at(), Some(t0 + Duration::from_secs(10)));
        advance(Duration::from_secs(55)).await;
        b.observe(Instant::now(), fp(2));
        assert_eq!(b.due_at(), Some(t0 + Duration::from_secs(60)));
        tokio::time::sleep_until(b.due_at().unwrap()).await;
        assert_eq!(b.poll(Instant::now()).map(|r| r.trigger), Some(Trigger::MaxWindow));
    }

    #[tokio::test(start_paused = true)]
    async fn settled_demand_starts_no_second_round_until_it_changes() {
        let mut b = Batcher::new(windows());
        b.observe(Instant::now(), fp(1));
        advance(Duration::from_secs(10)).await;
        assert!(b.poll(Instant::now()).is_some());
        b.observe(Instant::now(), fp(1));
        advance(Duration::from_secs(600)).await;
        assert_eq!(b.poll(Instant::now()), None);
        assert_eq!(b.due_at(), None);
        b.observe(Instant::now(), fp(3));
        advance(Duration::from_secs(10)).await;
        assert_eq!(b.poll(Instant::now()).map(|r| r.demand), Some(Fingerprint::from_raw(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn demand_that_goes_away_cancels_the_batch() {
        let mut b = Batcher::new(windows());
        b.observe(Instant::now(), fp(1));
        advance(Duration::from_secs(5)).await;
        b.observe(Instant::now(), None);
        advance(Duration::from_secs(100)).await;
        assert_eq!(b.poll(Instant::now()), None);
        // The same demand returning after it went away is new demand.
        b.observe(Instant::now(), fp(1));
        advance(Duration::from_secs(10)).await;
        assert!(b.poll(Instant::now()).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn retry_reopens_the_batch_for_the_same_demand() {
        let mut b = Batcher::new(windows());
        b.observe(Instant::now(), fp(1));
        advance(Duration::from_secs(10)).await;
        assert!(b.poll(Instant::now()).is_some());
        b.retry(Instant::now());
        assert_eq!(b.poll(Instant::now()), None);
        advance(Duration::from_secs(10)).await;
        assert_eq!(b.poll(Instant::now()).map(|r| r.demand), Some(Fingerprint::from_raw(1)));
    }

    #[test]
    fn a_max_window_below_the_idle_window_is_raised_to_it() {
        let w = BatchWindows::from_seconds(30, 5);
        assert_eq!(w.max, Duration::from_secs(30));
    }
}
