//! Cluster state during a run: every GPU's instances and who holds them, free capacity per node
//! and profile, and the index that makes finding a node with a free instance O(log n).

use std::collections::BTreeSet;

use crate::cluster::Cluster;
use crate::metrics::GpuLayout;
use crate::workload::{ProfileKey, SimPod, WHOLE_GPU};

use super::super::strategy::Slot;

pub(crate) type PodIdx = usize;

#[derive(Debug, Clone)]
pub(crate) struct SlotState {
    pub slot: Slot,
    pub pod: Option<PodIdx>,
    /// Free, but kept for this pod (a gang member a plan put on this slice): nobody else may
    /// take it, as kube-scheduler keeps room for a pod nominated to a node.
    pub reserved: Option<PodIdx>,
}

#[derive(Debug, Clone)]
pub(crate) struct GpuState {
    pub node: usize,
    pub model: usize,
    pub slots: Vec<SlotState>,
}

impl GpuState {
    /// MIG mode off: the GPU is one [`WHOLE_GPU`] instance.
    pub(crate) fn is_whole(&self) -> bool {
        is_whole(self.slots.iter().map(|s| &s.slot))
    }
}

/// Whether a geometry is the whole GPU (MIG mode off).
pub(crate) fn is_whole<'s>(mut slots: impl Iterator<Item = &'s Slot>) -> bool {
    slots.any(|s| s.profile == WHOLE_GPU)
}

#[derive(Debug, Clone)]
pub(crate) struct NodeState {
    pub first_gpu: usize,
    pub gpus: usize,
    pub cpu_free: Option<u64>,
    pub memory_free: Option<u64>,
    /// No new pod may land here (a reconfiguration that destroys instances is under way).
    pub cordoned: bool,
    /// Free instances per profile key.
    pub free: Vec<u32>,
}

/// Slices held per profile and model: `(memory, compute)` by `[model][profile]`.
pub(crate) struct SliceTable(pub Vec<Vec<(u8, u8)>>);

pub(crate) struct ClusterState {
    pub gpus: Vec<GpuState>,
    pub nodes: Vec<NodeState>,
    /// Free instances per profile over schedulable nodes.
    pub free_total: Vec<u64>,
    /// Schedulable nodes with at least one free instance, per profile.
    free_nodes: Vec<BTreeSet<usize>>,
    pub slices: SliceTable,
    pub allocated_memory: u64,
    pub allocated_compute: u64,
    /// GPUs with MIG mode off.
    pub whole_gpus: u32,
}

impl ClusterState {
    pub(super) fn new(cluster: &Cluster, profiles: &[String], initial: impl Fn(usize) -> Vec<Slot>) -> Self {
        let mut table = Vec::new();
        for model in &cluster.models {
            let mut row = vec![(0u8, 0u8); profiles.len()];
            row[WHOLE_GPU] = (model.memory_slices, model.compute_slices);
            for (key, name) in profiles.iter().enumerate().skip(1) {
                if let Some(p) = model.profile(name) {
                    row[key] = (p.memory_slices, p.compute_slices);
                }
            }
            table.push(row);
        }
        let mut state = ClusterState {
            gpus: Vec::new(),
            nodes: Vec::new(),
            free_total: vec![0; profiles.len()],
            free_nodes: vec![BTreeSet::new(); profiles.len()],
            slices: SliceTable(table),
            allocated_memory: 0,
            allocated_compute: 0,
            whole_gpus: 0,
        };
        for (n, spec) in cluster.nodes.iter().enumerate() {
            let geometry = initial(spec.model);
            let first_gpu = state.gpus.len();
            for _ in 0..spec.gpus {
                let slots =
                    geometry.iter().map(|s| SlotState { slot: *s, pod: None, reserved: None }).collect();
                state.gpus.push(GpuState { node: n, model: spec.model, slots });
                state.whole_gpus += u32::from(is_whole(geometry.iter()));
            }
            state.nodes.push(NodeState {
                first_gpu,
                gpus: spec.gpus as usize,
                cpu_free: spec.cpu_milli,
                memory_free: spec.memory_mib,
                cordoned: false,
                free: vec![0; profiles.len()],
            });
            state.recount(n);
        }
        state
    }

    /// Every GPU, counted by model and geometry (see [`GpuLayout`]), in model then geometry order.
    pub(super) fn layout(&self, cluster: &Cluster, profiles: &[String]) -> Vec<GpuLayout> {
        let mut counts: std::collections::BTreeMap<(usize, String), u32> = Default::default();
        for gpu in &self.gpus {
            let mut slots: Vec<&SlotState> = gpu.slots.iter().collect();
            slots.sort_by_key(|s| s.slot.start);
            let held = |s: &SlotState| if s.pod.is_some() { "*" } else { "" };
            let names: Vec<String> =
                slots.iter().map(|s| format!("{}{}", profiles[s.slot.profile], held(s))).collect();
            let geometry = if names.is_empty() { "-".to_string() } else { names.join("+") };
            *counts.entry((gpu.model, geometry)).or_default() += 1;
        }
        counts
            .into_iter()
            .map(|((m, geometry), gpus)| GpuLayout { model: cluster.models[m].name.clone(), geometry, gpus })
            .collect()
    }

    pub(super) fn node_gpus(&self, node: usize) -> std::ops::Range<usize> {
        let n = &self.nodes[node];
        n.first_gpu..n.first_gpu + n.gpus
    }

    /// Memory slices on `node` that no running pod holds: free instances, instances kept for
    /// a gang member, space no instance covers.
    pub(super) fn unheld_memory(&self, node: usize) -> u64 {
        let unheld_on = |gpu: &GpuState| {
            let table = &self.slices.0[gpu.model];
            let held: u64 = gpu
                .slots
                .iter()
                .filter(|s| s.pod.is_some())
                .map(|s| u64::from(table[s.slot.profile].0))
                .sum();
            u64::from(table[WHOLE_GPU].0).saturating_sub(held)
        };
        self.node_gpus(node).map(|g| unheld_on(&self.gpus[g])).sum()
    }

    /// Recomputes a node's free counts from its slots and refreshes the index.
    pub(super) fn recount(&mut self, node: usize) {
        let old = std::mem::take(&mut self.nodes[node].free);
        let mut free = vec![0u32; old.len()];
        for g in self.node_gpus(node) {
            for s in self.gpus[g].slots.iter().filter(|s| s.pod.is_none() && s.reserved.is_none()) {
                free[s.slot.profile] += 1;
            }
        }
        let schedulable = !self.nodes[node].cordoned;
        for key in 0..free.len() {
            if schedulable {
                self.free_total[key] = self.free_total[key] + u64::from(free[key]) - u64::from(old[key]);
            }
            self.index(node, key, schedulable && free[key] > 0);
        }
        self.nodes[node].free = free;
    }

    fn index(&mut self, node: usize, key: ProfileKey, present: bool) {
        if present {
            self.free_nodes[key].insert(node);
        } else {
            self.free_nodes[key].remove(&node);
        }
    }

    pub(super) fn set_cordoned(&mut self, node: usize, cordoned: bool) {
        if self.nodes[node].cordoned == cordoned {
            return;
        }
        for key in 0..self.free_total.len() {
            let free = u64::from(self.nodes[node].free[key]);
            if cordoned {
                self.free_total[key] -= free;
            } else {
                self.free_total[key] += free;
            }
            self.index(node, key, !cordoned && free > 0);
        }
        self.nodes[node].cordoned = cordoned;
    }

    /// The first schedulable node (in name order) where `pod` fits, for the request `items`.
    pub(super) fn find_node(&self, pod: &SimPod, items: &[(ProfileKey, u32)]) -> Option<usize> {
        if items.iter().any(|&(k, c)| self.free_total.get(k).copied().unwrap_or(0) < u64::from(c)) {
            return None;
        }
        // Walk the nodes of the scarcest profile: the shortest candidate list.
        let &(lead, _) = items.iter().min_by_key(|&&(k, _)| self.free_total[k])?;
        self.free_nodes[lead].iter().copied().find(|&n| self.fits(pod, items, n))
    }

    pub(super) fn fits(&self, pod: &SimPod, items: &[(ProfileKey, u32)], node: usize) -> bool {
        let state = &self.nodes[node];
        let model = self.gpus.get(state.first_gpu).map(|g| g.model);
        !state.cordoned
            && pod.nodes.as_ref().is_none_or(|allowed| allowed.binary_search(&node).is_ok())
            && pod.models.as_ref().is_none_or(|allowed| model.is_some_and(|m| allowed.contains(&m)))
            && state.cpu_free.is_none_or(|free| free >= pod.cpu_milli)
            && state.memory_free.is_none_or(|free| free >= pod.memory_mib)
            && items.iter().all(|&(k, c)| state.free[k] >= c)
    }

    /// Gives `pod` free instances on `node` (lowest GPU first) and returns what it holds.
    pub(super) fn bind(
        &mut self,
        p: PodIdx,
        pod: &SimPod,
        items: &[(ProfileKey, u32)],
        node: usize,
    ) -> Vec<(usize, Slot)> {
        let mut held = Vec::new();
        for &(key, count) in items {
            let mut left = count;
            for g in self.node_gpus(node) {
                let model = self.gpus[g].model;
                for s in self.gpus[g].slots.iter_mut() {
                    if left > 0 && s.pod.is_none() && s.reserved.is_none() && s.slot.profile == key {
                        s.pod = Some(p);
                        left -= 1;
                        held.push((g, s.slot));
                        let (m, c) = self.slices.0[model][key];
                        self.allocated_memory += u64::from(m);
                        self.allocated_compute += u64::from(c);
                    }
                }
            }
            debug_assert_eq!(left, 0, "bind called without room");
        }
        let state = &mut self.nodes[node];
        state.cpu_free = state.cpu_free.map(|f| f - pod.cpu_milli);
        state.memory_free = state.memory_free.map(|f| f - pod.memory_mib);
        self.recount(node);
        held
    }

    /// Keeps free instances on `node` for `p` (lowest GPU first), enough for `items`, and its
    /// CPU and memory; false (and nothing kept) if the node has not that much free.
    pub(super) fn reserve(
        &mut self,
        p: PodIdx,
        pod: &SimPod,
        items: &[(ProfileKey, u32)],
        node: usize,
    ) -> bool {
        let state = &mut self.nodes[node];
        if !items.iter().all(|&(k, c)| state.free[k] >= c)
            || state.cpu_free.is_some_and(|free| free < pod.cpu_milli)
            || state.memory_free.is_some_and(|free| free < pod.memory_mib)
        {
            return false;
        }
        state.cpu_free = state.cpu_free.map(|f| f - pod.cpu_milli);
        state.memory_free = state.memory_free.map(|f| f - pod.memory_mib);
        for &(key, count) in items {
            let mut left = count;
            for g in self.node_gpus(node) {
                for s in self.gpus[g].slots.iter_mut() {
                    if left > 0 && s.pod.is_none() && s.reserved.is_none() && s.slot.profile == key {
                        s.reserved = Some(p);
                        left -= 1;
                    }
                }
            }
        }
        self.recount(node);
        true
    }

    /// Gives `p` the instances kept for it on `node` (its CPU and memory are counted there
    /// already) and returns what it holds; `None`, and nothing changed, unless they are
    /// exactly `items`. The kept instances themselves, not any free ones of the same profile:
    /// another GPU of the node may be reconfiguring.
    pub(super) fn take_kept(
        &mut self,
        p: PodIdx,
        items: &[(ProfileKey, u32)],
        node: usize,
    ) -> Option<Vec<(usize, Slot)>> {
        let mut kept = Vec::new();
        for g in self.node_gpus(node) {
            kept.extend(self.gpus[g].slots.iter().filter(|s| s.reserved == Some(p)).map(|s| (g, s.slot)));
        }
        let count = |key| kept.iter().filter(|(_, s)| s.profile == key).count();
        if kept.len() != items.iter().map(|&(_, c)| c as usize).sum::<usize>()
            || items.iter().any(|&(key, c)| count(key) != c as usize)
        {
            return None;
        }
        for &(g, slot) in &kept {
            let model = self.gpus[g].model;
            if let Some(s) = self.gpus[g].slots.iter_mut().find(|s| s.slot == slot) {
                s.reserved = None;
                s.pod = Some(p);
            }
            let (m, c) = self.slices.0[model][slot.profile];
            self.allocated_memory += u64::from(m);
            self.allocated_compute += u64::from(c);
        }
        Some(kept)
    }

    /// Gives back what is kept for `p` on `node`; returns the profiles freed.
    pub(super) fn unreserve(&mut self, p: PodIdx, pod: &SimPod, node: usize) -> Vec<ProfileKey> {
        let mut freed = Vec::new();
        for g in self.node_gpus(node) {
            for s in self.gpus[g].slots.iter_mut().filter(|s| s.reserved == Some(p)) {
                s.reserved = None;
                freed.push(s.slot.profile);
            }
        }
        if !freed.is_empty() {
            let state = &mut self.nodes[node];
            state.cpu_free = state.cpu_free.map(|f| f + pod.cpu_milli);
            state.memory_free = state.memory_free.map(|f| f + pod.memory_mib);
        }
        self.recount(node);
        freed
    }

    /// Frees what a pod holds on `node`.
    pub(super) fn release(&mut self, pod: &SimPod, node: usize, held: &[(usize, Slot)]) {
        for &(g, slot) in held {
            let model = self.gpus[g].model;
            if let Some(s) = self.gpus[g].slots.iter_mut().find(|s| s.slot == slot) {
                s.pod = None;
                let (m, c) = self.slices.0[model][slot.profile];
                self.allocated_memory -= u64::from(m);
                self.allocated_compute -= u64::from(c);
            }
        }
        let state = &mut self.nodes[node];
        state.cpu_free = state.cpu_free.map(|f| f + pod.cpu_milli);
        state.memory_free = state.memory_free.map(|f| f + pod.memory_mib);
        self.recount(node);
    }

    /// Replaces a GPU's geometry, keeping the holder of every instance that stays. Returns the
    /// instance of the old geometry that was in use and is missing from the new one, if any.
    pub(super) fn set_geometry(&mut self, gpu: usize, target: &[Slot]) -> Result<(), (Slot, PodIdx)> {
        let old = &self.gpus[gpu].slots;
        if let Some(lost) = old.iter().find(|s| s.pod.is_some() && !target.contains(&s.slot)) {
            return Err((lost.slot, lost.pod.unwrap_or_default()));
        }
        let slots = target
            .iter()
            .map(|t| {
                let kept = old.iter().find(|s| s.slot == *t);
                SlotState { slot: *t, pod: kept.and_then(|s| s.pod), reserved: kept.and_then(|s| s.reserved) }
            })
            .collect();
        let was_whole = self.gpus[gpu].is_whole();
        self.gpus[gpu].slots = slots;
        match (was_whole, self.gpus[gpu].is_whole()) {
            (false, true) => self.whole_gpus += 1,
            (true, false) => self.whole_gpus -= 1,
            _ => {}
        }
        Ok(())
    }
}
