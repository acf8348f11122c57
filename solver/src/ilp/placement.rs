//! Exact placement of pods onto nodes, for targets already chosen.
//!
//! The aggregated model pools free slices, CPU and memory over each node group. That is exact
//! for pods of one slice on nodes without CPU or memory limits, and a relaxation otherwise: a
//! pod's two slices may be counted on two nodes, its CPU where another pod's slices are. When
//! placing pods in priority order then falls short of what the model met, this integer program
//! places pod classes on nodes, each node's slices, CPU and memory counted on their own, and
//! its answer tells the assignment which node each pod takes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::geometry::Geometry;
use crate::plan::assign::held_in_target;
use crate::plan::prepare::Problem;

use super::aggregate::Aggregate;
use super::backend::Lp;

/// Pods per `(demand class, node)` that fit together on every node, meeting the most demand,
/// evicted pods all placed; `None` when the solver finds nothing in time.
pub(crate) fn node_quotas(
    problem: &Problem,
    agg: &Aggregate,
    targets: &[Geometry],
    evicted: &BTreeSet<usize>,
    deadline: Instant,
) -> Option<BTreeMap<(usize, usize), u32>> {
    let free = free_slices(problem, targets, evicted);
    let mut wanted = vec![0u32; agg.demand.len()];
    for (d, class) in agg.demand.iter().enumerate() {
        wanted[d] = class.pending;
    }
    for r in evicted {
        if let Some(&d) = agg.running_class.get(r) {
            wanted[d] += 1;
        }
    }
    let mut lp = Lp::default();
    let mut z: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (n, &group) in agg.node_group.iter().enumerate() {
        let Some(group) = agg.groups.get(group) else { continue };
        for &d in &group.demand {
            let needs = &agg.demand[d].needs;
            if wanted[d] > 0 && needs.slices.iter().all(|&(k, c)| free[n][k] >= c) {
                z.insert((d, n), lp.var(0.0, wanted[d] as f64, true));
            }
        }
    }
    let resources = problem.free_after(evicted);
    capacity_rows(agg, &free, &resources, &z, &mut lp);
    // Evicted pods must land again; pending pods up to their number.
    let mut objective = Vec::new();
    let expected_weight = 1.0;
    let demand_weight =
        1.0 + agg.demand.iter().filter(|d| d.weight == 0).map(|d| d.pending as f64).sum::<f64>();
    for (d, class) in agg.demand.iter().enumerate() {
        let row: Vec<(usize, f64)> = z.range((d, 0)..(d + 1, 0)).map(|(_, &v)| (v, 1.0)).collect();
        let evicted_here = wanted[d] - class.pending;
        lp.row(row.clone(), evicted_here as f64, wanted[d] as f64);
        let weight = if class.weight > 0 { class.weight as f64 * demand_weight } else { expected_weight };
        objective.extend(row.into_iter().map(|(v, _)| (v, weight)));
    }
    let solved = lp.maximise(&objective, false, None, None, super::remaining(deadline)).ok()?;
    Some(
        z.into_iter()
            .map(|(key, v)| (key, solved.values[v].round().max(0.0) as u32))
            .filter(|(_, q)| *q > 0)
            .collect(),
    )
}

/// Per node, per profile key: instances of the targets no kept pod holds.
fn free_slices(problem: &Problem, targets: &[Geometry], evicted: &BTreeSet<usize>) -> Vec<Vec<u32>> {
    let mut free = vec![vec![0u32; problem.profiles.len()]; problem.nodes.len()];
    for (g, gpu) in problem.gpus.iter().enumerate() {
        let held = held_in_target(problem, g, &targets[g], evicted);
        for (p, held) in targets[g].instances().iter().zip(held) {
            if let (false, Some(k)) = (held, problem.key_of(g, p)) {
                free[gpu.node][k] += 1;
            }
        }
    }
    free
}

/// Each node's slices per profile, CPU and memory.
fn capacity_rows(
    agg: &Aggregate,
    free: &[Vec<u32>],
    (cpu, memory): &(Vec<Option<u64>>, Vec<Option<u64>>),
    z: &BTreeMap<(usize, usize), usize>,
    lp: &mut Lp,
) {
    let mut per_node: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for (&(d, n), &v) in z {
        per_node.entry(n).or_default().push((d, v));
    }
    for (n, vars) in per_node {
        for (k, &cap) in free[n].iter().enumerate() {
            let row: Vec<(usize, f64)> = vars
                .iter()
                .filter_map(|&(d, v)| {
                    agg.demand[d].needs.slices.iter().find(|s| s.0 == k).map(|&(_, c)| (v, c as f64))
                })
                .collect();
            if !row.is_empty() {
                lp.row(row, f64::NEG_INFINITY, cap as f64);
            }
        }
        if let Some(cpu) = cpu[n] {
            let row = vars.iter().map(|&(d, v)| (v, agg.demand[d].needs.cpu as f64)).collect();
            lp.row(row, f64::NEG_INFINITY, cpu as f64);
        }
        if let Some(memory) = memory[n] {
            // In MiB, as the aggregated model, so coefficients stay in a range solvers handle.
            let row = vars.iter().map(|&(d, v)| (v, agg.demand[d].needs.memory as f64 / 1048576.0)).collect();
            lp.row(row, f64::NEG_INFINITY, memory as f64 / 1048576.0);
        }
    }
}
