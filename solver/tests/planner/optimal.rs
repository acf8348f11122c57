//! The planner against an exact optimiser written independently of it: brute force over every
//! valid geometry of every GPU and every placement of every pod, on small random clusters
//! (1-3 nodes of A100-40GB or H100-80GB GPUs, 1-2 each, instances held by running pods,
//! priorities, free CPU and memory per node that pods' requests may exceed, with and without
//! eviction; an evicted pod gives its CPU and memory back to its node). On every case the plan's demand met equals the optimum, and it evicts no more
//! pods than the optimum needs for that demand.
//!
//! Shares nothing with the planner but the snapshot types, the catalog's profile tables and
//! `geometry::validate` (the hardware's placement rules). Cases: `GEOMETER_OPTIMAL_CASES` (default 300; the benchmark
//! job runs thousands).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet, HashMap};

use geometer_solver::catalog::{Catalog, GpuModel, ProfileId};
use geometer_solver::geometry::{self, Geometry, Placed};
use geometer_solver::plan::PlanOptions;
use geometer_solver::snapshot::{Gpu, Instance, Node, Pod, Policy, Snapshot};
use geometer_solver::PodKey;
use proptest::prelude::*;
use proptest::test_runner::Config;

use crate::support;

/// The GPU models of the generated clusters.
const MODELS: [&str; 2] = ["A100-40GB", "H100-80GB"];
/// The profiles pods ask for; each model has some of them (1g.10gb both).
const PROFILES: [&str; 8] =
    ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb", "1g.10gb", "1g.20gb", "3g.40gb", "7g.80gb"];

fn model(m: usize) -> &'static GpuModel {
    Catalog::builtin().find(MODELS[m]).unwrap()
}

/// Indices into `PROFILES` of the profiles model `m` has.
fn profiles_of(m: usize) -> impl Iterator<Item = usize> {
    (0..PROFILES.len()).filter(move |&k| model(m).profile(PROFILES[k]).is_some())
}

fn pid(m: usize, name: &str) -> ProfileId {
    model(m).profile(name).unwrap()
}

fn model_index(name: &str) -> usize {
    MODELS.iter().position(|n| *n == name).unwrap()
}

// ---- The exact optimiser -------------------------------------------------------------------

/// Free slices per demanded profile (indexed like `PROFILES`).
type Free = [u8; 8];

/// Per model and instances kept: the GPU's offers.
type Memo = HashMap<(usize, Vec<Placed>), Vec<Free>>;

/// The free-slice vectors a GPU of model `m` can offer, keeping `kept` in place: every valid
/// geometry that adds demanded profiles to it, reduced to the vectors no other one beats in
/// every profile.
fn gpu_offers(m: usize, kept: &[Placed], memo: &mut Memo) -> Vec<Free> {
    if let Some(hit) = memo.get(&(m, kept.to_vec())) {
        return hit.clone();
    }
    let choices: Vec<(usize, Placed)> = profiles_of(m)
        .flat_map(|k| {
            let id = pid(m, PROFILES[k]);
            model(m).profile_info(id).starts.iter().map(move |&s| (k, Placed::new(id, s)))
        })
        .collect();
    let mut found = Vec::new();
    let mut chosen: Vec<Placed> = kept.to_vec();
    let mut free = [0u8; 8];
    extend(m, &choices, 0, &mut chosen, &mut free, &mut found);
    let front = pareto(found);
    memo.insert((m, kept.to_vec()), front.clone());
    front
}

/// Every valid superset of `chosen` from `choices[from..]` (validity is monotone: a geometry
/// whose part is invalid is invalid).
fn extend(
    m: usize,
    choices: &[(usize, Placed)],
    from: usize,
    chosen: &mut Vec<Placed>,
    free: &mut Free,
    out: &mut Vec<Free>,
) {
    out.push(*free);
    for (i, &(k, p)) in choices.iter().enumerate().skip(from) {
        chosen.push(p);
        if geometry::validate(model(m), &Geometry::new(chosen.clone())).is_ok() {
            free[k] += 1;
            extend(m, choices, i + 1, chosen, free, out);
            free[k] -= 1;
        }
        chosen.pop();
    }
}

fn covers(a: &Free, b: &Free) -> bool {
    a.iter().zip(b).all(|(x, y)| x >= y)
}

fn pareto(mut all: Vec<Free>) -> Vec<Free> {
    all.sort_unstable();
    all.dedup();
    let keep: Vec<Free> =
        all.iter().filter(|b| !all.iter().any(|a| a != *b && covers(a, b))).copied().collect();
    keep
}

/// What a node can offer: sums of one offer per GPU.
fn node_offers(gpus: &[Vec<Free>]) -> Vec<Free> {
    let mut sums = vec![[0u8; 8]];
    for offers in gpus {
        let mut next = Vec::new();
        for s in &sums {
            for o in offers {
                next.push(std::array::from_fn(|k| s[k] + o[k]));
            }
        }
        sums = pareto(next);
    }
    sums
}

/// A pod to place: its slices per profile, CPU and memory, the nodes it may use, its weight
/// (0: an evicted pod, which must be placed again).
struct Want {
    need: Free,
    resources: [u64; 2],
    nodes: Vec<usize>,
    weight: u64,
}

/// What a node offers: its slice vectors, and its free CPU and memory.
struct Offer {
    slices: Vec<Free>,
    resources: [u64; 2],
}

/// What the pods placed so far take from a node.
#[derive(Clone, Copy)]
struct Load {
    slices: Free,
    resources: [u64; 2],
}

/// The best demand met placing `wants[i..]`, given what each node still has to cover.
fn best_placement(wants: &[Want], i: usize, load: &mut Vec<Load>, offers: &[Offer]) -> Option<u64> {
    let Some(want) = wants.get(i) else { return Some(0) };
    let mut best = None;
    for &n in &want.nodes {
        let before = load[n];
        load[n] = Load {
            slices: std::array::from_fn(|k| before.slices[k] + want.need[k]),
            resources: std::array::from_fn(|r| before.resources[r] + want.resources[r]),
        };
        let fits = load[n].resources.iter().zip(offers[n].resources).all(|(l, o)| *l <= o);
        if fits && offers[n].slices.iter().any(|o| covers(o, &load[n].slices)) {
            if let Some(rest) = best_placement(wants, i + 1, load, offers) {
                best = best.max(Some(rest + want.weight));
            }
        }
        load[n] = before;
    }
    if want.weight > 0 {
        best = best.max(best_placement(wants, i + 1, load, offers));
    }
    best
}

/// (demand met, fewest evictions for it) over every eviction set, geometry and placement.
fn optimum(snapshot: &Snapshot) -> (u64, u32) {
    let weights = priority_weights(snapshot);
    let evict = snapshot.policy.as_ref().is_some_and(|p| p.eviction_allowed);
    let evictable: Vec<&Pod> = snapshot.running.iter().filter(|p| evict && !p.do_not_disrupt).collect();
    let mut memo = HashMap::new();
    let mut best = (0u64, 0u32);
    for set in 0u32..(1 << evictable.len()) {
        let evicted: BTreeSet<PodKey> =
            evictable.iter().enumerate().filter(|(i, _)| set & (1 << i) != 0).map(|(_, p)| p.key()).collect();
        let offers: Vec<Offer> = snapshot
            .nodes
            .iter()
            .map(|node| {
                let gpus: Vec<Vec<Free>> = node
                    .gpus
                    .iter()
                    .map(|gpu| gpu_offers(model_index(&gpu.model), &kept(gpu, &evicted), &mut memo))
                    .collect();
                Offer { slices: node_offers(&gpus), resources: free_resources(snapshot, node, &evicted) }
            })
            .collect();
        let mut wants: Vec<Want> =
            evictable.iter().filter(|p| evicted.contains(&p.key())).map(|p| want(snapshot, p, 0)).collect();
        wants.extend(snapshot.pending.iter().map(|p| want(snapshot, p, weights[&p.priority])));
        let mut load = vec![Load { slices: [0; 8], resources: [0; 2] }; snapshot.nodes.len()];
        if let Some(met) = best_placement(&wants, 0, &mut load, &offers) {
            let candidate = (met, set.count_ones());
            if met > best.0 || (met == best.0 && candidate.1 < best.1) {
                best = candidate;
            }
        }
    }
    best
}

/// Instances that stay: those of running pods not evicted.
fn kept(gpu: &Gpu, evicted: &BTreeSet<PodKey>) -> Vec<Placed> {
    let m = model_index(&gpu.model);
    gpu.instances
        .iter()
        .filter(|i| i.pod.as_ref().is_some_and(|p| !evicted.contains(p)))
        .map(|i| Placed::new(pid(m, &i.profile), i.start))
        .collect()
}

/// A node's free CPU and memory (unlimited where the snapshot gives none), with what its
/// evicted pods requested given back.
fn free_resources(snapshot: &Snapshot, node: &Node, evicted: &BTreeSet<PodKey>) -> [u64; 2] {
    let given_back = |of: &dyn Fn(&Pod) -> u64| -> u64 {
        let on_node = |p: &&Pod| p.node.as_deref() == Some(&node.name) && evicted.contains(&p.key());
        snapshot.running.iter().filter(on_node).map(of).sum()
    };
    [
        node.free_cpu_millis.map_or(u64::MAX, |c| c + given_back(&|p| p.cpu_millis)),
        node.free_memory_bytes.map_or(u64::MAX, |m| m + given_back(&|p| p.memory_bytes)),
    ]
}

fn want(snapshot: &Snapshot, pod: &Pod, weight: u64) -> Want {
    let mut need = [0u8; 8];
    for (name, &count) in &pod.requests {
        need[PROFILES.iter().position(|p| p == name).unwrap()] += count as u8;
    }
    let nodes = (0..snapshot.nodes.len())
        .filter(|&n| pod.node_selector.iter().all(|(k, v)| snapshot.nodes[n].labels.get(k) == Some(v)))
        .collect();
    Want { need, resources: [pod.cpu_millis, pod.memory_bytes], nodes, weight }
}

/// Each pending priority's weight: 1 + its rank among the distinct priorities (so a pod of a
/// higher priority outweighs one of a lower one; the planner's documented objective).
fn priority_weights(snapshot: &Snapshot) -> BTreeMap<i32, u64> {
    let priorities: BTreeSet<i32> = snapshot.pending.iter().map(|p| p.priority).collect();
    priorities.into_iter().enumerate().map(|(rank, p)| (p, 1 + rank as u64)).collect()
}

// ---- Random small clusters -----------------------------------------------------------------

/// A random valid geometry of model `m`: placements (profile of the model, start) tried in a
/// random order, each kept when it stays valid.
fn random_geometry(m: usize, order: &[(usize, u8)], take: &[bool]) -> Vec<Placed> {
    let mut placed = Vec::new();
    let profiles: Vec<usize> = profiles_of(m).collect();
    for (&(k, s), &yes) in order.iter().zip(take) {
        let p = Placed::new(pid(m, PROFILES[profiles[k % profiles.len()]]), s);
        if !yes || !model(m).profile_info(p.profile).starts.contains(&s) {
            continue;
        }
        placed.push(p);
        if geometry::validate(model(m), &Geometry::new(placed.clone())).is_err() {
            placed.pop();
        }
    }
    placed
}

fn gpu_strategy() -> impl Strategy<Value = (Vec<(usize, u8)>, Vec<bool>, Vec<u8>)> {
    (
        prop::collection::vec((0usize..5, 0u8..7), 6),
        prop::collection::vec(any::<bool>(), 6),
        prop::collection::vec(0u8..4, 6),
    )
}

/// CPU in cores and memory in GiB: 0 is none asked (a pod) or not limited (a node).
fn resources() -> impl Strategy<Value = (u64, u64)> {
    (0u64..3, 0u64..3)
}

const GIB: u64 = 1 << 30;

fn cluster() -> impl Strategy<Value = Snapshot> {
    let node =
        (prop::collection::vec(gpu_strategy(), 1..3), 0u8..2, 0..MODELS.len(), resources(), resources());
    let nodes = prop::collection::vec(node, 1..4);
    let pods = prop::collection::vec((0..PROFILES.len(), 1u32..3, 0i32..2, 0u8..3, resources()), 0..5);
    (nodes, pods, any::<bool>()).prop_map(|(nodes, pods, evict)| {
        let mut snapshot = Snapshot::default();
        for (n, (gpus, zone, m, (cpu, memory), (pod_cpu, pod_memory))) in nodes.into_iter().enumerate() {
            let name = format!("node-{n}");
            let mut node = Node {
                name: name.clone(),
                free_cpu_millis: (cpu > 0).then_some(cpu * 1000),
                free_memory_bytes: (memory > 0).then_some(memory * GIB),
                ..Node::default()
            };
            node.labels.insert("zone".into(), format!("z{zone}"));
            for (g, (order, take, users)) in gpus.into_iter().enumerate() {
                let mut instances = Vec::new();
                for (i, p) in random_geometry(m, &order, &take).into_iter().enumerate() {
                    let profile = model(m).profile_info(p.profile).name.clone();
                    // 0-1: free; 2: a running pod that may be evicted; 3: one that may not.
                    let pod = (users[i % users.len()] >= 2).then(|| {
                        let pod_name = format!("run-{n}-{g}-{i}");
                        snapshot.running.push(Pod {
                            namespace: "batch".into(),
                            name: pod_name.clone(),
                            requests: BTreeMap::from([(profile.clone(), 1)]),
                            node: Some(name.clone()),
                            cpu_millis: pod_cpu * 1000,
                            memory_bytes: pod_memory * GIB,
                            do_not_disrupt: users[i % users.len()] == 3,
                            ..Pod::default()
                        });
                        PodKey::new("batch", &pod_name)
                    });
                    instances.push(Instance { profile, start: p.start, pod });
                }
                node.gpus.push(Gpu { index: g as u32, model: MODELS[m].into(), instances });
            }
            snapshot.nodes.push(node);
        }
        for (i, (profile, count, priority, zone, (cpu, memory))) in pods.into_iter().enumerate() {
            let mut pod = support::pending_pod(i, PROFILES[profile], count, priority, zone);
            (pod.cpu_millis, pod.memory_bytes) = (cpu * 1000, memory * GIB);
            snapshot.pending.push(pod);
        }
        snapshot.policy = Some(Policy { eviction_allowed: evict, ..Policy::default() });
        snapshot
    })
}

fn cases() -> u32 {
    std::env::var("GEOMETER_OPTIMAL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

proptest! {
    #![proptest_config(Config {
        cases: cases(),
        failure_persistence: support::regressions("tests/planner/optimal.proptest-regressions"),
        ..Config::default()
    })]

    #[test]
    fn the_plan_meets_the_optimal_demand_with_no_more_evictions_than_it_needs(snapshot in cluster()) {
        let (demand, evictions) = optimum(&snapshot);
        let plan = geometer_solver::plan(&snapshot, Catalog::builtin(), &PlanOptions::default()).unwrap();
        let yaml = serde_saphyr::to_string(&snapshot).unwrap();
        prop_assert_eq!(plan.objective.demand_met, demand, "demand met below the optimum\n{}\n{}", yaml, plan.render_table());
        prop_assert!(
            plan.evictions.len() as u32 <= evictions,
            "{} evictions where {} meet the same demand\n{}\n{}", plan.evictions.len(), evictions, yaml, plan.render_table()
        );
        prop_assert!(plan.bound + 1e-6 >= demand as f64, "bound {} below the optimum {}", plan.bound, demand);
    }
}

/// The optimiser itself, on cases worked out by hand.
#[test]
fn the_exact_optimiser_finds_what_a_person_would() {
    // One empty A100-40GB, three pods of 3g.20gb: two fit (3g at 0 and at 4).
    let snapshot: Snapshot = serde_saphyr::from_str(
        "nodes:\n- name: a\n  gpus: [{index: 0, model: A100-40GB}]\npending:\n- {namespace: ml, name: x, requests: {3g.20gb: 1}}\n- {namespace: ml, name: y, requests: {3g.20gb: 1}}\n- {namespace: ml, name: z, requests: {3g.20gb: 1}}\n",
    )
    .unwrap();
    assert_eq!(optimum(&snapshot), (2, 0));
    // A running 1g.5gb pod in the middle blocks the 7g.40gb unless it may be evicted and moved
    // to the second GPU.
    let blocked = "nodes:\n- name: a\n  gpus:\n  - {index: 0, model: A100-40GB, instances: [{profile: 1g.5gb, start: 3, pod: batch/r}]}\n  - {index: 1, model: A100-40GB, instances: [{profile: 3g.20gb, start: 0, pod: batch/s}]}\nrunning:\n- {namespace: batch, name: r, node: a, requests: {1g.5gb: 1}}\n- {namespace: batch, name: s, node: a, requests: {3g.20gb: 1}, doNotDisrupt: true}\npending:\n- {namespace: ml, name: big, requests: {7g.40gb: 1}}\n";
    let mut snapshot: Snapshot = serde_saphyr::from_str(blocked).unwrap();
    assert_eq!(optimum(&snapshot), (0, 0));
    snapshot.policy = Some(Policy { eviction_allowed: true, ..Policy::default() });
    assert_eq!(optimum(&snapshot), (1, 1));
}
