//! Planning rounds: demand changes open a batch, a batch's end asks the strategy for a plan,
//! and the plan is carried out (evictions at once, each changed node ready after its modelled
//! steps, the room it made going first to the pods it was made for).

use std::collections::BTreeMap;

use crate::strategy::{GpuView, NodeView, PlanView, Replan, Slot};
use crate::workload::ProfileKey;

use super::state::PodIdx;
use super::{Engine, Event, Reconfiguration, SimError};

impl<'a> Engine<'a> {
    /// Pending demand changed: open a batch or extend the open one, within its maximum.
    pub(super) fn demand_changed(&mut self) {
        if !self.strategy.kind().is_dynamic() {
            return;
        }
        self.last_change = self.now;
        let opened = *self.batch_open.get_or_insert(self.now);
        let end = (self.now + self.timings.batch_idle).min(opened + self.timings.batch_max);
        self.batch_generation += 1;
        self.push(end, Event::BatchEnd { generation: self.batch_generation });
    }

    pub(super) fn batch_end(&mut self, generation: u64) -> Result<(), SimError> {
        if generation != self.batch_generation {
            return Ok(());
        }
        self.batch_open = None;
        let demand: Vec<PodIdx> = self.pending.pods().filter(|&p| self.pods[p].promised.is_none()).collect();
        if demand.is_empty() {
            return Ok(());
        }
        let view = self.plan_view(demand);
        // Every node is reconfiguring: nothing a planner could change until one is ready.
        if view.gpus.is_empty() {
            return Ok(());
        }
        let replan = self.strategy.plan(&view)?;
        let Some(replan) = replan else { return Ok(()) };
        self.planner_calls += 1;
        self.planner_time += replan.planner_time;
        self.planner_time_max = self.planner_time_max.max(replan.planner_time);
        self.apply(replan)
    }

    fn plan_view(&self, demand: Vec<PodIdx>) -> PlanView<'a> {
        let mut nodes = Vec::with_capacity(self.state.nodes.len());
        let mut gpus = Vec::new();
        for (n, node) in self.state.nodes.iter().enumerate() {
            let plannable = !self.in_flight.contains_key(&n) && self.now >= self.stable_at[n];
            nodes.push(NodeView {
                index: n,
                plannable,
                cpu_free: node.cpu_free,
                memory_free: node.memory_free,
            });
            if !plannable {
                continue;
            }
            for (i, g) in self.state.node_gpus(n).enumerate() {
                let gpu = &self.state.gpus[g];
                gpus.push(GpuView {
                    id: g,
                    node: n,
                    index_on_node: i as u32,
                    model: gpu.model,
                    // A slice kept for a gang member is its: a plan may not give it to another.
                    slots: gpu.slots.iter().map(|s| (s.slot, s.pod.or(s.reserved))).collect(),
                });
            }
        }
        let gangs = self.gang_views(&demand);
        PlanView { now: self.now, cluster: self.cluster, workload: self.workload, nodes, gpus, demand, gangs }
    }

    fn bad_plan(&self, reason: String) -> SimError {
        SimError::BadPlan {
            strategy: self.strategy.kind().to_string(),
            time_s: self.now as f64 / 1000.0,
            reason,
        }
    }

    /// Carries a plan out: evictions now, each changed node ready after its modelled steps.
    fn apply(&mut self, replan: Replan) -> Result<(), SimError> {
        let mut by_node: BTreeMap<usize, Vec<(usize, Vec<Slot>)>> = BTreeMap::new();
        for (gpu, target) in replan.targets {
            let node = self
                .state
                .gpus
                .get(gpu)
                .map(|g| g.node)
                .ok_or_else(|| self.bad_plan(format!("GPU id {gpu} does not exist")))?;
            if self.in_flight.contains_key(&node) {
                return Err(self.bad_plan(format!(
                    "it changes node {} while that node reconfigures",
                    self.cluster.nodes[node].name
                )));
            }
            if self.state.gpus[gpu].slots.iter().map(|s| s.slot).eq(target.iter().copied()) {
                continue;
            }
            by_node.entry(node).or_default().push((gpu, target));
        }
        let placements: Vec<(PodIdx, usize)> =
            replan.placements.into_iter().filter(|(_, node)| by_node.contains_key(node)).collect();
        let reservations = replan.reservations;
        // A plan that makes room for nobody is not worth a reconfiguration.
        if placements.is_empty() {
            return Ok(());
        }
        let mut drained = BTreeMap::new();
        for &p in &replan.evictions {
            let pod = self
                .workload
                .pods
                .get(p)
                .ok_or_else(|| self.bad_plan(format!("pod index {p} does not exist")))?;
            if pod.do_not_disrupt {
                return Err(self.bad_plan(format!("it evicts do-not-disrupt pod {}", pod.name)));
            }
            // A gang member whose slices are kept (shown to the planner as its) gives them
            // back: the plan moves it elsewhere.
            if self.pods[p].reserved.is_some() {
                self.unreserve(p);
                continue;
            }
            if self.pods[p].running.is_none() {
                return Err(self.bad_plan(format!("it evicts pod {}, which is not running", pod.name)));
            }
            let holding = self.pods[p].holding_since.is_some();
            if holding {
                self.stop_holding(p);
                self.leave_gang(p);
            } else {
                self.running -= 1;
            }
            let Some((node, held)) = self.pods[p].running.take() else { continue };
            self.state.release(pod, node, &held);
            self.evictions += 1;
            self.pods[p].run += 1;
            self.pods[p].evicted += 1;
            drained.insert(node, ());
            self.make_pending(p);
        }
        let mut last_ready = self.now;
        for (&node, targets) in &by_node {
            let destroys = targets
                .iter()
                .any(|(gpu, target)| self.state.gpus[*gpu].slots.iter().any(|s| !target.contains(&s.slot)));
            for (gpu, target) in targets {
                if let Some(kept) =
                    self.state.gpus[*gpu].slots.iter().find(|s| s.pod.is_some() && !target.contains(&s.slot))
                {
                    let pod = &self.workload.pods[kept.pod.unwrap_or_default()];
                    return Err(self.bad_plan(format!(
                        "it destroys the instance of running pod {} without evicting it",
                        pod.name
                    )));
                }
            }
            // Cordon while instances go, so that nothing lands on a slice being destroyed.
            if destroys {
                self.state.set_cordoned(node, true);
            }
            self.gpus_reconfigured += targets.len() as u64;
            let steps = self.timings.reconfigure + self.timings.plugin_restart;
            let drain = if drained.contains_key(&node) { self.timings.drain } else { 0 };
            self.push(self.now + drain + steps, Event::Ready { node });
            last_ready = last_ready.max(self.now + drain + steps);
            self.in_flight.insert(node, Reconfiguration { targets: targets.clone() });
            if self.timings.stabilisation > 0 {
                self.stable_at[node] = self.now + self.timings.stabilisation;
                self.push(self.stable_at[node], Event::Stable { node });
            }
        }
        self.reserve(&placements, &reservations, last_ready);
        for (p, node) in placements {
            if let Some(run) = self.pods.get_mut(p).filter(|r| r.pending_since.is_some()) {
                run.promised = Some(node);
                self.promised_to.entry(node).or_default().push(p);
            }
        }
        // An evicted pod the plan moves onto slices that already exist starts there now.
        for &p in &replan.evictions {
            if self.pods[p].promised.is_none() && self.pods[p].pending_since.is_some() {
                self.try_start(p);
            }
        }
        if self.pending.pods().any(|p| self.pods[p].promised.is_none()) {
            self.demand_changed();
        }
        Ok(())
    }

    pub(super) fn ready(&mut self, node: usize) -> Result<(), SimError> {
        let Some(reconfiguration) = self.in_flight.remove(&node) else { return Ok(()) };
        for (gpu, target) in &reconfiguration.targets {
            let old: Vec<Slot> = self.state.gpus[*gpu].slots.iter().map(|s| s.slot).collect();
            self.changes.reconfigured(*gpu, &old, target);
            if let Err((_, p)) = self.state.set_geometry(*gpu, target) {
                let name = self.workload.pods[p].name.clone();
                return Err(self.bad_plan(format!("pod {name} holds an instance its plan removes")));
            }
        }
        self.state.set_cordoned(node, false);
        self.state.recount(node);
        // The pods the plan made this room for get it first (the planner's placements stand in
        // for the scheduler's choice); otherwise a pod earlier in the queue, promised a node
        // that is not ready yet, could take it, and a planner that evicts could chase that
        // pod around the cluster for ever.
        let mut gangs_waiting = Vec::new();
        for p in self.promised_to.remove(&node).unwrap_or_default() {
            if self.pods[p].promised != Some(node) {
                continue;
            }
            self.pods[p].promised = None;
            let pod = &self.workload.pods[p];
            if self.pods[p].pending_since.is_some() && self.state.fits(pod, &self.requests[p], node) {
                self.start_on(p, node);
                gangs_waiting.extend(self.waiting_gang(p));
            }
        }
        // A gang placed partly on slices that already existed: its other members join now if
        // that completes it.
        gangs_waiting.sort_unstable();
        gangs_waiting.dedup();
        for g in gangs_waiting {
            if !self.gangs[g].started {
                self.try_gang(g);
            }
        }
        let offered: Vec<ProfileKey> =
            (0..self.workload.profiles.len()).filter(|&k| self.state.nodes[node].free[k] > 0).collect();
        self.schedule(&offered);
        if !self.pending.is_empty() {
            self.demand_changed();
        }
        Ok(())
    }
}
