//! DynamicMIG nodes in the simulator. NVIDIA's DRA driver in DynamicMIG mode makes each
//! instance when a claim is allocated and destroys it when the claim goes; kube-scheduler's
//! allocator takes the first free device (every profile at every placement of every GPU, in
//! the driver's name order) and nothing ever repartitions. After churn a GPU's instances sit at
//! scattered placements and a larger profile waits although the GPU has the room.
//!
//! Two policies run on the same workload: first-fit alone, and first-fit with Geometer's
//! compaction (`MigPolicy spec.dynamicMig.compact`): a pod that fits no GPU now, but would on a
//! GPU whose instances were packed, gets the cheapest opening on one GPU
//! ([`geometer_solver::dynamic_mig::Gpu::opening_for`]): the pods in the way move (evicted; they
//! start again `move_delay` later on devices outside the opened placement, which the taint rules
//! keep them off), and the waiting pod gets the opened device.
//!
//! What is modelled plainly, and said with the results: pods asking for whole GPUs are left out
//! (the driver's whole-GPU device is not modelled); a moved pod keeps the run time it had left
//! (a service that moved, not a batch job that starts over); only pods of one device move, and
//! never a do-not-disrupt pod or one of higher priority than the waiting pod; the waiting pod
//! starts when the moved pods have left (`move_delay`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use geometer_solver::catalog::Catalog;
use geometer_solver::dynamic_mig::Gpu;

use crate::cluster::Cluster;
use crate::trace::Millis;
use crate::workload::{SimPod, Workload, WHOLE_GPU};

/// The two policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    FirstFit,
    Compaction,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::FirstFit => "first-fit",
            Policy::Compaction => "first-fit + compaction",
        }
    }
}

/// One policy's run.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub policy: Policy,
    /// Pods of the workload that ask for MIG devices (the rest are left out).
    pub pods: usize,
    /// Pods that started.
    pub served: usize,
    /// 95th percentile of arrival to first start, over the served pods, in seconds.
    pub p95_wait_s: f64,
    /// Pods moved (evicted and started again elsewhere).
    pub moved: u64,
    /// Openings made.
    pub compactions: u64,
    /// From the first arrival to the last event.
    pub hours: f64,
}

impl Outcome {
    pub fn moved_per_hour(&self) -> f64 {
        if self.hours > 0.0 {
            self.moved as f64 / self.hours
        } else {
            0.0
        }
    }
}

/// Where a GPU is: its node and model.
struct GpuAt {
    node: usize,
    model: usize,
    gpu: Gpu,
}

/// A pod's state.
#[derive(Debug, Clone)]
enum Run {
    Waiting,
    /// On these (GPU, device) until `ends` (`None`: runs to the end).
    Running {
        held: Vec<(usize, String)>,
        ends: Option<Millis>,
    },
    Done,
}

struct Sim<'a> {
    pods: Vec<&'a SimPod>,
    /// Per pod, the profile name of each device it asks for.
    asks: Vec<Vec<&'a str>>,
    runs: Vec<Run>,
    epochs: Vec<u32>,
    /// Run time left for a moved pod.
    left: Vec<Option<Millis>>,
    started: Vec<Option<Millis>>,
    gpus: Vec<GpuAt>,
    /// Per GPU, device name to the pod holding it.
    holders: Vec<BTreeMap<String, usize>>,
    ends: BinaryHeap<Reverse<(Millis, usize, u32)>>,
    waiting: Vec<usize>,
    moved: u64,
    compactions: u64,
    move_delay: Millis,
}

/// Runs `policy` over the MIG pods of `workload` on `cluster`'s GPUs, every one a DynamicMIG
/// GPU of its catalog model.
pub fn run(cluster: &Cluster, workload: &Workload, policy: Policy, move_delay: Millis) -> Outcome {
    let catalog = Catalog::builtin();
    let mut gpus = Vec::new();
    for (n, node) in cluster.nodes.iter().enumerate() {
        let Some(model) = catalog.find(&cluster.models[node.model].name) else { continue };
        for g in 0..node.gpus {
            gpus.push(GpuAt { node: n, model: node.model, gpu: Gpu::of_model(model, g) });
        }
    }
    let pods: Vec<&SimPod> = workload
        .pods
        .iter()
        .filter(|p| !p.mig.is_empty() && p.mig.iter().all(|(k, _)| *k != WHOLE_GPU))
        .collect();
    let asks: Vec<Vec<&str>> = pods
        .iter()
        .map(|p| {
            p.mig
                .iter()
                .flat_map(|(k, n)| std::iter::repeat_n(workload.profiles[*k].as_str(), *n as usize))
                .collect()
        })
        .collect();
    let count = pods.len();
    let holders = vec![BTreeMap::new(); gpus.len()];
    let mut sim = Sim {
        pods,
        asks,
        runs: vec![Run::Waiting; count],
        epochs: vec![0; count],
        left: vec![None; count],
        started: vec![None; count],
        gpus,
        holders,
        ends: BinaryHeap::new(),
        waiting: Vec::new(),
        moved: 0,
        compactions: 0,
        move_delay,
    };
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|&p| (sim.pods[p].arrival, p));
    let first = order.first().map_or(0, |&p| sim.pods[p].arrival);
    let mut next = 0;
    let mut now = first;
    loop {
        let arrival = order.get(next).map(|&p| sim.pods[p].arrival);
        let end = sim.ends.peek().map(|Reverse((t, _, _))| *t);
        now = match (arrival, end) {
            (None, None) => break,
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
        };
        sim.finish_until(now);
        while next < order.len() && sim.pods[order[next]].arrival <= now {
            sim.waiting.push(order[next]);
            next += 1;
        }
        sim.schedule(now);
        if policy == Policy::Compaction {
            sim.compact(now);
        }
    }
    let mut waits: Vec<Millis> =
        (0..count).filter_map(|p| Some(sim.started[p]? - sim.pods[p].arrival)).collect();
    waits.sort_unstable();
    let p95 = waits.get((waits.len() * 95).div_ceil(100).saturating_sub(1)).copied().unwrap_or(0);
    Outcome {
        policy,
        pods: count,
        served: waits.len(),
        p95_wait_s: p95 as f64 / 1000.0,
        moved: sim.moved,
        compactions: sim.compactions,
        hours: now.saturating_sub(first) as f64 / 3_600_000.0,
    }
}

impl Sim<'_> {
    /// Ends the pods whose run time is over by `now`, freeing their devices.
    fn finish_until(&mut self, now: Millis) {
        while let Some(Reverse((t, p, epoch))) = self.ends.peek().copied() {
            if t > now {
                break;
            }
            self.ends.pop();
            if self.epochs[p] == epoch && matches!(self.runs[p], Run::Running { .. }) {
                self.release(p);
                self.runs[p] = Run::Done;
            }
        }
    }

    fn release(&mut self, p: usize) {
        if let Run::Running { held, .. } = std::mem::replace(&mut self.runs[p], Run::Waiting) {
            for (g, device) in held {
                self.gpus[g].gpu.set_allocated(&device, false);
                self.holders[g].remove(&device);
            }
        }
    }

    /// Whether pod `p` may run on GPU `g` (its model and node constraints).
    fn allowed(&self, p: usize, g: usize) -> bool {
        let (pod, at) = (self.pods[p], &self.gpus[g]);
        pod.models.as_ref().is_none_or(|m| m.contains(&at.model))
            && pod.nodes.as_ref().is_none_or(|n| n.contains(&at.node))
    }

    /// First-fit for every waiting pod, in arrival order: each of its devices on the first GPU
    /// (then the first device) that has one free, all or none.
    fn schedule(&mut self, now: Millis) {
        let waiting = std::mem::take(&mut self.waiting);
        let mut still = Vec::new();
        // A profile that found no device this round finds none for the next pod either.
        let mut full: Vec<&str> = Vec::new();
        for p in waiting {
            let asks = self.asks[p].clone();
            if asks.iter().any(|a| full.contains(a)) {
                still.push(p);
                continue;
            }
            match self.first_fit(p, &asks, &|_, _| false) {
                Some(held) => self.start(p, held, now, 0),
                None => {
                    if asks.len() == 1 {
                        full.push(asks[0]);
                    }
                    still.push(p);
                }
            }
        }
        self.waiting = still;
    }

    /// The devices first-fit gives pod `p` (allocated), or none (nothing allocated).
    fn first_fit(
        &mut self,
        p: usize,
        asks: &[&str],
        skip: &dyn Fn(usize, &str) -> bool,
    ) -> Option<Vec<(usize, String)>> {
        let mut held: Vec<(usize, String)> = Vec::new();
        for profile in asks {
            let found = (0..self.gpus.len()).filter(|&g| self.allowed(p, g)).find_map(|g| {
                let device = self.gpus[g].gpu.first_free(profile, &|d| skip(g, d))?.to_string();
                Some((g, device))
            });
            match found {
                Some((g, device)) => {
                    self.gpus[g].gpu.set_allocated(&device, true);
                    held.push((g, device));
                }
                None => {
                    for (g, device) in held {
                        self.gpus[g].gpu.set_allocated(&device, false);
                    }
                    return None;
                }
            }
        }
        Some(held)
    }

    /// Pod `p` runs on `held` from `now + delay`.
    fn start(&mut self, p: usize, held: Vec<(usize, String)>, now: Millis, delay: Millis) {
        let begins = now + delay;
        self.started[p].get_or_insert(begins);
        let run_time = self.left[p].take().or(self.pods[p].duration);
        let ends = run_time.map(|d| begins + d);
        self.epochs[p] += 1;
        for (g, device) in &held {
            self.holders[*g].insert(device.clone(), p);
        }
        if let Some(t) = ends {
            self.ends.push(Reverse((t, p, self.epochs[p])));
        }
        self.runs[p] = Run::Running { held, ends };
    }

    /// What moving the pod on device `device` of GPU `g` costs for waiting pod `for_pod`: one
    /// pod, or `None` when it must not move (several devices, do-not-disrupt, higher priority).
    fn move_cost(&self, g: usize, device: &str, for_pod: usize) -> Option<u64> {
        let p = *self.holders[g].get(device)?;
        let pod = self.pods[p];
        let one_device = matches!(&self.runs[p], Run::Running { held, .. } if held.len() == 1);
        (one_device && !pod.do_not_disrupt && pod.priority <= self.pods[for_pod].priority).then_some(1)
    }

    /// For each waiting pod of one device that fits no GPU now (in arrival order; one pod per
    /// profile a round), the cheapest opening on one GPU it may use: the pods in the way move
    /// outside the opened placement and the waiting pod gets it.
    fn compact(&mut self, now: Millis) {
        let mut tried: Vec<&str> = Vec::new();
        for p in self.waiting.clone() {
            let [profile] = self.asks[p][..] else { continue };
            if tried.contains(&profile) {
                continue;
            }
            tried.push(profile);
            let best = (0..self.gpus.len())
                .filter(|&g| self.allowed(p, g))
                .filter_map(|g| {
                    Some((g, self.gpus[g].gpu.opening_for(profile, &|d| self.move_cost(g, d, p))?))
                })
                .min_by_key(|(g, o)| (o.cost, *g));
            let Some((g, opening)) = best else { continue };
            let movers: Vec<usize> =
                opening.moved.iter().filter_map(|d| self.holders[g].get(d).copied()).collect();
            for &m in &movers {
                if let Run::Running { ends, .. } = &self.runs[m] {
                    self.left[m] = ends.map(|e| e.saturating_sub(now));
                }
                self.release(m);
            }
            self.gpus[g].gpu.set_allocated(&opening.device, true);
            self.waiting.retain(|&w| w != p);
            self.start(p, vec![(g, opening.device.clone())], now, self.move_delay);
            let guarded = opening.guarded.clone();
            for m in movers {
                let asks = self.asks[m].clone();
                let outside = |at: usize, d: &str| at == g && guarded.iter().any(|x| x == d);
                match self.first_fit(m, &asks, &outside) {
                    Some(held) => self.start(m, held, now, self.move_delay),
                    None => self.waiting.push(m),
                }
                self.moved += 1;
            }
            self.compactions += 1;
        }
        self.waiting.sort_by_key(|&w| (self.pods[w].arrival, w));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::parse_cluster_spec;
    use crate::mapping::{Mapping, WholeGpus};
    use crate::models::resolve;
    use crate::trace::geometer as trace_format;

    fn outcome(csv: &str, policy: Policy) -> Outcome {
        let cluster = parse_cluster_spec("1xH100-80GB:1", |m| resolve(Catalog::builtin(), m)).unwrap();
        let trace = trace_format::parse("t.csv", csv).unwrap();
        let workload = Workload::new(&trace, &cluster, Mapping::Compute, WholeGpus::Whole);
        run(&cluster, &workload, policy, 30_000)
    }

    /// Six 1g.10gb pods fill placements 0-5 first-fit; three end, leaving 0, 1 and 5 held (the
    /// driver's issue tracker's H100); then a 3g.40gb arrives.
    const CHURN: &str = "name,arrival_s,duration_s,mig\n\
        a,0,,1g.10gb\nb,1,,1g.10gb\nc,2,60,1g.10gb\nd,3,60,1g.10gb\ne,4,60,1g.10gb\nf,5,,1g.10gb\n\
        train,100,600,3g.40gb\n";

    #[test]
    fn first_fit_leaves_a_larger_profile_waiting_and_compaction_serves_it_with_one_move() {
        let first_fit = outcome(CHURN, Policy::FirstFit);
        assert_eq!((first_fit.pods, first_fit.served, first_fit.moved), (7, 6, 0), "{first_fit:?}");
        let compacted = outcome(CHURN, Policy::Compaction);
        assert_eq!((compacted.served, compacted.moved, compacted.compactions), (7, 1, 1), "{compacted:?}");
        // It waited only for the move.
        assert!(compacted.p95_wait_s <= 30.0, "{compacted:?}");
    }

    #[test]
    fn a_do_not_disrupt_pod_is_never_moved() {
        let protected = CHURN
            .replace("name,arrival_s,duration_s,mig\n", "name,arrival_s,duration_s,mig,do_not_disrupt\n")
            .lines()
            .map(|l| match l.split(',').next() {
                Some("name") => l.to_string(),
                Some("f") => format!("{l},true"),
                _ => format!("{l},"),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let compacted = outcome(&protected, Policy::Compaction);
        assert_eq!(
            (compacted.served, compacted.moved),
            (7, 2),
            "0-3 opens: a and b move, f stays: {compacted:?}"
        );
    }
}
