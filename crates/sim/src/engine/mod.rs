//! The discrete-event loop. Events: pod arrivals and departures, the end of a batching window,
//! a node finishing its reconfiguration, and a gang's wait timing out. Each costs O(log n) plus
//! the scheduling it causes.
//!
//! At one instant, events run in this order: departures, reconfigurations finishing and gang
//! timeouts, arrivals, batch ends; so capacity freed at time t is visible to a pod arriving at t.

mod changes;
mod gangs;
mod pending;
mod replan;
mod state;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use thiserror::Error;

use crate::cluster::Cluster;
use crate::metrics::{OutOfPlay, PodOutcome, Recorder, Sample, Summary};
use crate::strategy::{Slot, Strategy, StrategyError};
use crate::trace::Millis;
use crate::usable::UsableMemory;
use crate::workload::{ProfileKey, Workload, WHOLE_GPU};

use changes::ChangeLedger;
use gangs::GangRun;
use pending::PendingQueue;
use state::{ClusterState, PodIdx};

/// Modelled durations and batching, all in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// Evicting pods and waiting for them to terminate (only when the plan evicts on the node).
    pub drain: Millis,
    /// Destroying and creating GPU and compute instances through NVML.
    pub reconfigure: Millis,
    /// Restarting the device plugin until the node advertises the new slices.
    pub plugin_restart: Millis,
    /// A batch ends when demand has been quiet this long...
    pub batch_idle: Millis,
    /// ...or this long after it opened.
    pub batch_max: Millis,
    /// A node a plan changed is not planned again for this long (MigPolicy
    /// `stabilisationSeconds`), counted from the plan.
    pub stabilisation: Millis,
    /// How long a gang member holding its slices waits for the rest of its gang before the
    /// gang's waiting members give them back (the Coscheduling plugin's
    /// `permitWaitingTimeSeconds`, 60 s by default). 0: no timeout.
    pub gang_timeout: Millis,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            drain: 30_000,
            reconfigure: 10_000,
            plugin_restart: 20_000,
            batch_idle: 5_000,
            batch_max: 30_000,
            stabilisation: 0,
            gang_timeout: 60_000,
        }
    }
}

#[derive(Debug, Error)]
pub enum SimError {
    #[error(transparent)]
    Strategy(#[from] StrategyError),
    #[error("strategy {strategy}: its plan at t={time_s}s is not applicable: {reason}")]
    BadPlan { strategy: String, time_s: f64, reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Depart {
        pod: PodIdx,
        run: u32,
    },
    Ready {
        node: usize,
    },
    /// A node's stabilisation window ends.
    Stable {
        node: usize,
    },
    /// A gang's members have waited at Permit for as long as they may.
    GangTimeout {
        gang: usize,
        epoch: u32,
    },
    /// The slices kept for a gang member by a plan are given back unless it has them by now.
    Unreserve {
        pod: PodIdx,
        stamp: u32,
    },
    Arrive {
        pod: PodIdx,
    },
    BatchEnd {
        generation: u64,
    },
}

impl Event {
    fn class(&self) -> u8 {
        match self {
            Event::Depart { .. } => 0,
            Event::Ready { .. }
            | Event::Stable { .. }
            | Event::GangTimeout { .. }
            | Event::Unreserve { .. } => 1,
            Event::Arrive { .. } => 2,
            Event::BatchEnd { .. } => 3,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct PodRun {
    pending_since: Option<Millis>,
    waited: Millis,
    /// Node and instances while running, or while holding them for its gang.
    running: Option<(usize, Vec<(usize, Slot)>)>,
    /// Since when it holds its instances waiting for its gang to start (not running yet).
    holding_since: Option<Millis>,
    /// When the pod first started.
    first_start: Option<Millis>,
    finished: bool,
    evicted: u32,
    /// Bumped on eviction, so the departure scheduled for an earlier run is ignored.
    run: u32,
    /// A node whose reconfiguration (from an earlier plan) is making room for this pod.
    promised: Option<usize>,
    /// A node keeping free slices that already existed for this pending gang member (a plan
    /// put it there); see [`Replan::reservations`].
    reserved: Option<usize>,
    /// Bumped on every reservation, so that the expiry of an earlier one is ignored.
    reserve_stamp: u32,
}

struct Reconfiguration {
    targets: Vec<(usize, Vec<Slot>)>,
}

/// Runs one strategy over a workload.
pub struct Engine<'a> {
    cluster: &'a Cluster,
    workload: &'a Workload,
    timings: Timings,
    strategy: &'a mut dyn Strategy,
    whole_gpu: bool,
    now: Millis,
    events: BinaryHeap<Reverse<(Millis, u8, u64, Event)>>,
    sequence: u64,
    pods: Vec<PodRun>,
    requests: Vec<Vec<(ProfileKey, u32)>>,
    state: ClusterState,
    pending: PendingQueue,
    in_flight: BTreeMap<usize, Reconfiguration>,
    /// Per node: until when its stabilisation window keeps planners away.
    stable_at: Vec<Millis>,
    /// Pods promised room by each in-flight node (some may have started elsewhere since).
    promised_to: BTreeMap<usize, Vec<PodIdx>>,
    batch_open: Option<Millis>,
    last_change: Millis,
    batch_generation: u64,
    demand_memory: u64,
    /// The most memory slices the running and pending pods could hold.
    usable: UsableMemory,
    running: u32,
    recorder: Recorder,
    gangs: Vec<GangRun>,
    /// Memory slices held by gang members waiting for their gang.
    idle_memory: u64,
    gang_timeouts: u64,
    changes: ChangeLedger,
    gpus_reconfigured: u64,
    evictions: u64,
    planner_calls: u64,
    planner_time: Duration,
    planner_time_max: Duration,
}

impl<'a> Engine<'a> {
    pub fn new(
        cluster: &'a Cluster,
        workload: &'a Workload,
        timings: Timings,
        strategy: &'a mut dyn Strategy,
    ) -> Self {
        let whole_gpu = strategy.initial_geometry(0).iter().any(|s| s.profile == WHOLE_GPU);
        let state = ClusterState::new(cluster, &workload.profiles, |m| strategy.initial_geometry(m));
        let whole_at_start: Vec<bool> = (0..cluster.models.len())
            .map(|m| strategy.initial_geometry(m).iter().any(|s| s.profile == WHOLE_GPU))
            .collect();
        let usable = UsableMemory::new(cluster, workload, whole_gpu, &whole_at_start);
        let requests = workload
            .pods
            .iter()
            .map(|p| if whole_gpu { vec![(WHOLE_GPU, p.whole_gpus)] } else { p.mig.clone() })
            .collect();
        let (capacity_memory, capacity_compute) = (cluster.memory_slices(), cluster.compute_slices());
        let mut recorder = Recorder::new(capacity_memory, capacity_compute);
        // GPUs that start with MIG off count from t=0.
        let start = Sample::default();
        recorder.observe(Sample { whole_gpus: state.whole_gpus, ..start }, 0, 0, OutOfPlay::default());
        Engine {
            cluster,
            workload,
            timings,
            strategy,
            whole_gpu,
            now: 0,
            events: BinaryHeap::new(),
            sequence: 0,
            pods: vec![PodRun::default(); workload.pods.len()],
            requests,
            state,
            pending: PendingQueue::new(workload.profiles.len()),
            gangs: vec![GangRun::default(); workload.gangs.len()],
            idle_memory: 0,
            gang_timeouts: 0,
            changes: ChangeLedger::default(),
            in_flight: BTreeMap::new(),
            stable_at: vec![0; cluster.nodes.len()],
            promised_to: BTreeMap::new(),
            batch_open: None,
            last_change: 0,
            batch_generation: 0,
            demand_memory: 0,
            usable,
            running: 0,
            recorder,
            gpus_reconfigured: 0,
            evictions: 0,
            planner_calls: 0,
            planner_time: Duration::ZERO,
            planner_time_max: Duration::ZERO,
        }
    }

    fn push(&mut self, time: Millis, event: Event) {
        self.sequence += 1;
        self.events.push(Reverse((time, event.class(), self.sequence, event)));
    }

    /// Runs to the end (no event left) and summarises.
    pub fn run(mut self) -> Result<Summary, SimError> {
        self.submit();
        while self.step()? {}
        Ok(self.summary())
    }

    /// Schedules every pod's arrival.
    fn submit(&mut self) {
        for (p, pod) in self.workload.pods.iter().enumerate() {
            self.push(pod.arrival, Event::Arrive { pod: p });
        }
    }

    /// Runs the next event; false when none is left.
    fn step(&mut self) -> Result<bool, SimError> {
        let Some(Reverse((time, _, _, event))) = self.events.pop() else { return Ok(false) };
        self.recorder.advance(time);
        self.now = time;
        match event {
            Event::Arrive { pod } => self.arrive(pod),
            Event::Depart { pod, run } => self.depart(pod, run),
            Event::Ready { node } => self.ready(node)?,
            Event::Stable { .. } => {
                if !self.pending.is_empty() {
                    self.demand_changed();
                }
            }
            Event::BatchEnd { generation } => self.batch_end(generation)?,
            Event::GangTimeout { gang, epoch } => self.gang_timeout(gang, epoch),
            Event::Unreserve { pod, stamp } => self.reservation_expired(pod, stamp),
        }
        let sample = Sample {
            time,
            memory_slices: self.state.allocated_memory,
            compute_slices: self.state.allocated_compute,
            running: self.running,
            pending: self.pending.len() as u32,
            whole_gpus: self.state.whole_gpus,
            gang_idle_memory: self.idle_memory,
        };
        // No strategy holds more than the pods could: checked by every simulator test.
        debug_assert!(
            self.state.allocated_memory <= self.usable.value(),
            "allocated {} > usable {}",
            self.state.allocated_memory,
            self.usable.value()
        );
        self.recorder.observe(sample, self.demand_memory, self.usable.value(), self.out_of_play());
        Ok(true)
    }

    /// While demand exceeds capacity, the memory no running pod holds on nodes no plan may
    /// change now: reconfiguring, or in their stabilisation window.
    fn out_of_play(&self) -> OutOfPlay {
        if self.demand_memory <= self.recorder.capacity_memory {
            return OutOfPlay::default();
        }
        let reconfiguring = self.in_flight.keys().map(|&n| self.state.unheld_memory(n)).sum();
        let stabilising = (0..self.stable_at.len())
            .filter(|&n| self.now < self.stable_at[n] && !self.in_flight.contains_key(&n))
            .map(|n| self.state.unheld_memory(n))
            .sum();
        OutOfPlay { reconfiguring, stabilising }
    }

    /// Memory slices a pod needs while pending or running, in this strategy's units.
    fn need(&self, p: PodIdx) -> u64 {
        let pod = &self.workload.pods[p];
        if self.whole_gpu {
            u64::from(pod.whole_gpus) * u64::from(self.cluster.reference_model().memory_slices)
        } else {
            u64::from(pod.need_memory_slices)
        }
    }

    fn arrive(&mut self, p: PodIdx) {
        self.demand_memory += self.need(p);
        self.usable.add(p);
        self.make_pending(p);
        if !self.try_start(p) {
            self.demand_changed();
        }
    }

    fn make_pending(&mut self, p: PodIdx) {
        self.pods[p].pending_since = Some(self.now);
        let pod = &self.workload.pods[p];
        self.pending.insert(p, pod.priority, &self.requests[p]);
    }

    /// Starts a pending pod on the first node with room; false if there is none. A member of a
    /// gang that has not started is tried with its gang, all or nothing.
    fn try_start(&mut self, p: PodIdx) -> bool {
        if let Some(g) = self.waiting_gang(p) {
            return self.try_gang(g);
        }
        let pod = &self.workload.pods[p];
        let Some(node) = self.state.find_node(pod, &self.requests[p]) else {
            return false;
        };
        self.start_on(p, node);
        true
    }

    /// Binds a pending pod to `node`, which has room for it: it runs, or (a member of a gang
    /// that has not started) waits for its gang.
    fn start_on(&mut self, p: PodIdx, node: usize) {
        let pod = &self.workload.pods[p];
        let held = self.state.bind(p, pod, &self.requests[p], node);
        self.record_bind(p, node, held);
        self.after_bind(p);
    }

    /// A pending pod now holds `held` on `node`.
    fn record_bind(&mut self, p: PodIdx, node: usize, held: Vec<(usize, Slot)>) {
        let pod = &self.workload.pods[p];
        self.pending.remove(p, pod.priority, &self.requests[p]);
        let run = &mut self.pods[p];
        if let Some(since) = run.pending_since.take() {
            run.waited += self.now - since;
        }
        run.running = Some((node, held));
        run.promised = None;
        debug_assert!(run.reserved.is_none(), "bound while slices are kept for it");
    }

    /// A pod that just got its slices runs, unless its gang has not started.
    fn after_bind(&mut self, p: PodIdx) {
        match self.waiting_gang(p) {
            Some(g) => self.hold(p, g),
            None => self.start_running(p),
        }
    }

    /// A pod holding its slices starts running.
    fn start_running(&mut self, p: PodIdx) {
        let pod = &self.workload.pods[p];
        let run = &mut self.pods[p];
        run.first_start.get_or_insert(self.now);
        let generation = run.run;
        if let Some((_, held)) = &run.running {
            self.changes.taken(held, true);
        }
        self.running += 1;
        if let Some(duration) = pod.duration {
            self.push(self.now + duration, Event::Depart { pod: p, run: generation });
        }
    }

    fn depart(&mut self, p: PodIdx, run: u32) {
        if self.pods[p].run != run {
            return;
        }
        let Some((node, held)) = self.pods[p].running.take() else { return };
        self.pods[p].finished = true;
        self.running -= 1;
        self.demand_memory -= self.need(p);
        self.usable.remove(p);
        self.state.release(&self.workload.pods[p], node, &held);
        let freed: Vec<ProfileKey> = held.iter().map(|(_, s)| s.profile).collect();
        self.schedule(&freed);
        if !self.pending.is_empty() {
            self.demand_changed();
        }
    }

    /// Offers freed instances of these profiles to pending pods, highest priority and oldest first.
    fn schedule(&mut self, profiles: &[ProfileKey]) {
        let mut profiles = profiles.to_vec();
        profiles.sort_unstable();
        profiles.dedup();
        let mut gangs_tried = Vec::new();
        for key in profiles {
            let mut cursor = None;
            while self.state.free_total[key] > 0 {
                let Some((entry, p)) = self.pending.next_wanting(key, cursor) else { break };
                cursor = Some(entry);
                // One all-or-nothing attempt per gang and offer is enough.
                if let Some(g) = self.waiting_gang(p) {
                    if gangs_tried.contains(&g) {
                        continue;
                    }
                    gangs_tried.push(g);
                }
                self.try_start(p);
            }
        }
    }

    fn summary(mut self) -> Summary {
        let since = |at: Option<Millis>| at.map_or(0, |t| self.now - t);
        let outcomes: Vec<PodOutcome> = self
            .pods
            .iter()
            .map(|r| PodOutcome {
                served: r.first_start.is_some() && r.pending_since.is_none() && r.holding_since.is_none(),
                first_start: r.first_start,
                waited: r.waited + since(r.pending_since) + since(r.holding_since),
                evictions: r.evicted,
            })
            .collect();
        let gpus_reconfigured_for_nothing = self.changes.close_all();
        let layout = self.state.layout(self.cluster, &self.workload.profiles);
        let mut waits: Vec<Millis> = outcomes.iter().filter(|o| o.served).map(|o| o.waited).collect();
        waits.sort_unstable();
        let served = waits.len();
        let r = self.recorder;
        Summary {
            strategy: self.strategy.kind().to_string(),
            pods: self.pods.len(),
            served,
            not_served: self.pods.len() - served,
            waits,
            end: self.now,
            capacity_memory: r.capacity_memory,
            capacity_compute: r.capacity_compute,
            memory_integral: r.memory_integral,
            compute_integral: r.compute_integral,
            saturated_time: r.saturated_time,
            saturated_memory_integral: r.saturated_memory_integral,
            saturated_usable_integral: r.saturated_usable_integral,
            saturated_reconfiguring_integral: r.saturated_reconfiguring_integral,
            saturated_stabilising_integral: r.saturated_stabilising_integral,
            gpus_reconfigured: self.gpus_reconfigured,
            gangs: self.gangs.len(),
            gangs_started: self.gangs.iter().filter(|g| g.started).count(),
            gang_timeouts: self.gang_timeouts,
            gang_idle_memory_integral: r.gang_idle_integral,
            gpus_reconfigured_for_nothing,
            whole_gpu_integral: r.whole_gpu_integral,
            whole_gpus_end: self.state.whole_gpus,
            evictions: self.evictions,
            planner_calls: self.planner_calls,
            planner_time: self.planner_time,
            planner_time_max: self.planner_time_max,
            series: r.series,
            outcomes,
            layout,
        }
    }
}
