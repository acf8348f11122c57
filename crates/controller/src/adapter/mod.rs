//! Kubernetes objects -> a solver [`Snapshot`].
//!
//! Input is what `kubectl get nodes,pods -A -o yaml` (or `-o json`) prints: a `List` of Nodes
//! and Pods, optionally with MigNode and MigPolicy objects. GPUs come from a node's MigNode
//! inventory where there is one; otherwise from the GPU Operator's labels and the node's
//! `nvidia.com/mig-*` capacity, with placements inferred (and the snapshot says so).

pub mod dra;
pub mod dynamic_mig;
pub mod gangs;
pub mod known;
mod kubectl_yaml;
mod list;
mod list_stream;
pub mod mig_objects;
pub mod nodes;
mod parallel;
pub mod pod_view;
pub mod pods;
pub(crate) mod projection;

pub use list::{list_objects, objects_of, parse_objects, parse_policy, parse_value};
pub use list_stream::json_list_from;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use geometer_api::MigPolicy;
use geometer_solver::catalog::Catalog;
use geometer_solver::snapshot::Snapshot;
use geometer_solver::PodKey;
use k8s_openapi::api::core::v1::Node;
use thiserror::Error;

pub use mig_objects::PolicyObject;
pub use pod_view::PodView;

#[derive(Debug, Clone, Error)]
pub enum AdapterError {
    #[error("input is neither JSON nor YAML: {0}")]
    Syntax(String),
    #[error("input is a {found}, expected a List (kubectl get nodes,pods -A -o yaml) or a single object")]
    NotAList { found: String },
    #[error("items[{index}] ({kind} {name}) does not parse as a {kind}: {problem}")]
    Object { index: usize, kind: String, name: String, problem: String },
    #[error("items[{index}] is {found}, not a Kubernetes object; remove it, or put the object it stands for there")]
    NotAnObject { index: usize, found: String },
    #[error("{object}: field `{field}` = {value}: {problem}")]
    Field { object: String, field: String, value: String, problem: String },
}

/// The objects of a List, by kind. Shared (`Arc`), so that the controller hands its cached
/// objects over without copying them.
#[derive(Debug, Default)]
pub struct Objects {
    pub nodes: Vec<Arc<Node>>,
    pub pods: Vec<Arc<PodView>>,
    /// MigNode inventories, by node name.
    pub inventories: BTreeMap<String, Arc<Vec<geometer_solver::snapshot::Gpu>>>,
    /// Resource the device plugin advertises -> catalog profile, as the agents published them
    /// (`MigNode.status.gpus[].advertisedAs`): how pod requests are read.
    pub advertised: BTreeMap<String, String>,
    pub policies: Vec<MigPolicy>,
    /// Kinds present but not used, with counts.
    pub ignored: BTreeMap<String, usize>,
    /// Objects that could not be read, each with why; the rest are read without them.
    pub skipped: Vec<AdapterError>,
    /// Nodes whose MigNode could not be read: left out rather than guessed from labels.
    pub unreadable_inventories: BTreeSet<String>,
    /// Pods sharing a whole GPU with others (`MigNode.status.gpus[].sharedWith`): never
    /// planned as evictable, since evicting one frees nothing.
    pub sharing: BTreeSet<String>,
    /// What pods use of the whole GPUs they hold (`MigNode.status.usage`), for right-sizing.
    pub usage: Vec<geometer_api::PodGpuUsage>,
    /// NVIDIA's DRA driver's ResourceSlices, and the ResourceClaims, templates and
    /// DeviceClasses pods ask through.
    pub dra: Arc<crate::dra::objects::DraObjects>,
    /// MIG devices (and whole GPUs) by UUID, from the MigNode inventories: where the DRA
    /// driver's devices are.
    pub instance_uuids: std::collections::HashMap<Box<str>, dra::InstanceAt>,
    /// How each node's GPUs are advertised, as its agent reported it (`MigNode.status.deviceStack`).
    pub device_stacks: BTreeMap<String, geometer_api::DeviceStack>,
    /// PodGroups (coscheduling, Volcano): the minimum of each gang they declare.
    pub pod_groups: Vec<gangs::PodGroupMin>,
    /// Requests already read of some of `pods` (the controller's, from its last pass); the
    /// others are read here.
    pub known_requests: pods::KnownRequests,
    /// Leave running pods out of the snapshot unless the policy allows eviction: the planner
    /// reads them only as eviction candidates (in-use instances and free CPU and memory come
    /// from the nodes), and at 150,000 pods they are most of a planning round's memory. For
    /// the controller's rounds; a snapshot written for people keeps them.
    pub running_only_if_evictable: bool,
}

/// A snapshot and what the reader should know about how it was made.
#[derive(Debug)]
pub struct Built {
    pub snapshot: Snapshot,
    pub warnings: Vec<String>,
    /// Objects left out because they could not be read (the input's and the snapshot's), each
    /// naming the object, field and value.
    pub skipped: Vec<AdapterError>,
    /// Pending pods whose DRA claims cannot be planned, each with why.
    pub unplanned_claims: Vec<(PodKey, String)>,
    /// Pending pods' claims that fit no DynamicMIG GPU now: fragmentation or capacity.
    pub blocked_claims: Vec<dynamic_mig::Blocked>,
}

/// A pod's effective requests, with advertised MIG resources named by their profile.
type Requests<'r> = Cow<'r, BTreeMap<String, u64>>;

fn selector_matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Builds the snapshot. `policy` (from `--policy`) wins over a MigPolicy in the objects.
/// `now` is the moment the snapshot stands for (do-not-disrupt durations run out against it).
pub fn build_snapshot(
    objects: &Objects,
    catalog: &Catalog,
    policy: Option<PolicyObject>,
    now: jiff::Timestamp,
) -> Result<Built, AdapterError> {
    let mut warnings = Vec::new();
    let policy = choose_policy(objects, policy, &mut warnings)?;
    let do_not_disrupt: Vec<String> = match &policy {
        Some(p) if !p.do_not_disrupt.is_empty() => p.do_not_disrupt.clone(),
        _ => geometer_api::DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS.iter().map(|s| s.to_string()).collect(),
    };
    let selector = policy.as_ref().map(|p| p.node_selector.clone()).unwrap_or_default();
    let mut skipped = objects.skipped.clone();
    // A pod whose requests cannot be read is left out (and said why), not the whole snapshot.
    let mut requests: Vec<Option<Requests<'_>>> = objects
        .pods
        .iter()
        .map(|pod| match objects.known_requests.get(pod) {
            Some(known) => Ok(Cow::Borrowed(&**known)),
            None => pods::effective_requests(pod).map(Cow::Owned),
        })
        .map(|read| match read {
            Ok(r) => Some(pods::as_profiles(r, &objects.advertised)),
            Err(e) => {
                skipped.push(e);
                None
            }
        })
        .collect();
    let mut dra = dra::DraPlanning::new(objects, catalog);
    if dra.active() {
        for (pod, reqs) in objects.pods.iter().zip(requests.iter_mut()) {
            if let Some(reqs) = reqs {
                dra.add_requests(pod, reqs);
            }
        }
    }
    let usage = Usage::of(objects, &requests);

    let mut snapshot = Snapshot::default();
    let mut sorted_nodes: Vec<&Node> = objects.nodes.iter().map(|n| &**n).collect();
    sorted_nodes.sort_by(|a, b| nodes::name(a).cmp(nodes::name(b)));
    for node in sorted_nodes.iter().filter(|n| selector_matches(&selector, &nodes::labels(n))) {
        if objects.unreadable_inventories.contains(nodes::name(node)) {
            warnings.push(format!("node {}: its MigNode cannot be read; not managed", nodes::name(node)));
            continue;
        }
        let stack = dra.mode_of(nodes::name(node));
        let refusal = stack
            .and_then(|mode| nodes::both_stacks(node, mode).or_else(|| dra.refusal(nodes::name(node), mode)));
        if let Some(why) = refusal {
            warnings.push(format!("node {}: left unchanged: {why}", nodes::name(node)));
            continue;
        }
        if let Err(refusal) = nodes::operator_preflight(node) {
            warnings.push(format!("node {}: left unchanged: {refusal}", nodes::name(node)));
            continue;
        }
        match node_facts(node, objects, catalog, &usage, &mut warnings) {
            Ok(Some((mut facts, inferred))) => {
                snapshot.placements_inferred |= inferred;
                if stack.is_some() {
                    dra.hold(&mut facts);
                }
                snapshot.nodes.push(facts);
            }
            Ok(None) => {}
            Err(e) => skipped.push(e),
        }
    }
    let seen: BTreeSet<&str> = sorted_nodes.iter().map(|n| nodes::name(n)).collect();
    for name in objects.inventories.keys().filter(|n| !seen.contains(n.as_str())) {
        warnings.push(format!("MigNode {name} has no Node in the input; ignored"));
    }
    let evictable = policy.as_ref().is_some_and(|p| p.policy.eviction_allowed);
    let keep_running = evictable || !objects.running_only_if_evictable;
    let (pending, running) = classify_pods(
        objects,
        &requests,
        &snapshot,
        (&do_not_disrupt, keep_running),
        now,
        &mut warnings,
        &mut skipped,
    );
    snapshot.pending = pending;
    snapshot.running = running;
    dra.separate_stacks(&mut snapshot.nodes, &mut snapshot.pending);
    let (dynamic_notes, blocked_claims) = dra.dynamic_mig();
    warnings.extend(dynamic_notes);
    dra.notes(&mut warnings);
    let unplanned_claims = std::mem::take(&mut dra.unplanned);
    add_gangs(objects, &requests, &mut snapshot, &mut warnings, &mut skipped);
    for pod in snapshot.running.iter_mut().filter(|p| objects.sharing.contains(p.key().as_str())) {
        pod.do_not_disrupt = true;
    }
    snapshot.policy = policy.map(|p| p.policy);
    Ok(Built { snapshot, warnings, skipped, unplanned_claims, blocked_claims })
}

/// Each pending pod's gang, and the gangs with pending members.
fn add_gangs(
    objects: &Objects,
    requests: &[Option<Requests<'_>>],
    snapshot: &mut Snapshot,
    warnings: &mut Vec<String>,
    skipped: &mut Vec<AdapterError>,
) {
    let asks: Vec<Option<bool>> =
        requests.iter().map(|r| r.as_ref().map(|r| !pods::gpu_requests(r).is_empty())).collect();
    let found = gangs::gangs(&objects.pods, &asks, &objects.pod_groups, warnings, skipped);
    let mut used = BTreeSet::new();
    for pod in &mut snapshot.pending {
        pod.gang = found.of_pod.get(&pod.key()).cloned();
        used.extend(pod.gang.clone());
    }
    snapshot.gangs = found.gangs.into_iter().filter(|g| used.contains(&g.name)).collect();
}

/// The `--policy` file's, else the first MigPolicy by name (saying so when there are more).
fn choose_policy(
    objects: &Objects,
    policy: Option<PolicyObject>,
    warnings: &mut Vec<String>,
) -> Result<Option<PolicyObject>, AdapterError> {
    let mut in_list: Vec<PolicyObject> =
        objects.policies.iter().map(|p| mig_objects::mig_policy(p, true)).collect::<Result<_, _>>()?;
    in_list.sort_by(|a, b| a.name.cmp(&b.name));
    if policy.is_none() && in_list.len() > 1 {
        warnings.push(format!("{} MigPolicy objects; using {}", in_list.len(), in_list[0].name));
    }
    Ok(policy.or_else(|| in_list.into_iter().next()))
}

/// What bound, unfinished pods use per node, and who uses which MIG profile where.
struct Usage<'o> {
    /// Per node: resources requested by its pods.
    used: BTreeMap<&'o str, BTreeMap<String, u64>>,
    /// Per node, per profile: the pods (`namespace/name`, once per instance) using it.
    mig_users: BTreeMap<&'o str, BTreeMap<String, Vec<PodKey>>>,
}

impl<'o> Usage<'o> {
    fn of(objects: &'o Objects, requests: &[Option<Requests<'_>>]) -> Usage<'o> {
        let mut usage = Usage { used: BTreeMap::new(), mig_users: BTreeMap::new() };
        for (pod, reqs) in objects.pods.iter().zip(requests) {
            let Some(reqs) = reqs else { continue };
            let Some(node) = pods::bound_node(pod) else { continue };
            if pods::is_terminal(pod) {
                continue;
            }
            let used = usage.used.entry(node).or_default();
            for (k, v) in reqs.iter() {
                match used.get_mut(k) {
                    Some(e) => *e = e.saturating_add(*v),
                    None => {
                        used.insert(k.clone(), *v);
                    }
                }
            }
            // Who uses which profile is only needed to infer a node's geometry from its labels;
            // an agent's inventory says it.
            if objects.inventories.contains_key(node) {
                continue;
            }
            for (profile, count) in pods::gpu_requests(reqs) {
                let list = usage.mig_users.entry(node).or_default().entry(profile).or_default();
                list.extend(std::iter::repeat_n(pods::key(pod), count as usize));
            }
        }
        usage
    }
}

/// A selected node as the planner sees it, with whether its geometry was inferred from the
/// Node's labels and allocatable (no MigNode inventory); `None` when it is not managed.
fn node_facts(
    node: &Node,
    objects: &Objects,
    catalog: &Catalog,
    usage: &Usage<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<(geometer_solver::snapshot::Node, bool)>, AdapterError> {
    let name = nodes::name(node);
    let empty = BTreeMap::new();
    let mut facts = nodes::planner_node(node, usage.used.get(name).unwrap_or(&empty))?;
    if let Some(gpus) = objects.inventories.get(name) {
        facts.gpus = gpus.to_vec();
        return Ok(Some((facts, false)));
    }
    let Some((product, model)) = nodes::product_model(node, catalog) else { return Ok(None) };
    let Some(model) = model else {
        warnings.push(format!(
            "node {name}: GPU {product:?} is not in the catalog; not managed (add it with --catalog FILE)"
        ));
        return Ok(None);
    };
    let mut counts = nodes::mig_counts(node)?;
    let config = nodes::labels(node).get(nodes::MIG_CONFIG_LABEL).cloned();
    let gpu_count = nodes::gpu_count(node)?;
    if counts.is_empty() && config.as_deref().is_none_or(|c| c == "all-disabled") {
        // No MIG instances: the GPUs are whole (MIG off), as the device plugin advertises them.
        counts.insert(geometer_solver::catalog::WHOLE.to_string(), gpu_count);
    }
    let users = usage.mig_users.get(name).cloned().unwrap_or_default();
    let (gpus, more) = nodes::infer_gpus(node, model, gpu_count, &counts, &users)?;
    warnings.extend(more);
    facts.gpus = gpus;
    Ok(Some((facts, true)))
}

/// Pending pods that are MIG demand, and (when `keep_running`) running pods that hold
/// instances on managed nodes; a pod asking for slices that is not demand (a gang, an init
/// container, ...) is said why. Pods are read on every core for a large cluster (each on its
/// own), in order.
fn classify_pods(
    objects: &Objects,
    requests: &[Option<Requests<'_>>],
    snapshot: &Snapshot,
    (do_not_disrupt, keep_running): (&[String], bool),
    now: jiff::Timestamp,
    warnings: &mut Vec<String>,
    skipped: &mut Vec<AdapterError>,
) -> (Vec<geometer_solver::snapshot::Pod>, Vec<geometer_solver::snapshot::Pod>) {
    let users: HashSet<&PodKey> = snapshot
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter())
        .flat_map(|g| g.instances.iter())
        .filter_map(|i| i.pod.as_ref())
        .collect();
    let managed: HashSet<&str> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    let pods: Vec<(&Arc<PodView>, &Option<Requests<'_>>)> = objects.pods.iter().zip(requests).collect();
    let classify = |chunk: &[(&Arc<PodView>, &Option<Requests<'_>>)]| {
        let mut classified = Classified::default();
        for (pod, reqs) in chunk {
            let Some(reqs) = reqs else { continue };
            classified.add(pod, reqs, (&users, &managed), (do_not_disrupt, keep_running), now);
        }
        classified
    };
    let (mut pending, mut running) = (Vec::new(), Vec::new());
    for part in parallel::in_order(&pods, PODS_PER_THREAD, classify) {
        pending.extend(part.pending);
        running.extend(part.running);
        warnings.extend(part.warnings);
        skipped.extend(part.skipped);
    }
    (pending, running)
}

/// Fewest pods worth a thread of their own when building a snapshot.
const PODS_PER_THREAD: usize = 20_000;

/// Some pods, sorted into the snapshot's pending and running ones.
#[derive(Default)]
struct Classified {
    pending: Vec<geometer_solver::snapshot::Pod>,
    running: Vec<geometer_solver::snapshot::Pod>,
    warnings: Vec<String>,
    skipped: Vec<AdapterError>,
}

impl Classified {
    /// `pod` into pending (demand), running (holding an instance on a managed node) or neither.
    fn add(
        &mut self,
        pod: &PodView,
        reqs: &BTreeMap<String, u64>,
        (users, managed): (&HashSet<&PodKey>, &HashSet<&str>),
        (do_not_disrupt, keep_running): (&[String], bool),
        now: jiff::Timestamp,
    ) {
        let key = pods::key(pod);
        let into = match pods::bound_node(pod) {
            Some(n)
                if keep_running && managed.contains(n) && users.contains(&key) && !pods::is_terminal(pod) =>
            {
                &mut self.running
            }
            Some(_) => return,
            None if pods::gpu_requests(reqs).is_empty() => return,
            None => match pods::demand_check(pod) {
                Ok(()) => &mut self.pending,
                Err(why) => {
                    if !pods::is_terminal(pod) {
                        self.warnings.push(format!("pod {key} requests MIG slices but is not demand: {why}"));
                    }
                    return;
                }
            },
        };
        match pods::planner_pod(pod, reqs, do_not_disrupt, now) {
            Ok(p) => into.push(p),
            Err(e) => self.skipped.push(e),
        }
    }
}

#[cfg(test)]
mod tests;
