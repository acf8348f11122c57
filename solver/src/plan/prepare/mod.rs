//! Snapshot -> [`Problem`]: names resolved to ids, pods sorted and weighted, eligibility
//! computed, and pods that cannot be planned at all given their reason. Both planners start from here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog::{Catalog, GpuModel, ProfileId};
use crate::geometry::{Geometry, Placed};
use crate::snapshot::{
    Freeable, GpuSpread, Node, NodeKinds, NodeSelectorTerm, Pod, PodKey, Snapshot, Toleration,
};

use super::{PlanError, PlanOptions, UnmetReason};

mod evictable;
mod layout;
mod pressure;
mod tables;

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

impl User {
    /// Whether the instance stays held when the pods in `evicted` leave.
    pub(crate) fn stays(self, evicted: &BTreeSet<usize>) -> bool {
        match self {
            User::Free => false,
            User::Pinned => true,
            User::Evictable(r) => !evicted.contains(&r),
        }
    }
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
    /// `None`: not limiting.
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
    /// Whether the slices must share one GPU or each have their own.
    pub spread: GpuSpread,
}

#[derive(Clone)]
pub(crate) enum PodStatus {
    /// For the planners.
    Plannable,
    Unmet(UnmetReason),
}

#[derive(Clone)]
pub(crate) struct PendingInfo<'a> {
    pub pod: &'a Pod,
    pub key: PodKey,
    /// 1 + rank of the pod's priority among the pending pods' distinct priorities; 0 for an
    /// expected pod ([`Snapshot::expected`]), which counts in no demand met.
    pub weight: u64,
    pub needs: Needs,
    /// Nodes that pass the pod's constraints and have GPUs that may offer each profile
    /// (shared between pods with the same constraints).
    pub eligible: Arc<[usize]>,
    pub status: PodStatus,
    /// Its gang ([`Problem::gangs`]), if it is in one that still needs members.
    pub gang: Option<usize>,
}

/// A gang that still needs members: `need` of its pending members must get slices in the same
/// plan, or none may.
#[derive(Clone, Debug)]
pub(crate) struct GangInfo {
    pub need: u32,
}

#[derive(Clone)]
pub(crate) struct RunningInfo {
    pub key: PodKey,
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
    /// Gangs with pending members that are not complete without them.
    pub gangs: Vec<GangInfo>,
    /// Per node: what its evictable pods request (pods' eligibility counts it as free).
    pub freeable: Vec<Freeable>,
    /// Per node: whether its CPU or memory could bind a plan (see [`pressure`]).
    pub pressed: Vec<bool>,
    pub max_gpus_changed: Option<u32>,
    pub max_nodes_changed: Option<u32>,
    /// Whole GPUs the plan must keep: the policy's minimum, or as many as there are now where
    /// that is fewer (turning GPUs whole for pending demand is never forced).
    pub whole_floor: u32,
    /// Seconds a changed node stays as planned; above 0 its empty GPUs are shaped too.
    pub stabilisation_seconds: u32,
    /// The policy lets the agent reset GPUs: an Ampere GPU may change mode
    /// ([`crate::snapshot::Policy::gpu_reset_allowed`]).
    pub resets_allowed: bool,
    /// When planning must stop: the time limit after the problem was read. Geometry searches
    /// stop there too.
    pub deadline: Instant,
    pub placements_inferred: bool,
    pub notes: Vec<String>,
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

/// The nodes eligible for a pod, or why none is.
type EligibleNodes = Result<Arc<[usize]>, UnmetReason>;

struct PendingContext<'c, 'a> {
    nodes: &'c [&'a Node],
    kinds: &'c NodeKinds,
    offers: &'c tables::Offers,
    key_index: &'c dyn Fn(&str) -> Option<usize>,
    cache: BTreeMap<ConstraintKey, EligibleNodes>,
}

impl<'a> Problem<'a> {
    pub(crate) fn model_of(&self, gpu: usize) -> &'a GpuModel {
        self.models[self.gpus[gpu].model]
    }

    /// Whether `gpu` is whole, or could be planned whole as it is: in MIG mode with no
    /// instance, on a model that changes mode without a reset, under a policy that allows whole
    /// GPUs. Only such a GPU can take a whole-GPU pod without evicting anyone.
    pub(crate) fn can_be_whole(&self, gpu: usize) -> bool {
        let (model, info) = (self.model_of(gpu), &self.gpus[gpu]);
        let allowed = self.allowed[info.model].contains(&model.whole());
        info.current.is_whole(model)
            || (allowed
                && info.current.instances().is_empty()
                && (self.resets_allowed || !model.mode_change_needs_reset()))
    }

    /// GPUs that are whole (MIG off) now, or in `targets` where given.
    pub(crate) fn whole_gpus(&self, targets: Option<&[Geometry]>) -> u32 {
        let geometry = |g: usize| targets.map_or(&self.gpus[g].current, |t| &t[g]);
        (0..self.gpus.len()).filter(|&g| geometry(g).is_whole(self.model_of(g))).count() as u32
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
        let time_limit = options
            .time_limit
            .or(policy.time_limit_ms.map(Duration::from_millis))
            .unwrap_or(DEFAULT_TIME_LIMIT);
        let mut node_order: Vec<&Node> = snapshot.nodes.iter().collect();
        node_order.sort_by(|a, b| a.name.cmp(&b.name));

        let (models, model_names) = tables::models_of(&node_order, catalog);
        let lookup = models.clone();
        let canonical = move |name: &str| tables::canonical_name(&lookup, name);
        let profiles = tables::profile_keys(snapshot, &policy, &node_order, &canonical);
        let sorted = profiles.clone();
        let key_index = |name: &str| canonical(name).and_then(|c| sorted.binary_search(&c).ok());
        let (key_to_pid, pid_to_key) = tables::key_maps(&models, &profiles);
        let allowed = tables::allowed_profiles(&models, &policy);
        let headroom = tables::headroom(&policy, profiles.len(), &key_index);

        let mut layout = layout::layout(&node_order, &models, &model_names);
        let mut notes = Vec::new();
        // Running pods are checked for where they could land only when they may be evicted.
        let evictable: &[Pod] = if policy.eviction_allowed { &snapshot.running } else { &[] };
        let pods = snapshot.pending.iter().chain(&snapshot.expected).chain(evictable);
        let kinds = NodeKinds::new(&node_order, pods);
        let (running, freeable) = if policy.eviction_allowed {
            evictable::evictable_pods(
                snapshot,
                &node_order,
                &kinds,
                &models,
                &pid_to_key,
                &mut layout,
                &mut notes,
            )
        } else {
            (Vec::new(), vec![Freeable::default(); node_order.len()])
        };
        let mut problem = Problem {
            models,
            profiles,
            key_to_pid,
            pid_to_key,
            allowed,
            headroom,
            nodes: layout.nodes,
            gpus: layout.gpus,
            pending: Vec::new(),
            running,
            gangs: Vec::new(),
            freeable,
            pressed: Vec::new(),
            max_gpus_changed: policy.max_gpus_changed,
            max_nodes_changed: policy.max_nodes_changed,
            whole_floor: 0,
            stabilisation_seconds: policy.stabilisation_seconds,
            resets_allowed: policy.gpu_reset_allowed,
            deadline: Instant::now() + time_limit,
            placements_inferred: snapshot.placements_inferred,
            notes,
        };
        let node_models = problem.nodes.iter().map(|n| n.gpus.iter().map(|&g| problem.gpus[g].model));
        let offers =
            tables::Offers::new(node_models, &problem.key_to_pid, &problem.allowed, problem.profiles.len());
        let mut ctx = PendingContext {
            nodes: &node_order,
            kinds: &kinds,
            offers: &offers,
            key_index: &key_index,
            cache: BTreeMap::new(),
        };
        problem.whole_floor = policy.min_whole_gpus.map_or(0, |min| min.min(problem.whole_gpus(None)));
        problem.add_pending(snapshot, &mut ctx);
        problem.add_gangs(snapshot);
        problem.pressed = pressure::resources_may_bind(&problem);
        Ok(problem)
    }

    /// Pending pods by descending priority, weighted by their priority's rank; then the
    /// expected pods with weight 0: they take what the pending pods leave.
    fn add_pending(&mut self, snapshot: &'a Snapshot, ctx: &mut PendingContext<'_, 'a>) {
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
        let mut pending = Vec::with_capacity(order.len() + snapshot.expected.len());
        for pod in order {
            let weight = 1 + priorities
                .binary_search(&pod.priority)
                .expect("every priority is in the sorted list") as u64;
            pending.push(self.pending_info(pod, weight, ctx));
        }
        for pod in &snapshot.expected {
            pending.push(self.pending_info(pod, 0, ctx));
        }
        self.pending = pending;
    }

    /// The gangs that need some of their pending members, and each member's gang. A gang whose
    /// counted members reach its minimum already is none: its pending members are planned like
    /// any pod.
    fn add_gangs(&mut self, snapshot: &Snapshot) {
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for gang in &snapshot.gangs {
            let need = gang.min_members.saturating_sub(gang.members_counted);
            if need > 0 {
                index.insert(&gang.name, self.gangs.len());
                self.gangs.push(GangInfo { need });
            }
        }
        for p in &mut self.pending {
            p.gang = p.pod.gang.as_deref().and_then(|g| index.get(g).copied());
        }
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
        let needs = Needs {
            slices: slices.into_iter().collect(),
            cpu: pod.cpu_millis,
            memory: pod.memory_bytes,
            spread: pod.gpu_spread,
        };
        let mut info = PendingInfo {
            pod,
            key: pod.key(),
            weight,
            needs,
            eligible: Arc::from(Vec::new()),
            status: PodStatus::Plannable,
            gang: None,
        };
        if let Some(profile) = unknown {
            info.status = PodStatus::Unmet(UnmetReason::UnknownProfile { profile });
            return info;
        }
        // Pods from one template share constraints: work out eligibility once per template.
        let cache_key = ConstraintKey::of(pod, info.needs.slices.iter().map(|s| s.0).collect());
        if !ctx.cache.contains_key(&cache_key) {
            let computed = self.eligible_nodes(pod, &info.needs, ctx);
            ctx.cache.insert(cache_key.clone(), computed);
        }
        // A pod that fits free slices already there is planned like any other: whether it takes
        // them, or they are repartitioned for a pod that needs them more, is the solver's choice.
        match &ctx.cache[&cache_key] {
            Ok(eligible) => info.eligible = eligible.clone(),
            Err(reason) => info.status = PodStatus::Unmet(reason.clone()),
        }
        info
    }

    /// Nodes passing the pod's constraints, and those among them whose GPUs may offer (and are
    /// allowed to create) every requested profile, or why there are none.
    fn eligible_nodes(&self, pod: &Pod, needs: &Needs, ctx: &PendingContext) -> EligibleNodes {
        let node_order = ctx.nodes;
        let mut excluded: BTreeMap<&'static str, (usize, String)> = BTreeMap::new();
        let mut passing = Vec::new();
        let failures = ctx.kinds.failures(pod, node_order, &self.freeable);
        for (n, (node, failure)) in node_order.iter().zip(failures).enumerate() {
            match failure {
                None => passing.push(n),
                Some(why) => {
                    let entry = excluded
                        .entry(why.constraint())
                        .or_insert_with(|| (0, format!("{}: {}", node.name, why.owned())));
                    entry.0 += 1;
                }
            }
        }
        let passing: Arc<[usize]> = Arc::from(passing);
        if passing.is_empty() {
            let detail = exclusion_detail(node_order.len(), &excluded);
            return Err(UnmetReason::NoEligibleNode { detail });
        }
        let offers = |n: usize, k: usize, allowed_only: bool| ctx.offers.offers(n, k, allowed_only);
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
            return Err(UnmetReason::NoEligibleNode { detail });
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
            return Err(UnmetReason::ProfileNotAllowed { profile });
        }
        Ok(Arc::from(eligible))
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
        keep.freeable = vec![Freeable::default(); keep.nodes.len()];
        keep.pressed = pressure::resources_may_bind(&keep);
        keep
    }

    /// Per node, free CPU (millicores) and memory (bytes) once the `evicted` running pods have
    /// gone: an evicted pod gives back what it requested on its node. `None` where not limited.
    pub(crate) fn free_after(&self, evicted: &BTreeSet<usize>) -> (Vec<Option<u64>>, Vec<Option<u64>>) {
        let mut cpu: Vec<Option<u64>> = self.nodes.iter().map(|n| n.free_cpu).collect();
        let mut memory: Vec<Option<u64>> = self.nodes.iter().map(|n| n.free_memory).collect();
        for &r in evicted {
            let pod = &self.running[r];
            cpu[pod.node] = cpu[pod.node].map(|c| c + pod.needs.cpu);
            memory[pod.node] = memory[pod.node].map(|m| m + pod.needs.memory);
        }
        (cpu, memory)
    }

    /// Whether evicting running pod `r` gives back CPU or memory that could bind on its node.
    pub(crate) fn eviction_frees_resources(&self, r: usize) -> bool {
        let pod = &self.running[r];
        self.pressed[pod.node] && (pod.needs.cpu > 0 || pod.needs.memory > 0)
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
fn snapshot_gpu_sorted<'s>(gpu: &'s crate::snapshot::Gpu, model: &GpuModel) -> Vec<Option<&'s PodKey>> {
    let mut placed: Vec<(Placed, Option<&PodKey>)> = gpu
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
