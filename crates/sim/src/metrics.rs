//! What a run measures: exact integrals of allocation over time, the time series behind the
//! chart, waits, reconfigurations, evictions and planner time.

use std::time::Duration;

use crate::trace::Millis;

/// The cluster at one instant (after every event at that time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    pub time: Millis,
    /// Memory and compute slices held by running pods.
    pub memory_slices: u64,
    pub compute_slices: u64,
    pub running: u32,
    pub pending: u32,
    /// GPUs with MIG mode off.
    pub whole_gpus: u32,
    /// Memory slices held by gang members waiting for their gang to start (part of
    /// `memory_slices`).
    pub gang_idle_memory: u64,
}

/// Memory slices no running pod holds on nodes no plan may change at one instant: nodes
/// reconfiguring, and nodes in their stabilisation window (not planned again until it ends).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutOfPlay {
    pub reconfiguring: u64,
    pub stabilising: u64,
}

/// Accumulates a run's step functions exactly (slice-milliseconds as integers).
#[derive(Debug, Clone)]
pub struct Recorder {
    pub capacity_memory: u64,
    pub capacity_compute: u64,
    current: Sample,
    /// Memory slices requested by running and pending pods.
    demand_memory: u64,
    /// The most of them the pods could hold ([`crate::usable`]).
    usable_memory: u64,
    out_of_play: OutOfPlay,
    pub memory_integral: u128,
    pub compute_integral: u128,
    pub saturated_time: Millis,
    pub saturated_memory_integral: u128,
    /// The memory slices the pods could hold (at most the capacity), integrated while saturated.
    pub saturated_usable_integral: u128,
    /// [`OutOfPlay`]'s two counts, integrated while saturated.
    pub saturated_reconfiguring_integral: u128,
    pub saturated_stabilising_integral: u128,
    /// GPUs with MIG mode off, integrated over time (GPU-milliseconds).
    pub whole_gpu_integral: u128,
    /// Memory slices held idle by waiting gang members, integrated (slice-milliseconds).
    pub gang_idle_integral: u128,
    pub series: Vec<Sample>,
}

impl Recorder {
    pub fn new(capacity_memory: u64, capacity_compute: u64) -> Self {
        let current = Sample::default();
        Recorder {
            capacity_memory,
            capacity_compute,
            current,
            demand_memory: 0,
            usable_memory: 0,
            out_of_play: OutOfPlay::default(),
            memory_integral: 0,
            compute_integral: 0,
            saturated_time: 0,
            saturated_memory_integral: 0,
            saturated_usable_integral: 0,
            saturated_reconfiguring_integral: 0,
            saturated_stabilising_integral: 0,
            whole_gpu_integral: 0,
            gang_idle_integral: 0,
            series: vec![current],
        }
    }

    /// Moves the clock to `time`, integrating the state that held since the last change.
    pub fn advance(&mut self, time: Millis) {
        let dt = time.saturating_sub(self.current.time);
        if dt > 0 {
            self.memory_integral += u128::from(self.current.memory_slices) * u128::from(dt);
            self.compute_integral += u128::from(self.current.compute_slices) * u128::from(dt);
            self.whole_gpu_integral += u128::from(self.current.whole_gpus) * u128::from(dt);
            self.gang_idle_integral += u128::from(self.current.gang_idle_memory) * u128::from(dt);
            if self.demand_memory > self.capacity_memory {
                self.saturated_time += dt;
                self.saturated_memory_integral += u128::from(self.current.memory_slices) * u128::from(dt);
                let usable = self.usable_memory.min(self.capacity_memory);
                self.saturated_usable_integral += u128::from(usable) * u128::from(dt);
                self.saturated_reconfiguring_integral +=
                    u128::from(self.out_of_play.reconfiguring) * u128::from(dt);
                self.saturated_stabilising_integral +=
                    u128::from(self.out_of_play.stabilising) * u128::from(dt);
            }
            self.current.time = time;
        }
    }

    /// Records the state after the events at the current time (`time` is ignored: the
    /// recorder's clock is the one [`Recorder::advance`] moved). `usable_memory`: the most
    /// memory slices the running and pending pods could hold.
    pub fn observe(&mut self, state: Sample, demand_memory: u64, usable_memory: u64, out_of_play: OutOfPlay) {
        self.demand_memory = demand_memory;
        self.usable_memory = usable_memory;
        self.out_of_play = out_of_play;
        let next = Sample { time: self.current.time, ..state };
        self.current = next;
        match self.series.last_mut() {
            Some(last) if last.time == next.time => *last = next,
            Some(last) if Sample { time: next.time, ..*last } == next => {}
            _ => self.series.push(next),
        }
    }
}

/// Per-strategy results.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub strategy: String,
    pub pods: usize,
    /// Pods running or finished at the end.
    pub served: usize,
    /// Pods still pending at the end (never started, or evicted and never restarted).
    pub not_served: usize,
    /// Total time each served pod spent pending, sorted (milliseconds).
    pub waits: Vec<Millis>,
    pub end: Millis,
    pub capacity_memory: u64,
    pub capacity_compute: u64,
    pub memory_integral: u128,
    pub compute_integral: u128,
    /// Time during which running plus pending pods asked for more memory slices than exist.
    pub saturated_time: Millis,
    pub saturated_memory_integral: u128,
    /// Memory slices the pods could hold ([`crate::usable`]), integrated over the same time.
    pub saturated_usable_integral: u128,
    /// Memory slices no running pod held on reconfiguring nodes, and on nodes in their
    /// stabilisation window, integrated over the same time.
    pub saturated_reconfiguring_integral: u128,
    pub saturated_stabilising_integral: u128,
    pub gpus_reconfigured: u64,
    /// Gangs in the workload, and those that started (reached their minimum at once).
    pub gangs: usize,
    pub gangs_started: usize,
    /// Times a gang's waiting members gave their slices back at the Permit timeout.
    pub gang_timeouts: u64,
    /// Memory slices held by gang members waiting for their gang, integrated over the run
    /// (slice-milliseconds): slices allocated to no running work.
    pub gang_idle_memory_integral: u128,
    /// GPU reconfigurations whose new slices only waiting gang members ever took (never a
    /// running pod) before the GPU changed again or the run ended (`engine::changes`).
    pub gpus_reconfigured_for_nothing: u64,
    /// GPUs with MIG mode off, integrated over the run (GPU-milliseconds), and at the end.
    pub whole_gpu_integral: u128,
    pub whole_gpus_end: u32,
    pub evictions: u64,
    pub planner_calls: u64,
    pub planner_time: Duration,
    pub planner_time_max: Duration,
    pub series: Vec<Sample>,
    /// Per pod, in workload order.
    pub outcomes: Vec<PodOutcome>,
    /// The GPUs at the end, counted by model and geometry.
    pub layout: Vec<GpuLayout>,
}

/// GPUs of one model that end the run with the same geometry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GpuLayout {
    pub model: String,
    /// Instances in placement order, `+` between them and `*` after each one a pod holds;
    /// `whole` for MIG mode off, `-` for MIG mode with no instance.
    pub geometry: String,
    pub gpus: u32,
}

/// What happened to one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodOutcome {
    /// Running or finished at the end.
    pub served: bool,
    pub first_start: Option<Millis>,
    /// Total time spent pending (so far, for a pod never served).
    pub waited: Millis,
    pub evictions: u32,
}

impl Summary {
    /// Nearest-rank percentile of the waits of served pods, in seconds.
    pub fn wait_percentile(&self, q: f64) -> Option<f64> {
        percentile(&self.waits, q).map(|ms| ms as f64 / 1000.0)
    }

    /// Nearest-rank percentiles of the waits of the pods both this run and `other` served (same
    /// workload), in seconds: this run's, then `other`'s. The served-only percentile favours a
    /// strategy that leaves the pods that would wait longest unserved; over the same pods it
    /// cannot.
    pub fn shared_wait_percentile(&self, other: &Summary, q: f64) -> Option<(f64, f64)> {
        let (mut mine, mut theirs): (Vec<Millis>, Vec<Millis>) = self
            .outcomes
            .iter()
            .zip(&other.outcomes)
            .filter(|(a, b)| a.served && b.served)
            .map(|(a, b)| (a.waited, b.waited))
            .unzip();
        mine.sort_unstable();
        theirs.sort_unstable();
        let seconds = |ms: Millis| ms as f64 / 1000.0;
        Some((seconds(percentile(&mine, q)?), seconds(percentile(&theirs, q)?)))
    }

    /// Mean share of memory slices allocated over the run.
    pub fn memory_share(&self) -> f64 {
        share(self.memory_integral, self.capacity_memory, self.end)
    }

    pub fn compute_share(&self) -> f64 {
        share(self.compute_integral, self.capacity_compute, self.end)
    }

    /// GPUs with MIG mode off, averaged over the run (the count at the end for a run of no time).
    pub fn whole_gpus_mean(&self) -> f64 {
        if self.end == 0 {
            return f64::from(self.whole_gpus_end);
        }
        self.whole_gpu_integral as f64 / self.end as f64
    }

    /// Memory slice-seconds held idle by gang members waiting for their gang.
    pub fn gang_idle_slice_seconds(&self) -> f64 {
        self.gang_idle_memory_integral as f64 / 1000.0
    }

    /// Mean share of memory slices allocated while demand exceeded capacity; `None` if it never did.
    pub fn saturated_memory_share(&self) -> Option<f64> {
        self.saturated_share(self.saturated_memory_integral)
    }

    /// Mean share of memory slices the running and pending pods could hold while demand
    /// exceeded capacity: what no strategy's [`Summary::saturated_memory_share`] can pass.
    pub fn saturated_usable_share(&self) -> Option<f64> {
        self.saturated_share(self.saturated_usable_integral)
    }

    /// Where the memory no pod held while demand exceeded capacity was, as shares of the
    /// capacity: on nodes reconfiguring, and on nodes in their stabilisation window (the rest
    /// was on nodes a plan could change). `None` if demand never exceeded capacity.
    pub fn saturated_unheld_shares(&self) -> Option<(f64, f64)> {
        Some((
            self.saturated_share(self.saturated_reconfiguring_integral)?,
            self.saturated_share(self.saturated_stabilising_integral)?,
        ))
    }

    fn saturated_share(&self, integral: u128) -> Option<f64> {
        (self.saturated_time > 0).then(|| share(integral, self.capacity_memory, self.saturated_time))
    }
}

fn share(integral: u128, capacity: u64, time: Millis) -> f64 {
    if capacity == 0 || time == 0 {
        return 0.0;
    }
    integral as f64 / (capacity as f64 * time as f64)
}

/// Nearest-rank percentile (`q` in 0..=1) of sorted values.
pub fn percentile(sorted: &[Millis], q: f64) -> Option<Millis> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<Millis> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(50));
        assert_eq!(percentile(&v, 0.95), Some(95));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn integrates_steps_exactly() {
        let sample = |memory_slices, compute_slices, running, pending, whole_gpus| Sample {
            time: 0,
            memory_slices,
            compute_slices,
            running,
            pending,
            whole_gpus,
            gang_idle_memory: 0,
        };
        let mut r = Recorder::new(16, 14);
        let out = |reconfiguring, stabilising| OutOfPlay { reconfiguring, stabilising };
        r.observe(sample(8, 7, 1, 0, 1), 8, 8, out(0, 0));
        r.advance(10_000);
        r.observe(sample(12, 14, 2, 1, 2), 24, 20, out(3, 1));
        r.advance(15_000);
        r.observe(sample(0, 0, 0, 0, 2), 0, 0, out(0, 0));
        assert_eq!(r.memory_integral, 8 * 10_000 + 12 * 5_000);
        assert_eq!(
            (r.saturated_reconfiguring_integral, r.saturated_stabilising_integral),
            (3 * 5_000, 5_000)
        );
        assert_eq!(r.saturated_time, 5_000);
        // Usable memory counts up to the capacity.
        assert_eq!(r.saturated_usable_integral, 16 * 5_000);
        assert_eq!(r.whole_gpu_integral, 10_000 + 2 * 5_000);
        assert_eq!(r.series.len(), 3);
        assert_eq!(r.series[2].whole_gpus, 2);
    }
}
