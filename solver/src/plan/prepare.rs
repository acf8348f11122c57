//! Snapshot -> [`Problem`]: names resolved to ids, pods sorted and weighted, eligibility
//! computed, pods that already fit on existing free slices set aside (their slices reserved),
//! and pods that cannot be planned at all given their reason. Both planners start from here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::{Catalog, GpuModel, ProfileId};
use crate::geometry::{Geometry, Placed};
use crate::snapshot::{eligibility, Node, NodeSelectorTerm, Pod, Snapshot, Toleration};

use super::{PlanError, PlanOptions, UnmetReason};

const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(10);

/// Who holds an instance now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum User {
    Free,
    /// Must stay: a pod that may not be evicted, or a pending pod expected on this free slice.
    Pinned,
    /// A running pod the policy lets us evict (index into `Problem::running`).
    Evictable(usize),
}

#[derive(Clone)]
pub(crate) struct GpuInfo {
    pub node: usize,
    pub index: u32,
    pub model: usize,
    pub current: Geometry,
    /// Aligned with `current.instances()`.
    pub users: Vec<User>,
}

#[derive(Clone)]
pub(crate) struct NodeInfo<'a> {
    pub name: &'a str,
    pub gpus: Vec<usize>,
    /// After pods expected on existing slices; `None`: not limiting.
    pub free_cpu: Option<u64>,
    pub free_memory: Option<u64>,
}

/// What a pod needs, in problem ids.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Needs {
    /// `(profile key, count)`, sorted by key.
    pub slices: Vec<(usize, u32)>,
    pub cpu: u64,
    pub memory: u64,
}

#[derive(Clone)]
pub(crate) enum PodStatus {
    /// For the planners.
    Plannable,
    /// Fits on existing free slices of this node (reserved).
    Existing(usize),
    Unmet(UnmetReason),
}

#[derive(Clone)]
pub(crate) struct PendingInfo<'a> {
    pub pod: &'a Pod,
    pub key: String,
    /// 1 + rank of the pod's priority among the pending pods' distinct priorities; 0 for an
    /// expected pod ([`Snapshot::expected`]), which counts in no demand met.
    pub weight: u64,
    pub needs: Needs,
    /// Nodes that pass the pod's constraints and have GPUs that may offer each profile
    /// (shared between pods with the same constraints).
    pub eligible: Arc<[usize]>,
    pub status: PodStatus,
}

#[derive(Clone)]
pub(crate) struct RunningInfo {
    pub key: String,
    pub node: usize,
    pub gpu: usize,
    /// From the instances it holds.
    pub needs: Needs,
    pub eligible: Arc<[usize]>,
}

#[derive(Clone)]
pub(crate) struct Problem<'a> {
    pub models: Vec<&'a GpuModel>,
    /// Canonical names of every profile that demand, headroom or an evictable pod refers to.
    pub profiles: Vec<String>,
    /// Per model: profile key -> the model's profile id, if it has it.
    pub key_to_pid: Vec<Vec<Option<ProfileId>>>,
    /// Per model: profile id -> profile key.
    pub pid_to_key: Vec<Vec<Option<usize>>>,
    /// Per model: profiles the planner may create.
    pub allowed: Vec<Vec<ProfileId>>,
    /// Per profile key.
    pub headroom: Vec<u32>,
    pub nodes: Vec<NodeInfo<'a>>,
    pub gpus: Vec<GpuInfo>,
    /// Sorted by descending priority, then `namespace/name`.
    pub pending: Vec<PendingInfo<'a>>,
    /// Only the evictable ones.
    pub running: Vec<RunningInfo>,
    pub max_gpus_changed: Option<u32>,
    pub max_nodes_changed: Option<u32>,
    pub time_limit: Duration,
    pub placements_inferred: bool,
    pub notes: Vec<String>,
    /// Per node, per profile key: free instances not yet reserved (while preparing).
    existing_free: Vec<Vec<u32>>,
}

/// Eligibility is the same for pods with the same constraints.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ConstraintKey {
    node_selector: BTreeMap<String, String>,
    affinity: Vec<NodeSelectorTerm>,
    tolerations: Vec<Toleration>,
    cpu: u64,
    memory: u64,
    profiles: Vec<usize>,
}

impl ConstraintKey {
    fn of(pod: &Pod, profiles: Vec<usize>) -> Self {
        ConstraintKey {
            node_selector: pod.node_selector.clone(),
            affinity: pod.affinity.clone(),
            tolerations: pod.tolerations.clone(),
            cpu: pod.cpu_millis,
            memory: pod.memory_bytes,
            profiles,
        }
    }
}

/// Nodes passing the constraints, and the eligible ones (or why none is).
type EligibleNodes = (Arc<[usize]>, Result<Arc<[usize]>, UnmetReason>);

struct PendingContext<'c, 'a> {
    nodes: &'c [&'a Node],
    key_index: &'c dyn Fn(&str) -> Option<usize>,
    cache: BTreeMap<ConstraintKey, EligibleNodes>,
}

impl<'a> Problem<'a> {
    pub(crate) fn model_of(&self, gpu: usize) -> &'a GpuModel {
        self.models[self.gpus[gpu].model]
    }

    /// Profile key of an instance, if demand or headroom cares about its profile.
    pub(crate) fn key_of(&self, gpu: usize, placed: &Placed) -> Option<usize> {
        self.pid_to_key[self.gpus[gpu].model].get(placed.profile).copied().flatten()
    }

    pub(crate) fn new(
        snapshot: &'a Snapshot,
        catalog: &'a Catalog,
        options: &PlanOptions,
    ) -> Result<Self, PlanError> {
        snapshot.validate(catalog)?;
        let policy = snapshot.policy.clone().unwrap_or_default();

        let mut node_order: Vec<&Node> = snapshot.nodes.iter().collect();
        node_order.sort_by(|a, b| a.name.cmp(&b.name));

        // Models in key order; find() never fails after validation.
        let mut models: Vec<&GpuModel> = Vec::new();
        for node in &node_order {
            for gpu in &node.gpus {
                let model = catalog.find(&gpu.model).expect("validated");
                if !models.iter().any(|m| m.key == model.key) {
                    models.push(model);
                }
            }
        }
        models.sort_by(|a, b| a.key.cmp(&b.key));
        let lookup = models.clone();
        let canonical = move |name: &str| -> Option<String> {
            lookup.iter().find_map(|m| m.profile(name).map(|id| m.profile_info(id).name.clone()))
        };

        let running_by_key: BTreeMap<String, &Pod> = snapshot.running.iter().map(|p| (p.key(), p)).collect();

        // Profile keys: demand, headroom and instances of pods we might evict.
        let mut names = BTreeSet::new();
        for pod in &snapshot.pending {
            names.extend(pod.requests.keys().filter_map(|n| canonical(n)));
        }
        names.extend(policy.headroom.keys().filter_map(|n| canonical(n)));
        for pod in &snapshot.expected {
            names.extend(pod.requests.keys().filter_map(|n| canonical(n)));
        }
        if policy.eviction_allowed {
            for node in &node_order {
                for gpu in &node.gpus {
                    for inst in gpu.instances.iter().filter(|i| i.pod.is_some()) {
                        names.extend(canonical(&inst.profile));
                    }
                }
            }
        }
        let profiles: Vec<String> = names.into_iter().collect();
        let sorted = profiles.clone();
        let key_index = |name: &str| canonical(name).and_then(|c| sorted.binary_search(&c).ok());

        let key_to_pid: Vec<Vec<Option<ProfileId>>> =
            models.iter().map(|m| profiles.iter().map(|p| m.profile(p)).collect()).collect();
        let pid_to_key: Vec<Vec<Option<usize>>> = models
            .iter()
            .zip(&key_to_pid)
            .map(|(m, k2p)| {
                let mut back = vec![None; m.profiles.len()];
                for (key, pid) in k2p.iter().enumerate() {
                    if let Some(pid) = pid {
                        back[*pid] = Some(key);
                    }
                }
                back
            })
            .collect();
        let allowed: Vec<Vec<ProfileId>> = models
            .iter()
            .map(|m| {
                if policy.allowed_profiles.is_empty() {
                    m.standard_profiles()
                } else {
                    let mut ids: Vec<ProfileId> =
                        policy.allowed_profiles.iter().filter_map(|n| m.profile(n)).collect();
                    ids.sort_unstable();
                    ids.dedup();
                    ids
                }
            })
            .collect();
        let mut headroom = vec![0u32; profiles.len()];
        for (name, &count) in &policy.headroom {
            if let Some(k) = key_index(name) {
                headroom[k] += count;
            }
        }

        // Nodes and GPUs in name/index order.
        let mut nodes = Vec::with_capacity(node_order.len());
        let mut gpus = Vec::new();
        let mut pod_gpus: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
        for (n, node) in node_order.iter().enumerate() {
            let mut order: Vec<_> = node.gpus.iter().collect();
            order.sort_by_key(|g| g.index);
            let mut ids = Vec::new();
            for gpu in order {
                let model_idx = models
                    .iter()
                    .position(|m| catalog.find(&gpu.model).is_some_and(|x| x.key == m.key))
                    .expect("validated snapshot: every GPU model is in the catalog");
                let model = models[model_idx];
                let mut placed: Vec<(Placed, Option<&str>)> = gpu
                    .instances
                    .iter()
                    .map(|i| {
                        (
                            Placed::new(model.profile(&i.profile).expect("validated"), i.start),
                            i.pod.as_deref(),
                        )
                    })
                    .collect();
                placed.sort();
                for (_, pod) in &placed {
                    if let Some(pod) = pod {
                        pod_gpus.entry(pod).or_default().insert(gpus.len());
                    }
                }
                let current = Geometry::new(placed.iter().map(|(p, _)| *p).collect());
                let users = placed
                    .iter()
                    .map(|(_, pod)| if pod.is_some() { User::Pinned } else { User::Free })
                    .collect();
                ids.push(gpus.len());
                gpus.push(GpuInfo { node: n, index: gpu.index, model: model_idx, current, users });
            }
            nodes.push(NodeInfo {
                name: node.name.as_str(),
                gpus: ids,
                free_cpu: node.free_cpu_millis,
                free_memory: node.free_memory_bytes,
            });
        }

        // Evictable running pods: allowed by policy, known, not do-not-disrupt, on one GPU.
        let mut running = Vec::new();
        let mut notes = Vec::new();
        if policy.eviction_allowed {
            let mut running_eligible: BTreeMap<ConstraintKey, Arc<[usize]>> = BTreeMap::new();
            for (key, gpu_set) in &pod_gpus {
                let Some(pod) = running_by_key.get(*key) else { continue };
                if pod.do_not_disrupt {
                    continue;
                }
                if gpu_set.len() > 1 {
                    notes.push(format!(
                        "pod {key} uses instances on several GPUs; it is never evicted by this planner"
                    ));
                    continue;
                }
                let g = *gpu_set.iter().next().expect("a GPU class is never empty");
                let node_name = nodes[gpus[g].node].name;
                if pod.node.as_deref() != Some(node_name) {
                    notes.push(format!(
                        "pod {key} holds instances on node {node_name} but is bound elsewhere; not evicted"
                    ));
                    continue;
                }
                let gpu = &gpus[g];
                let model = models[gpu.model];
                let mut slices: BTreeMap<usize, u32> = BTreeMap::new();
                let snapshot_gpu = node_order[gpu.node]
                    .gpus
                    .iter()
                    .find(|x| x.index == gpu.index)
                    .expect("the GPU comes from this node");
                let mut ok = true;
                for inst in snapshot_gpu.instances.iter().filter(|i| i.pod.as_deref() == Some(*key)) {
                    match pid_to_key[gpu.model][model
                        .profile(&inst.profile)
                        .expect("validated snapshot: every instance profile is in the catalog")]
                    {
                        Some(k) => *slices.entry(k).or_default() += 1,
                        None => ok = false,
                    }
                }
                if !ok {
                    continue;
                }
                let needs = Needs {
                    slices: slices.into_iter().collect(),
                    cpu: pod.cpu_millis,
                    memory: pod.memory_bytes,
                };
                // Pods from one template share one list (and so one demand class in the ILP).
                let eligible = running_eligible
                    .entry(ConstraintKey::of(pod, Vec::new()))
                    .or_insert_with(|| {
                        let nodes: Vec<usize> = node_order
                            .iter()
                            .enumerate()
                            .filter(|(_, n)| eligibility(pod, n).is_ok())
                            .map(|(i, _)| i)
                            .collect();
                        Arc::from(nodes)
                    })
                    .clone();
                let idx = running.len();
                running.push(RunningInfo { key: key.to_string(), node: gpu.node, gpu: g, needs, eligible });
                let gpu = &mut gpus[g];
                for (i, inst) in snapshot_gpu_sorted(snapshot_gpu, model).iter().enumerate() {
                    if inst.map(String::as_str) == Some(*key) {
                        gpu.users[i] = User::Evictable(idx);
                    }
                }
            }
        }

        // Pending pods: weights, needs, eligibility, existing slices, reasons.
        let mut priorities: Vec<i32> = snapshot.pending.iter().map(|p| p.priority).collect();
        priorities.sort_unstable();
        priorities.dedup();
        let mut order: Vec<&Pod> = snapshot.pending.iter().collect();
        order.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.namespace.cmp(&b.namespace))
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut pending = Vec::with_capacity(order.len());
        let mut problem = Problem {
            models,
            profiles,
            key_to_pid,
            pid_to_key,
            allowed,
            headroom,
            nodes,
            gpus,
            pending: Vec::new(),
            running,
            max_gpus_changed: policy.max_gpus_changed,
            max_nodes_changed: policy.max_nodes_changed,
            time_limit: options
                .time_limit
                .or(policy.time_limit_ms.map(Duration::from_millis))
                .unwrap_or(DEFAULT_TIME_LIMIT),
            placements_inferred: snapshot.placements_inferred,
            notes,
            existing_free: Vec::new(),
        };
        problem.existing_free = vec![vec![0; problem.profiles.len()]; problem.nodes.len()];
        for gpu in &problem.gpus {
            for (i, placed) in gpu.current.instances().iter().enumerate() {
                if let (User::Free, Some(k)) =
                    (gpu.users[i], problem.pid_to_key[gpu.model].get(placed.profile).copied().flatten())
                {
                    problem.existing_free[gpu.node][k] += 1;
                }
            }
        }
        let mut ctx = PendingContext { nodes: &node_order, key_index: &key_index, cache: BTreeMap::new() };
        for pod in order {
            let weight = 1 + priorities
                .binary_search(&pod.priority)
                .expect("every priority is in the sorted list") as u64;
            pending.push(problem.pending_info(pod, weight, &mut ctx));
        }
        // Expected pods last, with weight 0: they take what the pending pods leave.
        for (i, pod) in snapshot.expected.iter().enumerate() {
            let mut info = problem.pending_info(pod, 0, &mut ctx);
            info.key = format!("expected[{i}] {}", info.key);
            pending.push(info);
        }
        problem.pending = pending;
        Ok(problem)
    }

    fn pending_info(
        &mut self,
        pod: &'a Pod,
        weight: u64,
        ctx: &mut PendingContext<'_, 'a>,
    ) -> PendingInfo<'a> {
        let mut slices: BTreeMap<usize, u32> = BTreeMap::new();
        let mut unknown = None;
        for (name, &count) in &pod.requests {
            match (ctx.key_index)(name) {
                Some(k) => *slices.entry(k).or_default() += count,
                None => unknown = unknown.or(Some(name.clone())),
            }
        }
        let needs =
            Needs { slices: slices.into_iter().collect(), cpu: pod.cpu_millis, memory: pod.memory_bytes };
        let mut info = PendingInfo {
            pod,
            key: pod.key(),
            weight,
            needs,
            eligible: Arc::from(Vec::new()),
            status: PodStatus::Plannable,
        };
        if let Some(profile) = unknown {
            info.status = PodStatus::Unmet(UnmetReason::UnknownProfile { profile });
            return info;
        }
        // Pods from one template share constraints: work out eligibility once per template.
        let cache_key = ConstraintKey::of(pod, info.needs.slices.iter().map(|s| s.0).collect());
        if !ctx.cache.contains_key(&cache_key) {
            let computed = self.eligible_nodes(pod, &info.needs, ctx.nodes);
            ctx.cache.insert(cache_key.clone(), computed);
        }
        let (passing, outcome) = &ctx.cache[&cache_key];
        // An expected pod reserves nothing: it is not there yet, and a slice it pinned could be
        // one a real pod needs repartitioned. The planners count existing free slices anyway.
        let reservation = if weight > 0 { self.reserve_existing(&info.needs, passing) } else { None };
        if let Some(node) = reservation {
            info.status = PodStatus::Existing(node);
            info.eligible = Arc::from(vec![node]);
            return info;
        }
        match outcome {
            Ok(eligible) => info.eligible = eligible.clone(),
            Err(reason) => info.status = PodStatus::Unmet(reason.clone()),
        }
        info
    }

    /// Nodes passing the pod's constraints, and those among them whose GPUs may offer (and are
    /// allowed to create) every requested profile, or why there are none.
    fn eligible_nodes(&self, pod: &Pod, needs: &Needs, node_order: &[&Node]) -> EligibleNodes {
        let mut excluded: BTreeMap<&'static str, (usize, String)> = BTreeMap::new();
        let mut passing = Vec::new();
        for (n, node) in node_order.iter().enumerate() {
            match eligibility(pod, node) {
                Ok(()) => passing.push(n),
                Err(why) => {
                    let entry = excluded
                        .entry(why.constraint())
                        .or_insert_with(|| (0, format!("{}: {why}", node.name)));
                    entry.0 += 1;
                }
            }
        }
        let passing: Arc<[usize]> = Arc::from(passing);
        if passing.is_empty() {
            let detail = exclusion_detail(node_order.len(), &excluded);
            return (passing, Err(UnmetReason::NoEligibleNode { detail }));
        }
        let offers = |n: usize, k: usize, allowed_only: bool| {
            self.nodes[n].gpus.iter().any(|&g| {
                let m = self.gpus[g].model;
                self.key_to_pid[m][k].is_some_and(|pid| !allowed_only || self.allowed[m].contains(&pid))
            })
        };
        let offering: Vec<usize> = passing
            .iter()
            .copied()
            .filter(|&n| needs.slices.iter().all(|&(k, _)| offers(n, k, false)))
            .collect();
        if offering.is_empty() {
            let wanted: Vec<&str> = needs.slices.iter().map(|&(k, _)| self.profiles[k].as_str()).collect();
            let detail = format!(
                "{} node(s) pass the pod's constraints but none has a GPU model offering {}",
                passing.len(),
                wanted.join(" and ")
            );
            return (passing, Err(UnmetReason::NoEligibleNode { detail }));
        }
        let eligible: Vec<usize> = offering
            .iter()
            .copied()
            .filter(|&n| needs.slices.iter().all(|&(k, _)| offers(n, k, true)))
            .collect();
        if eligible.is_empty() {
            let profile = needs
                .slices
                .iter()
                .map(|&(k, _)| k)
                .find(|&k| !offering.iter().any(|&n| offers(n, k, true)))
                .map(|k| self.profiles[k].clone())
                .unwrap_or_default();
            return (passing, Err(UnmetReason::ProfileNotAllowed { profile }));
        }
        (passing, Ok(Arc::from(eligible)))
    }

    /// First node (name order) whose free instances and CPU/memory cover `needs`; reserves them.
    fn reserve_existing(&mut self, needs: &Needs, nodes: &[usize]) -> Option<usize> {
        let n = nodes.iter().copied().find(|&n| {
            let node = &self.nodes[n];
            needs.slices.iter().all(|&(k, c)| self.existing_free[n][k] >= c)
                && node.free_cpu.is_none_or(|c| c >= needs.cpu)
                && node.free_memory.is_none_or(|m| m >= needs.memory)
        })?;
        for &(k, count) in &needs.slices {
            let mut left = count;
            for &g in &self.nodes[n].gpus {
                let gpu = &mut self.gpus[g];
                for (i, placed) in gpu.current.instances().iter().enumerate() {
                    if left > 0
                        && gpu.users[i] == User::Free
                        && self.pid_to_key[gpu.model].get(placed.profile).copied().flatten() == Some(k)
                    {
                        gpu.users[i] = User::Pinned;
                        left -= 1;
                    }
                }
            }
            self.existing_free[n][k] -= count;
        }
        let node = &mut self.nodes[n];
        node.free_cpu = node.free_cpu.map(|c| c - needs.cpu);
        node.free_memory = node.free_memory.map(|m| m - needs.memory);
        Some(n)
    }

    /// Pending pods the planners work on, in priority order, then the expected pods.
    pub(crate) fn plannable(&self) -> impl Iterator<Item = (usize, &PendingInfo<'a>)> {
        self.pending.iter().enumerate().filter(|(_, p)| matches!(p.status, PodStatus::Plannable))
    }

    /// The same problem with eviction off: every evictable pod's instances stay, as when the
    /// policy does not allow eviction.
    pub(crate) fn without_eviction(&self) -> Problem<'a> {
        let mut keep = self.clone();
        keep.running.clear();
        for user in keep.gpus.iter_mut().flat_map(|g| g.users.iter_mut()) {
            if let User::Evictable(_) = user {
                *user = User::Pinned;
            }
        }
        keep
    }

    /// Whether a pending entry stands for an expected pod, not a real one.
    pub(crate) fn is_expected(&self, i: usize) -> bool {
        self.pending[i].weight == 0
    }

    /// Upper bound on demand met: every plannable pod placed.
    pub(crate) fn trivial_bound(&self) -> u64 {
        self.plannable().map(|(_, p)| p.weight).sum()
    }
}

/// The pod reference of each instance, in the order `Geometry` sorts instances.
fn snapshot_gpu_sorted<'s>(gpu: &'s crate::snapshot::Gpu, model: &GpuModel) -> Vec<Option<&'s String>> {
    let mut placed: Vec<(Placed, Option<&String>)> = gpu
        .instances
        .iter()
        .map(|i| {
            (
                Placed::new(
                    model
                        .profile(&i.profile)
                        .expect("validated snapshot: every instance profile is in the catalog"),
                    i.start,
                ),
                i.pod.as_ref(),
            )
        })
        .collect();
    placed.sort();
    placed.into_iter().map(|(_, p)| p).collect()
}

fn exclusion_detail(total: usize, excluded: &BTreeMap<&'static str, (usize, String)>) -> String {
    if total == 0 {
        return "the snapshot has no managed nodes".to_string();
    }
    let parts: Vec<String> = excluded
        .iter()
        .map(|(constraint, (count, example))| {
            format!("{constraint} excludes {count} of {total} (e.g. {example})")
        })
        .collect();
    parts.join("; ")
}
