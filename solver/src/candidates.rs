//! Candidate target geometries per GPU, for the ILP.
//!
//! A GPU's candidates are its current geometry, every maximal geometry that keeps each
//! instance in use where it is, and (only where the policy allows eviction) maximal geometries
//! that drop the instances of evictable pods. Candidates are described by what matters to the
//! objective: free slices per demanded profile, which pods go, whether the GPU changes. Equal
//! descriptions collapse (keeping the larger free ranges), and a candidate is dropped when
//! another has at least as many free slices of every profile at no more cost (subset of the
//! evictions, no change where it changes). Where the node's CPU or memory could bind and
//! evicted pods would give some back, evicting more is not a cost only: there a candidate
//! is dropped only for one with the same evictions.
//!
//! GPUs with the same model, geometry and pattern of use share one candidate list (a "base
//! class"), so enumeration runs once per distinct GPU state, not once per GPU.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::catalog::{GpuModel, ProfileId};
use crate::geometry::{maximal_extensions_until, Geometry, GeometryCache};
use crate::plan::prepare::{Problem, User};

/// Who holds an instance, with evictable pods numbered per GPU (first instance first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Holder {
    Free,
    Pinned,
    Evictable(u8),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct BaseKey {
    pub model: usize,
    pub current: Geometry,
    pub holders: Vec<Holder>,
    /// Evicting its pods gives back CPU or memory that could bind on the node.
    pub frees_resources: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub geometry: Geometry,
    /// Per profile key: instances no kept pod holds.
    pub free: Vec<u16>,
    /// Bit `s`: the GPU's evictable pod number `s` is evicted.
    pub evicts: u32,
    pub changed: bool,
    /// The whole GPU (MIG mode off).
    pub whole: bool,
    /// Sum of squared sizes of the free instances.
    pub free_ranges: u32,
}

/// Base classes and their candidates, plus each GPU's base class and evictable pods by number.
pub(crate) struct Candidates {
    pub classes: Vec<(BaseKey, Vec<Candidate>)>,
    pub class_of_gpu: Vec<usize>,
    /// Per GPU: running pod index of each evictable number.
    pub evictable: Vec<Vec<usize>>,
    /// Models whose geometry search the plan's deadline stopped (their candidates are the
    /// layouts found by then).
    pub cut_short: BTreeSet<String>,
    /// GPUs with more evictable pods than every subset of them can be tried for.
    pub evictions_cut: usize,
}

/// Evicting every subset is exponential; above this many evictable pods on one GPU only
/// "none", "each alone" and "all" are tried, and the plan says so. Seven covers every GPU NVIDIA
/// makes (at most seven compute instances, so seven pods); only a catalog model of more can
/// exceed it.
pub(crate) const ALL_SUBSETS_UP_TO: usize = 7;

pub(crate) fn build(problem: &Problem, cache: &GeometryCache) -> Candidates {
    let mut index: BTreeMap<BaseKey, usize> = BTreeMap::new();
    let mut classes: Vec<(BaseKey, Vec<Candidate>)> = Vec::new();
    let mut class_of_gpu = Vec::with_capacity(problem.gpus.len());
    let mut evictable = Vec::with_capacity(problem.gpus.len());
    let mut cut_short = BTreeSet::new();
    let mut evictions_cut = 0;
    for gpu in &problem.gpus {
        let mut pods: Vec<usize> = Vec::new();
        let holders: Vec<Holder> = gpu
            .users
            .iter()
            .map(|u| match *u {
                User::Free => Holder::Free,
                User::Pinned => Holder::Pinned,
                User::Evictable(r) => {
                    let slot = pods.iter().position(|&x| x == r).unwrap_or_else(|| {
                        pods.push(r);
                        pods.len() - 1
                    });
                    Holder::Evictable(slot as u8)
                }
            })
            .collect();
        let frees_resources = pods.iter().any(|&r| problem.eviction_frees_resources(r));
        let key = BaseKey { model: gpu.model, current: gpu.current.clone(), holders, frees_resources };
        let class = match index.get(&key) {
            Some(&c) => c,
            None => {
                let model = problem.models[gpu.model];
                let search = Search {
                    allowed: &problem.allowed[gpu.model],
                    cache,
                    deadline: problem.deadline,
                    resets_allowed: problem.resets_allowed,
                };
                let (cands, complete) =
                    generate(model, &key, &search, &problem.pid_to_key[gpu.model], problem.profiles.len());
                if !complete {
                    cut_short.insert(model.key.clone());
                }
                index.insert(key.clone(), classes.len());
                classes.push((key, cands));
                classes.len() - 1
            }
        };
        class_of_gpu.push(class);
        if pods.len() > ALL_SUBSETS_UP_TO {
            evictions_cut += 1;
        }
        evictable.push(pods);
    }
    Candidates { classes, class_of_gpu, evictable, cut_short, evictions_cut }
}

fn eviction_sets(pods: u32) -> Vec<u32> {
    if pods == 0 {
        return vec![0];
    }
    if pods as usize <= ALL_SUBSETS_UP_TO {
        return (0..(1u32 << pods)).collect();
    }
    let mut sets = vec![0];
    sets.extend((0..pods).map(|s| 1u32 << s));
    sets.push((1u32 << pods) - 1);
    sets
}

/// How geometries are searched: the profiles a policy allows, the memo, and when to stop.
pub(crate) struct Search<'a> {
    pub allowed: &'a [ProfileId],
    pub cache: &'a GeometryCache,
    pub deadline: Instant,
    /// The policy lets the agent reset a GPU (an Ampere GPU may change mode).
    pub resets_allowed: bool,
}

/// Candidates of one base class, pruned, and whether the geometry search finished in time.
pub(crate) fn generate(
    model: &GpuModel,
    key: &BaseKey,
    search: &Search<'_>,
    pid_to_key: &[Option<usize>],
    keys: usize,
) -> (Vec<Candidate>, bool) {
    let mut complete = true;
    let instances = key.current.instances();
    let pods = key
        .holders
        .iter()
        .filter_map(|h| if let Holder::Evictable(s) = h { Some(*s as u32 + 1) } else { None })
        .max()
        .unwrap_or(0);
    let mut found: BTreeMap<(Vec<u16>, u32, bool), Candidate> = BTreeMap::new();
    for evicts in eviction_sets(pods) {
        let held = |h: &Holder| match *h {
            Holder::Free => false,
            Holder::Pinned => true,
            Holder::Evictable(s) => evicts & (1 << s) == 0,
        };
        let fixed = Geometry::new(
            instances.iter().zip(&key.holders).filter(|(_, h)| held(h)).map(|(p, _)| *p).collect(),
        );
        let found_in_time =
            maximal_extensions_until(model, &fixed, search.allowed, search.cache, Some(search.deadline));
        complete &= found_in_time.complete;
        let mut geometries = found_in_time.geometries;
        geometries.retain(|g| g.reachable_from(&key.current, model, search.resets_allowed));
        if evicts == 0 {
            geometries.push(key.current.clone());
        }
        for geometry in geometries {
            // A pod evicted while its instance stays is kept as a candidate: the instance goes
            // to another pod (one that may only use this node) while the evicted one moves.
            let mut free = vec![0u16; keys];
            for p in geometry.instances().iter().filter(|p| !fixed.contains(p)) {
                if let Some(k) = pid_to_key.get(p.profile).copied().flatten() {
                    free[k] += 1;
                }
            }
            let free_ranges = geometry.instance_ranges(model, |i| !fixed.contains(&geometry.instances()[i]));
            let changed = geometry != key.current;
            let whole = geometry.is_whole(model);
            let candidate = Candidate { geometry, free: free.clone(), evicts, changed, whole, free_ranges };
            match found.get(&(free.clone(), evicts, changed)) {
                Some(best)
                    if (best.free_ranges, std::cmp::Reverse(&best.geometry))
                        >= (free_ranges, std::cmp::Reverse(&candidate.geometry)) => {}
                _ => {
                    found.insert((free, evicts, changed), candidate);
                }
            }
        }
    }
    let all: Vec<Candidate> = found.into_values().collect();
    let dominated = |b: &Candidate| {
        all.iter().any(|a| {
            a != b
                && a.evicts & !b.evicts == 0
                && (a.evicts == b.evicts || !key.frees_resources)
                && a.changed <= b.changed
                && a.free.iter().zip(&b.free).all(|(x, y)| x >= y)
                && (a.evicts != b.evicts || a.changed != b.changed || a.free != b.free)
        })
    };
    let mut kept: Vec<Candidate> = all.iter().filter(|b| !dominated(b)).cloned().collect();
    kept.sort_by(|a, b| {
        (a.changed, a.evicts.count_ones(), a.evicts, std::cmp::Reverse(&a.free), &a.geometry).cmp(&(
            b.changed,
            b.evicts.count_ones(),
            b.evicts,
            std::cmp::Reverse(&b.free),
            &b.geometry,
        ))
    });
    (kept, complete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::geometry::{self, Placed};

    fn a100() -> &'static GpuModel {
        Catalog::builtin().find("A100-40GB").expect("A100-40GB in the built-in catalog")
    }

    /// Candidates with every standard profile allowed and time to finish.
    fn candidates(m: &GpuModel, key: &BaseKey, names: &[&str]) -> Vec<Candidate> {
        let allowed = m.standard_profiles();
        let cache = GeometryCache::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(3600);
        let search = Search { allowed: &allowed, cache: &cache, deadline, resets_allowed: false };
        let (cands, complete) = generate(m, key, &search, &keys(m, names), names.len());
        assert!(complete);
        cands
    }

    fn keys(model: &GpuModel, names: &[&str]) -> Vec<Option<usize>> {
        let mut back = vec![None; model.profiles.len()];
        for (k, n) in names.iter().enumerate() {
            back[model.profile(n).unwrap()] = Some(k);
        }
        back
    }

    #[test]
    fn empty_gpu_offers_the_pareto_front_of_free_slices() {
        let m = a100();
        let key = BaseKey { model: 0, current: Geometry::empty(), holders: vec![], frees_resources: false };
        let names = ["1g.5gb", "3g.20gb"];
        let cands = candidates(m, &key, &names);
        assert_eq!(cands[0].geometry, Geometry::empty(), "current geometry first: it changes nothing");
        assert!(cands.iter().any(|c| c.free == vec![7, 0]), "seven 1g.5gb: {cands:?}");
        assert!(cands.iter().any(|c| c.free == vec![0, 2]), "two 3g.20gb");
        for c in &cands {
            assert!(geometry::validate(m, &c.geometry).is_ok());
            for d in &cands {
                let dominates = d != c
                    && d.changed <= c.changed
                    && d.free.iter().zip(&c.free).all(|(x, y)| x >= y)
                    && d.free != c.free;
                assert!(!dominates, "{:?} dominates {:?}", d.free, c.free);
            }
        }
    }

    #[test]
    fn instances_in_use_stay_unless_evicted() {
        let m = a100();
        let p3 = m.profile("3g.20gb").unwrap();
        let p1 = m.profile("1g.5gb").unwrap();
        let current = Geometry::new(vec![Placed::new(p3, 0), Placed::new(p3, 4)]);
        let names = ["1g.5gb"];
        let pinned = BaseKey {
            model: 0,
            current: current.clone(),
            holders: vec![Holder::Pinned, Holder::Free],
            frees_resources: false,
        };
        let cands = candidates(m, &pinned, &names);
        assert!(cands.iter().all(|c| c.geometry.contains(&Placed::new(p3, 0))));
        assert!(cands
            .iter()
            .any(|c| c.free == vec![3]
                && c.geometry.instances().iter().filter(|p| p.profile == p1).count() == 3));

        let evictable = BaseKey {
            model: 0,
            current,
            holders: vec![Holder::Evictable(0), Holder::Free],
            frees_resources: false,
        };
        let cands = candidates(m, &evictable, &names);
        let best = cands.iter().find(|c| c.evicts == 1).expect("a candidate evicting pod 0");
        assert_eq!(best.free, vec![7]);
        assert!(cands.iter().all(|c| c.evicts == 0 || !c.geometry.contains(&Placed::new(p3, 0))));
    }
}
