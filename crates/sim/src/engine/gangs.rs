//! Gangs in the engine: a coscheduling scheduler. A gang's members run only together: none
//! runs until `min_members` of them hold their slices at once, and then all of those start.
//!
//! The model follows the Coscheduling plugin of kubernetes-sigs/scheduler-plugins
//! (`pkg/coscheduling/coscheduling.go`): a member assumed onto a node waits at Permit until its
//! group's `minMember` are assumed, then Permit allows them all; a member waiting longer than
//! `permitWaitingTimeSeconds` (default 60 s) times out, and Unreserve rejects every waiting
//! member of its group, which gives its resources back and is scheduled again later.
//!
//! Two ways a member gets slices:
//!
//! - The scheduler's own first-fit (on arrival, when slices free up): it tries a gang's pending
//!   members together (the plugin's queue sort keeps a group's pods together) and keeps what it
//!   assumed only if the gang then reaches its minimum; otherwise it gives it all back at the
//!   same instant, as the plugin's PostFilter rejects the waiting members of a group whose pod
//!   cannot be placed. So the scheduler alone never leaves a slice idle for a gang.
//! - The slices a plan made for it (the planner's placements stand in for the scheduler's
//!   choice, see `Engine::ready`): the member is assumed there when its node is ready and waits
//!   at Permit for the rest of its gang, holding those slices idle, until the gang starts or the
//!   Permit timeout ([`super::Timings::gang_timeout`]) gives them back. A planner that places
//!   only part of a gang leaves slices idle this way; one that places a gang whole, on nodes
//!   that are ready together, does not.
//!
//! Once a gang has started its members are pods like any other: one placed later (a gang with
//! more members than its minimum), or evicted and placed again, runs as soon as it has slices.

use crate::strategy::GangView;
use crate::trace::Millis;
use crate::workload::{GangIdx, ProfileKey};

use super::state::PodIdx;
use super::{Engine, Event};

/// A gang during a run.
#[derive(Debug, Clone, Default)]
pub(super) struct GangRun {
    pub started: bool,
    /// Members holding slices while the gang has not started (waiting at Permit).
    pub holding: Vec<PodIdx>,
    /// Bumped whenever the waiting ends (start, timeout, every holder evicted), so that a
    /// timeout scheduled for an earlier wait is ignored.
    pub epoch: u32,
}

impl Engine<'_> {
    /// The gang of `p`, if it has one that has not started.
    pub(super) fn waiting_gang(&self, p: PodIdx) -> Option<GangIdx> {
        self.workload.pods[p].gang.filter(|&g| !self.gangs[g].started)
    }

    /// Members that must still get slices before the gang starts.
    fn still_needed(&self, g: GangIdx) -> usize {
        (self.workload.gangs[g].min_members as usize).saturating_sub(self.gangs[g].holding.len())
    }

    /// The scheduler's all-or-nothing attempt for a gang that has not started: every pending
    /// member that fits is assumed (first-fit, in member order); they are kept, and the gang
    /// starts, only if that reaches its minimum. Returns whether the gang started.
    pub(super) fn try_gang(&mut self, g: GangIdx) -> bool {
        let need = self.still_needed(g);
        let pending: Vec<PodIdx> = self.workload.gangs[g]
            .members
            .iter()
            .copied()
            .filter(|&p| self.pods[p].pending_since.is_some())
            .collect();
        if pending.len() < need {
            return false;
        }
        let mut assumed = Vec::new();
        for p in pending {
            let pod = &self.workload.pods[p];
            let kept = self.pods[p].reserved;
            // A member with slices kept for it takes those, even on a node cordoned since (it
            // was assumed there, as a pod waiting at Permit is); otherwise the first fit.
            if let Some(node) = kept {
                if let Some(held) = self.state.take_kept(p, &self.requests[p], node) {
                    assumed.push((p, node, held));
                    continue;
                }
                self.state.unreserve(p, pod, node);
            }
            if let Some(node) = self.state.find_node(pod, &self.requests[p]) {
                let held = self.state.bind(p, pod, &self.requests[p], node);
                assumed.push((p, node, held));
            } else if let Some(node) = kept {
                self.state.reserve(p, pod, &self.requests[p], node);
            }
        }
        if assumed.len() < need {
            for (p, node, held) in assumed.iter().rev() {
                self.state.release(&self.workload.pods[*p], *node, held);
            }
            // Nothing was assumed: what was kept for a member is kept again.
            for (p, _, _) in &assumed {
                if let Some(node) = self.pods[*p].reserved {
                    self.state.reserve(*p, &self.workload.pods[*p], &self.requests[*p], node);
                }
            }
            return false;
        }
        for (p, node, held) in assumed {
            if self.pods[p].reserved.take().is_some() {
                self.pods[p].promised = None;
            }
            self.record_bind(p, node, held);
            self.after_bind(p);
        }
        true
    }

    /// A member of gang `g` (not started) got its slices: it waits for the rest of its gang,
    /// and the gang starts if it is now complete.
    pub(super) fn hold(&mut self, p: PodIdx, g: GangIdx) {
        self.pods[p].holding_since = Some(self.now);
        let memory = self.held_memory(p);
        self.idle_memory += memory;
        if let Some((_, held)) = &self.pods[p].running {
            self.changes.taken(held, false);
        }
        self.gangs[g].holding.push(p);
        if self.gangs[g].holding.len() == 1 && self.timings.gang_timeout > 0 {
            let epoch = self.gangs[g].epoch;
            self.push(self.now + self.timings.gang_timeout, Event::GangTimeout { gang: g, epoch });
        }
        if self.still_needed(g) == 0 {
            self.start_gang(g);
        }
    }

    /// Permit allows every waiting member: they all start now.
    fn start_gang(&mut self, g: GangIdx) {
        let run = &mut self.gangs[g];
        run.started = true;
        run.epoch += 1;
        for p in std::mem::take(&mut run.holding) {
            self.stop_holding(p);
            self.start_running(p);
        }
        // Members beyond the minimum are pods like any other now: nothing is kept for them.
        let freed = self.drop_reservations(g);
        self.schedule(&freed);
    }

    /// Gives back the slices kept for the pending members of gang `g`; returns their profiles.
    fn drop_reservations(&mut self, g: GangIdx) -> Vec<ProfileKey> {
        let mut freed = Vec::new();
        for &p in &self.workload.gangs[g].members {
            freed.extend(self.unreserve(p));
        }
        freed
    }

    /// Gives back what is kept for `p`, and it is demand for the planner again.
    pub(super) fn unreserve(&mut self, p: PodIdx) -> Vec<ProfileKey> {
        let Some(node) = self.pods[p].reserved.take() else { return Vec::new() };
        if self.pods[p].promised == Some(node) {
            self.pods[p].promised = None;
        }
        self.state.unreserve(p, &self.workload.pods[p], node)
    }

    /// A plan that makes new slices for a gang's members and puts others of the same gang on
    /// free slices that already exist: those slices are kept for them (no other pod may take
    /// them, as for a pod nominated to a node) until the gang starts, or until the Permit
    /// timeout after the plan's last node is ready. Without this, a pod arriving while the new
    /// slices are made takes one of them, and the members placed on the new slices wait at
    /// Permit, holding them idle, for a member that has nowhere to go. Only members of gangs
    /// that have not started are kept for: any other pod the scheduler places at once.
    pub(super) fn reserve(
        &mut self,
        placements: &[(PodIdx, usize)],
        reservations: &[(PodIdx, usize)],
        until: Millis,
    ) {
        for &(p, node) in reservations {
            let Some(g) = self.waiting_gang(p) else { continue };
            let run = &self.pods[p];
            if run.pending_since.is_none() || run.promised.is_some() || run.reserved.is_some() {
                continue;
            }
            if !placements.iter().any(|&(q, _)| self.workload.pods[q].gang == Some(g)) {
                continue;
            }
            if node >= self.state.nodes.len()
                || !self.state.reserve(p, &self.workload.pods[p], &self.requests[p], node)
            {
                continue;
            }
            let run = &mut self.pods[p];
            run.reserved = Some(node);
            run.promised = Some(node);
            run.reserve_stamp += 1;
            let stamp = run.reserve_stamp;
            self.push(until + self.timings.gang_timeout, Event::Unreserve { pod: p, stamp });
        }
    }

    /// The slices kept for `p` by a plan are given back if it has not taken them yet.
    pub(super) fn reservation_expired(&mut self, p: PodIdx, stamp: u32) {
        if self.pods[p].reserve_stamp != stamp || self.pods[p].reserved.is_none() {
            return;
        }
        let freed = self.unreserve(p);
        self.schedule(&freed);
        if !self.pending.is_empty() {
            self.demand_changed();
        }
    }

    /// Ends `p`'s wait at Permit (its gang started, timed out, or `p` was evicted); the time
    /// counts as waiting.
    pub(super) fn stop_holding(&mut self, p: PodIdx) {
        let Some(since) = self.pods[p].holding_since.take() else { return };
        self.pods[p].waited += self.now - since;
        self.idle_memory -= self.held_memory(p);
    }

    /// An evicted member of a gang that has not started leaves its gang's waiting members.
    pub(super) fn leave_gang(&mut self, p: PodIdx) {
        let Some(g) = self.waiting_gang(p) else { return };
        let run = &mut self.gangs[g];
        run.holding.retain(|&q| q != p);
        if run.holding.is_empty() {
            run.epoch += 1;
        }
    }

    /// The Permit timeout of a gang's wait: every waiting member gives its slices back and is
    /// pending again (Unreserve), and the slices are offered to the queue.
    pub(super) fn gang_timeout(&mut self, g: GangIdx, epoch: u32) {
        let run = &mut self.gangs[g];
        if run.started || run.epoch != epoch {
            return;
        }
        run.epoch += 1;
        self.gang_timeouts += 1;
        let mut freed = Vec::new();
        for p in std::mem::take(&mut self.gangs[g].holding) {
            self.stop_holding(p);
            let Some((node, held)) = self.pods[p].running.take() else { continue };
            self.state.release(&self.workload.pods[p], node, &held);
            freed.extend(held.iter().map(|(_, s)| s.profile));
            self.make_pending(p);
        }
        freed.extend(self.drop_reservations(g));
        self.schedule(&freed);
        if !self.pending.is_empty() {
            self.demand_changed();
        }
    }

    /// The gangs of `demand` that have not started, with the members that already count: those
    /// holding slices and those promised a node that is reconfiguring.
    pub(super) fn gang_views(&self, demand: &[PodIdx]) -> Vec<GangView> {
        let mut gangs: Vec<GangIdx> = demand.iter().filter_map(|&p| self.waiting_gang(p)).collect();
        gangs.sort_unstable();
        gangs.dedup();
        gangs
            .into_iter()
            .map(|g| {
                let promised = self.workload.gangs[g]
                    .members
                    .iter()
                    .filter(|&&p| self.pods[p].promised.is_some() && self.pods[p].pending_since.is_some())
                    .count();
                GangView { gang: g, members_counted: (self.gangs[g].holding.len() + promised) as u32 }
            })
            .collect()
    }

    /// Memory slices `p` holds.
    fn held_memory(&self, p: PodIdx) -> u64 {
        let Some((_, held)) = &self.pods[p].running else { return 0 };
        held.iter()
            .map(|(g, slot)| u64::from(self.state.slices.0[self.state.gpus[*g].model][slot.profile].0))
            .sum()
    }
}
