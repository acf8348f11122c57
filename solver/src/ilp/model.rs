//! The integer program over the aggregate, with the objective split into levels that the
//! stages optimise in strict order.

use std::collections::BTreeMap;

use crate::plan::prepare::Problem;

use super::aggregate::Aggregate;
use super::backend::Lp;

/// A goal: coefficients to maximise and the width of its range (max - min), which sets the
/// weight of the level above it.
pub(crate) struct Level {
    pub name: &'static str,
    pub coefs: Vec<(usize, f64)>,
    pub range: f64,
}

pub(crate) struct Model {
    pub lp: Lp,
    /// Per GPU class, per entry.
    pub x: Vec<Vec<usize>>,
    /// `(demand class, group) -> variable`.
    pub y: BTreeMap<(usize, usize), usize>,
    /// `(group, profile key) -> the row that holds the slices its pods take to those there`.
    pub slice_rows: BTreeMap<(usize, usize), usize>,
    /// In order: demand met, evictions, expected demand, GPUs changed, headroom, free ranges,
    /// and where there are gangs, the node groups their members spread over.
    pub levels: Vec<Level>,
}

/// `count_freed`: whether an entry that evicts pods gives their CPU and memory back to its
/// group (exact; left out, the program is a restriction: see [`Builder::freed`]).
pub(crate) fn build(problem: &Problem, agg: &Aggregate, count_freed: bool) -> Model {
    let (fixed_free, fixed_total) = fixed_free_slices(problem, agg);
    let mut b = Builder::with_variables(problem, agg, count_freed);
    b.placement_rows();
    b.gang_rows();
    b.capacity_rows(&fixed_free);
    let changed = b.changed_terms();
    b.change_limits(&changed);
    b.whole_floor_row();
    let headroom = b.headroom_rows(&fixed_total);
    let spread = b.gang_spread();
    let mut levels = b.levels(&changed, headroom);
    if !spread.is_empty() {
        let range = spread.len() as f64;
        levels.push(Level { name: "gang spread", coefs: spread, range });
    }
    Model { lp: b.lp, x: b.x, y: b.y, slice_rows: b.slice_rows, levels }
}

/// Per group and profile key, free slices on GPUs that have nothing to decide (no GPU class
/// holds them); and the same over every group.
fn fixed_free_slices(problem: &Problem, agg: &Aggregate) -> (Vec<Vec<f64>>, Vec<f64>) {
    let keys = problem.profiles.len();
    let mut decided = vec![false; problem.gpus.len()];
    for class in &agg.classes {
        for (g, _) in &class.gpus {
            decided[*g] = true;
        }
    }
    let mut fixed_free = vec![vec![0f64; keys]; agg.groups.len()];
    let mut fixed_total = vec![0f64; keys];
    for (g, gpu) in problem.gpus.iter().enumerate() {
        if decided[g] {
            continue;
        }
        for (i, p) in gpu.current.instances().iter().enumerate() {
            if gpu.users[i] != crate::plan::prepare::User::Free {
                continue;
            }
            if let Some(k) = problem.key_of(g, p) {
                fixed_total[k] += 1.0;
                let group = agg.node_group[gpu.node];
                if group != usize::MAX {
                    fixed_free[group][k] += 1.0;
                }
            }
        }
    }
    (fixed_free, fixed_total)
}

/// A node's free CPU (millicores) and memory (bytes); 0 where not limited (only called for
/// groups whose nodes all limit it).
fn problem_free(problem: &Problem, node: usize) -> (u64, u64) {
    let n = &problem.nodes[node];
    (n.free_cpu.unwrap_or(0), n.free_memory.unwrap_or(0))
}

/// The program as it is built, section by section.
struct Builder<'p> {
    problem: &'p Problem<'p>,
    agg: &'p Aggregate,
    keys: usize,
    lp: Lp,
    /// Per GPU class, per entry: how many of the class's GPUs take that entry.
    x: Vec<Vec<usize>>,
    /// `(demand class, group) -> pods of the class placed in the group`.
    y: BTreeMap<(usize, usize), usize>,
    slice_rows: BTreeMap<(usize, usize), usize>,
    /// Per pending demand class: pods met.
    met: BTreeMap<usize, usize>,
    /// Per demand class: evictable running pods in it.
    running_count: Vec<u32>,
    /// Per group: its GPU classes.
    class_by_group: Vec<Vec<usize>>,
    count_freed: bool,
}

impl<'p> Builder<'p> {
    /// The variables: x (entries per GPU class, summing to the class's size), met, y.
    fn with_variables(problem: &'p Problem<'p>, agg: &'p Aggregate, count_freed: bool) -> Builder<'p> {
        let mut lp = Lp::default();
        let mut x = Vec::with_capacity(agg.classes.len());
        for class in &agg.classes {
            let n = class.gpus.len() as f64;
            let vars: Vec<usize> = class.entries.iter().map(|_| lp.var(0.0, n, true)).collect();
            lp.row(vars.iter().map(|&v| (v, 1.0)).collect(), n, n);
            x.push(vars);
        }
        let mut running_count = vec![0u32; agg.demand.len()];
        for d in agg.running_class.values() {
            running_count[*d] += 1;
        }
        let mut met = BTreeMap::new();
        for (d, class) in agg.demand.iter().enumerate() {
            if !class.running {
                met.insert(d, lp.var(0.0, class.pending as f64, true));
            }
        }
        let mut y = BTreeMap::new();
        for (f, group) in agg.groups.iter().enumerate() {
            for &d in &group.demand {
                let class = &agg.demand[d];
                let ub = if class.running { running_count[d] } else { class.pending } as f64;
                y.insert((d, f), lp.var(0.0, ub, true));
            }
        }
        let mut class_by_group: Vec<Vec<usize>> = vec![Vec::new(); agg.groups.len()];
        for (c, gc) in agg.classes.iter().enumerate() {
            class_by_group[gc.group].push(c);
        }
        let keys = problem.profiles.len();
        let slice_rows = BTreeMap::new(); // Filled by `capacity_rows`.
        Builder { problem, agg, keys, lp, x, y, slice_rows, met, running_count, class_by_group, count_freed }
    }

    /// Every pending pod placed counts as met; every evicted pod must be placed again.
    fn placement_rows(&mut self) {
        let agg = self.agg;
        let mut placed: Vec<Vec<(usize, f64)>> = vec![Vec::new(); agg.demand.len()];
        for (&(d, _), &v) in &self.y {
            placed[d].push((v, 1.0));
        }
        for (c, gc) in agg.classes.iter().enumerate() {
            for (i, e) in gc.entries.iter().enumerate() {
                for &(d, count) in &e.evicted {
                    placed[d].push((self.x[c][i], -(count as f64)));
                }
            }
        }
        for (d, class) in agg.demand.iter().enumerate() {
            let mut row = std::mem::take(&mut placed[d]);
            if !class.running {
                row.push((self.met[&d], -1.0));
            }
            self.lp.row(row, 0.0, 0.0);
        }
    }

    /// All or nothing per gang: a binary `z` per gang that still needs members; its classes meet
    /// at least `need` pods when `z` is 1 and none when it is 0.
    fn gang_rows(&mut self) {
        let agg = self.agg;
        let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (&d, &met) in &self.met {
            if let Some(g) = agg.demand[d].gang {
                members.entry(g).or_default().push(met);
            }
        }
        for (g, mets) in members {
            let z = self.lp.var(0.0, 1.0, true);
            let need = f64::from(self.problem.gangs[g].need);
            let mut at_least: Vec<(usize, f64)> = mets.iter().map(|&m| (m, 1.0)).collect();
            at_least.push((z, -need));
            self.lp.row(at_least, 0.0, f64::INFINITY);
            for &m in &mets {
                let pending = self.lp.vars[m].hi;
                self.lp.row(vec![(m, 1.0), (z, -pending)], f64::NEG_INFINITY, 0.0);
            }
        }
    }

    /// Per gang class and node group, a binary that is 1 where any of the class's pods land
    /// there: the last level keeps their number down, so that a gang's members land on few
    /// nodes when that costs nothing else. Returns the level's terms.
    fn gang_spread(&mut self) -> Vec<(usize, f64)> {
        let agg = self.agg;
        let mut terms = Vec::new();
        let gang_y: Vec<(usize, f64)> = self
            .y
            .iter()
            .filter(|((d, _), _)| agg.demand[*d].gang.is_some() && !agg.demand[*d].running)
            .map(|(_, &v)| (v, self.lp.vars[v].hi))
            .collect();
        for (y, most) in gang_y {
            let used = self.lp.var(0.0, 1.0, true);
            self.lp.row(vec![(y, 1.0), (used, -most)], f64::NEG_INFINITY, 0.0);
            terms.push((used, -1.0));
        }
        terms
    }

    /// Slices per group and profile; CPU and memory per group.
    fn capacity_rows(&mut self, fixed_free: &[Vec<f64>]) {
        let agg = self.agg;
        for (f, group) in agg.groups.iter().enumerate() {
            #[allow(clippy::needless_range_loop)] // k indexes several parallel per-profile arrays
            for k in 0..self.keys {
                let mut row: Vec<(usize, f64)> = Vec::new();
                for &d in &group.demand {
                    if let Some(&(_, need)) = agg.demand[d].needs.slices.iter().find(|s| s.0 == k) {
                        row.push((self.y[&(d, f)], need as f64));
                    }
                }
                if row.is_empty() {
                    continue;
                }
                for &c in &self.class_by_group[f] {
                    for (i, e) in agg.classes[c].entries.iter().enumerate() {
                        if e.free[k] > 0 {
                            row.push((self.x[c][i], -(e.free[k] as f64)));
                        }
                    }
                }
                self.slice_rows.insert((f, k), self.lp.rows.len());
                self.lp.row(row, f64::NEG_INFINITY, fixed_free[f][k]);
            }
            self.resource_rows(f);
        }
    }

    /// CPU and memory of group `f`, where its demand could exceed them. An entry that evicts
    /// pods gives their requests back to the group (they ran on its nodes).
    fn resource_rows(&mut self, f: usize) {
        let agg = self.agg;
        let cpu = |d: usize| agg.demand[d].needs.cpu;
        // Memory in MiB keeps coefficients in a range solvers handle well.
        let mib = |d: usize| agg.demand[d].needs.memory as f64 / 1048576.0;
        let group = &agg.groups[f];
        if let Some(free) = group.cpu.filter(|&c| c < self.demand_of(f, &|d| cpu(d) as f64) as u64) {
            self.pooled_row(f, &|d| cpu(d) as f64, free as f64);
            self.per_node_rows(f, &cpu, &|n| problem_free(self.problem, n).0);
        }
        if let Some(free) = group.memory.filter(|&m| (m as f64 / 1048576.0) < self.demand_of(f, &mib)) {
            self.pooled_row(f, &mib, free as f64 / 1048576.0);
            self.per_node_rows(f, &|d| agg.demand[d].needs.memory, &|n| problem_free(self.problem, n).1);
        }
    }

    /// What every pod of group `f`'s demand (pending and evictable) asks in all.
    fn demand_of(&self, f: usize, per_pod: &dyn Fn(usize) -> f64) -> f64 {
        let agg = self.agg;
        agg.groups[f]
            .demand
            .iter()
            .map(|&d| per_pod(d) * (agg.demand[d].pending + self.running_count[d]) as f64)
            .sum()
    }

    /// Pods placed in group `f` ask at most its free amount plus what its evictions free.
    fn pooled_row(&mut self, f: usize, per_pod: &dyn Fn(usize) -> f64, free: f64) {
        let mut row: Vec<(usize, f64)> =
            self.agg.groups[f].demand.iter().map(|&d| (self.y[&(d, f)], per_pod(d))).collect();
        row.extend(self.freed(f, per_pod).into_iter().map(|(v, a)| (v, -a)));
        self.lp.row(row, f64::NEG_INFINITY, free);
    }

    /// Per entry of group `f`'s GPU classes that evicts pods: what those pods ask in all. None
    /// where not counted: on large pooled groups these terms made HiGHS find worse plans by
    /// the time limit (BENCHMARKS.md), so there the plan's program leaves them out and only
    /// the bound's counts them.
    fn freed(&self, f: usize, per_pod: &dyn Fn(usize) -> f64) -> Vec<(usize, f64)> {
        let mut out = Vec::new();
        if !self.count_freed {
            return out;
        }
        for &c in &self.class_by_group[f] {
            for (i, e) in self.agg.classes[c].entries.iter().enumerate() {
                let amount: f64 = e.evicted.iter().map(|&(d, n)| per_pod(d) * n as f64).sum();
                if amount > 0.0 {
                    out.push((self.x[c][i], amount));
                }
            }
        }
        out
    }

    /// Pooled CPU (or memory) counts a pod's need against the sum over the group's nodes, as if
    /// a pod could take a little from each. For each size `s` a pod of the group asks for, the
    /// pods asking for at least `s` fit at most `free / s` (rounded down) on each node, so at
    /// most the sum of those over the nodes: a row that holds for every plan and closes the
    /// gap pooling leaves where nodes' leftovers are too small for a pod. An entry evicting pods
    /// that ask `a` in all adds at most `a / s` rounded up (however evictions on one node
    /// combine, `floor((free + a1 + a2) / s)` gains at most `ceil(a1 / s) + ceil(a2 / s)`).
    /// Added only where it cuts below what the pooled row allows.
    fn per_node_rows(&mut self, f: usize, need: &dyn Fn(usize) -> u64, free: &dyn Fn(usize) -> u64) {
        let (agg, group) = (self.agg, &self.agg.groups[f]);
        let sizes: std::collections::BTreeSet<u64> =
            group.demand.iter().map(|&d| need(d)).filter(|&s| s > 0).collect();
        let pooled: u64 = group.nodes.iter().map(|&n| free(n)).sum();
        let freed = self.freed(f, &|d| need(d) as f64);
        for s in sizes {
            let fits: u64 = group.nodes.iter().map(|&n| free(n) / s).sum();
            let asking: Vec<usize> = group.demand.iter().copied().filter(|&d| need(d) >= s).collect();
            let pods: u64 =
                asking.iter().map(|&d| (agg.demand[d].pending + self.running_count[d]) as u64).sum();
            if fits * s >= pooled || pods <= fits {
                continue;
            }
            let mut row: Vec<(usize, f64)> = asking.iter().map(|&d| (self.y[&(d, f)], 1.0)).collect();
            row.extend(freed.iter().map(|&(v, a)| (v, -(a / s as f64).ceil())));
            self.lp.row(row, f64::NEG_INFINITY, fits as f64);
        }
    }

    /// One term per entry that changes its GPUs.
    fn changed_terms(&self) -> Vec<(usize, f64)> {
        self.agg
            .classes
            .iter()
            .enumerate()
            .flat_map(|(c, gc)| {
                gc.entries.iter().enumerate().filter(|(_, e)| e.changed).map(move |(i, _)| (c, i))
            })
            .map(|(c, i)| (self.x[c][i], 1.0))
            .collect()
    }

    /// The policy's limits on GPUs and nodes changed.
    fn change_limits(&mut self, changed: &[(usize, f64)]) {
        if let Some(max) = self.problem.max_gpus_changed {
            self.lp.row(changed.to_vec(), f64::NEG_INFINITY, max as f64);
        }
        let Some(max) = self.problem.max_nodes_changed else { return };
        let agg = self.agg;
        let mut z_all = Vec::new();
        for (f, group) in agg.groups.iter().enumerate() {
            let z = self.lp.var(0.0, group.nodes.len() as f64, true);
            z_all.push((z, 1.0));
            for &c in &self.class_by_group[f] {
                let gc = &agg.classes[c];
                let mut row: Vec<(usize, f64)> = gc
                    .entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.changed)
                    .map(|(i, _)| (self.x[c][i], 1.0))
                    .collect();
                row.push((z, -(gc.max_per_node as f64)));
                self.lp.row(row, f64::NEG_INFINITY, 0.0);
            }
        }
        self.lp.row(z_all, f64::NEG_INFINITY, max as f64);
    }

    /// At least the policy's whole GPUs stay whole: entries that are whole, plus whole GPUs
    /// with nothing to decide.
    fn whole_floor_row(&mut self) {
        let floor = self.problem.whole_floor;
        if floor == 0 {
            return;
        }
        let mut decided = vec![false; self.problem.gpus.len()];
        let mut row = Vec::new();
        for (c, gc) in self.agg.classes.iter().enumerate() {
            for (g, _) in &gc.gpus {
                decided[*g] = true;
            }
            for (i, _) in gc.entries.iter().enumerate().filter(|(_, e)| e.whole) {
                row.push((self.x[c][i], 1.0));
            }
        }
        let problem = self.problem;
        let fixed = (0..problem.gpus.len())
            .filter(|&g| !decided[g] && problem.gpus[g].current.is_whole(problem.model_of(g)))
            .count();
        self.lp.row(row, floor as f64 - fixed as f64, f64::INFINITY);
    }

    /// Headroom: spare slices per profile, counted up to the policy's number. Returns the
    /// level's terms.
    fn headroom_rows(&mut self, fixed_total: &[f64]) -> Vec<(usize, f64)> {
        let agg = self.agg;
        let mut headroom = Vec::new();
        #[allow(clippy::needless_range_loop)] // k indexes several parallel per-profile arrays
        for k in 0..self.keys {
            let h = self.problem.headroom[k];
            if h == 0 {
                continue;
            }
            let s = self.lp.var(0.0, h as f64, true);
            headroom.push((s, 1.0));
            let mut row = vec![(s, 1.0)];
            for (c, gc) in agg.classes.iter().enumerate() {
                for (i, e) in gc.entries.iter().enumerate() {
                    if e.free[k] > 0 {
                        row.push((self.x[c][i], -(e.free[k] as f64)));
                    }
                }
            }
            for (&(d, _), &v) in &self.y {
                if let Some(&(_, need)) = agg.demand[d].needs.slices.iter().find(|sl| sl.0 == k) {
                    row.push((v, need as f64));
                }
            }
            self.lp.row(row, f64::NEG_INFINITY, fixed_total[k]);
        }
        headroom
    }

    /// The objective's levels, in the order the stages optimise them.
    fn levels(&self, changed: &[(usize, f64)], headroom: Vec<(usize, f64)>) -> Vec<Level> {
        let agg = self.agg;
        let mut evictions = Vec::new();
        let mut ranges = Vec::new();
        let (mut ev_range, mut fr_range) = (0f64, 0f64);
        for (c, gc) in agg.classes.iter().enumerate() {
            let n = gc.gpus.len() as f64;
            let mut ev_max = 0f64;
            let mut fr_max = 0f64;
            for (i, e) in gc.entries.iter().enumerate() {
                let ev: u32 = e.evicted.iter().map(|(_, c)| c).sum();
                if ev > 0 {
                    evictions.push((self.x[c][i], -(ev as f64)));
                }
                ranges.push((self.x[c][i], e.free_ranges as f64));
                ev_max = ev_max.max(ev as f64);
                fr_max = fr_max.max(e.free_ranges as f64);
            }
            ev_range += n * ev_max;
            fr_range += n * fr_max;
        }
        // Expected pods (weight 0) count in a level of their own, below real demand and evictions.
        let met = &self.met;
        let demand_met: Vec<(usize, f64)> = met
            .iter()
            .filter(|(&d, _)| agg.demand[d].weight > 0)
            .map(|(&d, &v)| (v, agg.demand[d].weight as f64))
            .collect();
        let expected: Vec<(usize, f64)> =
            met.iter().filter(|(&d, _)| agg.demand[d].weight == 0).map(|(_, &v)| (v, 1.0)).collect();
        let expected_range: f64 =
            agg.demand.iter().filter(|d| d.weight == 0 && !d.running).map(|d| d.pending as f64).sum();
        let demand_range: f64 = agg.demand.iter().map(|d| d.weight as f64 * d.pending as f64).sum();
        let headroom_range: f64 = self.problem.headroom.iter().map(|&h| h as f64).sum();
        let changed_neg: Vec<(usize, f64)> = changed.iter().map(|&(v, c)| (v, -c)).collect();
        let changed_range: f64 = agg.classes.iter().map(|c| c.gpus.len() as f64).sum();
        vec![
            Level { name: "demand met", coefs: demand_met, range: demand_range },
            Level { name: "evictions", coefs: evictions, range: ev_range },
            Level { name: "expected demand", coefs: expected, range: expected_range },
            Level { name: "GPUs changed", coefs: changed_neg, range: changed_range },
            Level { name: "headroom", coefs: headroom, range: headroom_range },
            Level { name: "free ranges", coefs: ranges, range: fr_range },
        ]
    }
}
