//! Aggregation: the ILP sees classes, not GPUs and pods.
//!
//! - Demand classes: pods with the same needs, eligible nodes and weight (evictable running
//!   pods form classes of their own: they must land again but count as no new demand).
//! - Node groups: nodes eligible for the same set of demand classes. Within a group, which node
//!   a pod lands on does not matter to the model; disaggregation picks nodes afterwards.
//! - GPU classes: GPUs of one group whose candidate lists look the same to the objective (free
//!   slices per profile, evicted pod classes, change, free ranges), however their geometries
//!   differ. One integer variable per class and candidate counts how many of its GPUs take it.
//!
//! So the model grows with distinct classes, not with GPUs or pods.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::candidates::Candidates;
use crate::plan::prepare::{Needs, Problem};

pub(crate) struct DemandClass {
    pub needs: Needs,
    pub weight: u64,
    /// Pending pods in the class (0 for evictable running pods).
    pub pending: u32,
    pub running: bool,
    /// The gang ([`Problem::gangs`]) of its pods: a gang's members are classes of their own.
    pub gang: Option<usize>,
}

pub(crate) struct Group {
    pub nodes: Vec<usize>,
    /// Demand classes eligible on every node of the group.
    pub demand: Vec<usize>,
    /// Total free CPU/memory of the group's nodes; `None` when some node does not limit it.
    pub cpu: Option<u64>,
    pub memory: Option<u64>,
}

/// What a candidate means to the objective.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub changed: bool,
    /// The whole GPU (MIG mode off).
    pub whole: bool,
    /// `(demand class, pods)` evicted.
    pub evicted: Vec<(usize, u32)>,
    pub free: Vec<u16>,
    pub free_ranges: u32,
}

pub(crate) struct GpuClass {
    pub group: usize,
    pub entries: Arc<Vec<Entry>>,
    /// Members, and for each its candidate index per entry.
    pub gpus: Vec<(usize, Arc<Vec<usize>>)>,
    /// Most GPUs of this class on one node (for the node-change limit).
    pub max_per_node: u32,
}

pub(crate) struct Aggregate {
    pub demand: Vec<DemandClass>,
    /// Per pending pod; `usize::MAX` where not plannable.
    pub pending_class: Vec<usize>,
    pub running_class: BTreeMap<usize, usize>,
    pub groups: Vec<Group>,
    /// Per node; `usize::MAX` where no demand may land.
    pub node_group: Vec<usize>,
    pub classes: Vec<GpuClass>,
    /// Nodes where pods of several slices may land that were left pooled (too many to give
    /// each its own group): the plan may then miss the optimum, and says so.
    pub pooled_multi_slice: Option<usize>,
    /// Nodes whose CPU or memory may run out that were left pooled (likewise).
    pub pooled_resources: Option<usize>,
}

pub(crate) fn aggregate(problem: &Problem, candidates: &Candidates) -> Aggregate {
    // Demand classes, numbered in pod order (deterministic).
    let mut demand: Vec<DemandClass> = Vec::new();
    let mut demand_eligible: Vec<Arc<[usize]>> = Vec::new();
    // Pods with the same constraints share one eligibility list (see prepare), so the list's
    // address identifies it; ids are handed out in pod order, so they do not depend on it.
    let mut lists: BTreeMap<usize, usize> = BTreeMap::new();
    #[allow(clippy::type_complexity)] // (needs, weight, running, eligibility list, gang)
    let mut index: BTreeMap<(Needs, u64, bool, usize, Option<usize>), usize> = BTreeMap::new();
    let mut class_for =
        |needs: &Needs, weight: u64, running: bool, eligible: &Arc<[usize]>, gang: Option<usize>| -> usize {
            let next = lists.len();
            let list = *lists.entry(eligible.as_ptr() as usize).or_insert(next);
            let key = (needs.clone(), weight, running, list, gang);
            *index.entry(key).or_insert_with(|| {
                demand.push(DemandClass { needs: needs.clone(), weight, pending: 0, running, gang });
                demand_eligible.push(eligible.clone());
                demand.len() - 1
            })
        };
    let mut pending_class = vec![usize::MAX; problem.pending.len()];
    let mut pending_counts: BTreeMap<usize, u32> = BTreeMap::new();
    for (i, p) in problem.plannable() {
        let d = class_for(&p.needs, p.weight, false, &p.eligible, p.gang);
        pending_class[i] = d;
        *pending_counts.entry(d).or_default() += 1;
    }
    let mut running_class = BTreeMap::new();
    for (r, pod) in problem.running.iter().enumerate() {
        running_class.insert(r, class_for(&pod.needs, 0, true, &pod.eligible, None));
    }
    for (d, count) in pending_counts {
        demand[d].pending = count;
    }

    // Node groups by the set of demand classes eligible there.
    let mut per_node: Vec<Vec<usize>> = vec![Vec::new(); problem.nodes.len()];
    for (d, eligible) in demand_eligible.iter().enumerate() {
        for &n in eligible.iter() {
            per_node[n].push(d);
        }
    }
    let split = Split::new(problem, &demand, &per_node);
    let mut groups: Vec<Group> = Vec::new();
    // Nodes that limit CPU (or memory) never share a group with nodes that do not: the group's
    // pooled amount would be unlimited, and the limit lost.
    #[allow(clippy::type_complexity)] // (demand classes, node on its own, limits CPU, limits memory)
    let mut group_index: BTreeMap<(Vec<usize>, Option<usize>, bool, bool), usize> = BTreeMap::new();
    let mut node_group = vec![usize::MAX; problem.nodes.len()];
    for (n, sig) in per_node.into_iter().enumerate() {
        if sig.is_empty() {
            continue;
        }
        let node = &problem.nodes[n];
        let alone = split.alone.contains(&n).then_some(n);
        let key = (sig.clone(), alone, node.free_cpu.is_some(), node.free_memory.is_some());
        let g = *group_index.entry(key).or_insert_with(|| {
            groups.push(Group { nodes: Vec::new(), demand: sig, cpu: Some(0), memory: Some(0) });
            groups.len() - 1
        });
        let group = &mut groups[g];
        group.nodes.push(n);
        group.cpu = group.cpu.zip(node.free_cpu).map(|(a, b)| a + b);
        group.memory = group.memory.zip(node.free_memory).map(|(a, b)| a + b);
        node_group[n] = g;
    }

    // GPU classes: entries per (base class, evicted pod classes), then merged by description.
    #[allow(clippy::type_complexity)] // (base class, evicted classes) -> (entries, evicted)
    let mut described: BTreeMap<(usize, Vec<usize>), (Arc<Vec<Entry>>, Arc<Vec<usize>>)> = BTreeMap::new();
    let mut class_index: BTreeMap<(usize, Arc<Vec<Entry>>), usize> = BTreeMap::new();
    let mut classes: Vec<GpuClass> = Vec::new();
    for (g, gpu) in problem.gpus.iter().enumerate() {
        let group = node_group[gpu.node];
        if group == usize::MAX {
            continue;
        }
        let base = candidates.class_of_gpu[g];
        let shapes: Vec<usize> = candidates.evictable[g].iter().map(|r| running_class[r]).collect();
        let (entries, order) = described
            .entry((base, shapes.clone()))
            .or_insert_with(|| describe(&candidates.classes[base].1, &shapes))
            .clone();
        if entries.len() < 2 {
            continue; // Only its current geometry: nothing to decide.
        }
        let c = *class_index.entry((group, entries.clone())).or_insert_with(|| {
            classes.push(GpuClass { group, entries, gpus: Vec::new(), max_per_node: 0 });
            classes.len() - 1
        });
        classes[c].gpus.push((g, order));
    }
    for class in &mut classes {
        let mut per_node: BTreeMap<usize, u32> = BTreeMap::new();
        for (g, _) in &class.gpus {
            *per_node.entry(problem.gpus[*g].node).or_default() += 1;
        }
        class.max_per_node = per_node.values().copied().max().unwrap_or(0);
    }
    Aggregate {
        demand,
        pending_class,
        running_class,
        groups,
        node_group,
        classes,
        pooled_multi_slice: split.pooled_multi_slice,
        pooled_resources: split.pooled_resources,
    }
}

/// Most nodes given a group of their own (see [`Split`]): each adds its GPU classes to the
/// model.
const MAX_NODES_ON_THEIR_OWN: usize = 256;

/// Most nodes given a group of their own because their CPU or memory may run out. Lower: such
/// nodes are often most of a busy cluster, and on the 1,000-GPU benchmark clusters (125 such
/// nodes) modelling each alone took 4-7 s where pooling with per-node rounding rows takes
/// under 1 s at a gap under 1% (BENCHMARKS.md).
const MAX_RESOURCE_NODES_ON_THEIR_OWN: usize = 32;

/// Nodes that form a group of their own, so that the model holds exactly what one node can.
/// Pooling over a group counts a pod's slices (or its CPU and memory) as if they could come
/// from several nodes: first the nodes where a pod of several slices may land, then those
/// whose CPU or memory may run out (up to [`MAX_RESOURCE_NODES_ON_THEIR_OWN`] of them), up to
/// [`MAX_NODES_ON_THEIR_OWN`] in all. Those beyond stay
/// pooled (their number is kept) and the plan says so; the bound stays honest either way,
/// pooling only loosens it.
struct Split {
    alone: BTreeSet<usize>,
    pooled_multi_slice: Option<usize>,
    pooled_resources: Option<usize>,
}

impl Split {
    fn new(problem: &Problem, demand: &[DemandClass], per_node: &[Vec<usize>]) -> Split {
        let several = |d: &usize| demand[*d].needs.slices.iter().map(|s| s.1).sum::<u32>() > 1;
        let multi: BTreeSet<usize> =
            per_node.iter().enumerate().filter(|(_, sig)| sig.iter().any(several)).map(|(n, _)| n).collect();
        let bound: BTreeSet<usize> = per_node
            .iter()
            .enumerate()
            .filter(|&(n, sig)| !sig.is_empty() && problem.pressed[n])
            .map(|(n, _)| n)
            .collect();
        let mut alone = BTreeSet::new();
        let take = |set: BTreeSet<usize>, alone: &mut BTreeSet<usize>, most: usize| -> Option<usize> {
            let new: Vec<usize> = set.difference(alone).copied().collect();
            if new.len() > most || alone.len() + new.len() > MAX_NODES_ON_THEIR_OWN {
                return Some(set.len());
            }
            alone.extend(new);
            None
        };
        let pooled_multi_slice = take(multi, &mut alone, MAX_NODES_ON_THEIR_OWN);
        let pooled_resources = take(bound, &mut alone, MAX_RESOURCE_NODES_ON_THEIR_OWN);
        // Nodes a gang's members may land on, so that the model can count the nodes a gang
        // spreads over (its last level); where there are too many, they stay pooled and the
        // gang is only kept to few node groups.
        let gang: BTreeSet<usize> = per_node
            .iter()
            .enumerate()
            .filter(|(_, sig)| sig.iter().any(|d| demand[*d].gang.is_some()))
            .map(|(n, _)| n)
            .collect();
        let _ = take(gang, &mut alone, MAX_NODES_ON_THEIR_OWN);
        Split { alone, pooled_multi_slice, pooled_resources }
    }
}

/// Entries sorted into a canonical order, each once, and the candidate index behind each.
fn describe(cands: &[crate::candidates::Candidate], shapes: &[usize]) -> (Arc<Vec<Entry>>, Arc<Vec<usize>>) {
    let mut tagged: Vec<(Entry, usize)> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut evicted: BTreeMap<usize, u32> = BTreeMap::new();
            for (s, &d) in shapes.iter().enumerate() {
                if c.evicts & (1 << s) != 0 {
                    *evicted.entry(d).or_default() += 1;
                }
            }
            let entry = Entry {
                changed: c.changed,
                whole: c.whole,
                evicted: evicted.into_iter().collect(),
                free: c.free.clone(),
                free_ranges: c.free_ranges,
            };
            (entry, i)
        })
        .collect();
    tagged.sort();
    // Candidates that differ only in which pods of one demand class they evict (pod 1 or pod 2
    // of the same template) are the same to the model: one column each, not one per choice.
    tagged.dedup_by(|later, first| later.0 == first.0);
    let order = tagged.iter().map(|t| t.1).collect();
    let entries = tagged.into_iter().map(|t| t.0).collect();
    (Arc::new(entries), Arc::new(order))
}
