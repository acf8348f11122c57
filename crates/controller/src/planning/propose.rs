//! One planning round of one policy: pending demand -> a snapshot of the nodes it manages ->
//! the solver -> a `MigPlan` to publish, or none.
//!
//! Demand is what DESIGN.md says: pods that are Pending, unbound, not nominated and marked
//! `Unschedulable` by the scheduler, requesting `nvidia.com/mig-*`. Nodes come from their
//! MigNode inventories (placements as the agent read them from NVML); a node without an
//! inventory, or one that is mid-reconfiguration or failed, stays out of the round until it
//! settles. Everything here is pure; [`crate::runtime::main_loop`] reads the caches and carries out the actions.

use crate::adapter::PodView;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanOptions};
use geometer_solver::snapshot::Snapshot;
use geometer_solver::{GeometryCache, PodKey};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::adapter::gangs::PodGroupMin;
use crate::adapter::{self, pods as adapter_pods, AdapterError, Objects};
use geometer_api::gpu_operator::Refusal;
use geometer_api::{MigNode, MigPlan, MigPlanPhase, MigPlanStatus, MigPolicy};

use crate::planning::fingerprint::Fingerprint;
use crate::planning::{naming, plan_spec};
use crate::rollout::sequence::AgentState;
use crate::runtime::actions::Action;
use crate::world;

/// Label on every plan: the policy that made it (`kubectl get migplans -l geometer.dev/policy=X`).
pub(crate) const POLICY_LABEL: &str = "geometer.dev/policy";
/// Annotation on every plan: fingerprint of its content, so an identical later round is
/// recognised (also by a restarted controller).
pub(crate) const CONTENT_ANNOTATION: &str = "geometer.dev/plan-content";
/// Condition on a published plan describing how it was made.
pub(crate) const PLANNED: &str = "Planned";

/// Profile -> slices, per pending pod (`namespace/name`).
pub(crate) type DemandByPod = BTreeMap<PodKey, BTreeMap<String, u32>>;

/// Pending pods that are demand for MIG slices. A pod whose requests do not parse is left out
/// (the API server validates quantities, so this only happens with hand-made objects).
/// Pods asking for devices through DRA claims count with the profiles their claims need
/// (`claims`), so that a batch starts for them as for device-plugin requests.
pub(crate) fn demand<'a>(
    pods: impl IntoIterator<Item = &'a Arc<PodView>>,
    claims: &mut adapter::dra::ClaimDemand<'_>,
) -> DemandByPod {
    pods.into_iter()
        .filter(|pod| adapter_pods::demand_check(pod).is_ok())
        .filter_map(|pod| {
            let requests = adapter_pods::effective_requests(pod).ok()?;
            let mig = adapter_pods::gpu_requests(&requests);
            // A claim that cannot be planned is demand with no profile: a round says why.
            let mig = if mig.is_empty() { claims.profiles(pod, &requests)? } else { mig };
            Some((adapter_pods::key(pod), mig))
        })
        .collect()
}

/// Bound, unfinished pods that hold GPU devices (through the device plugin or DRA claims):
/// when one of them goes, the room it leaves may meet demand that was unmet.
/// `requests` are the pass's already-read requests (every pod's, at 150,000 pods not worth
/// reading again).
pub(crate) fn holders<'a>(
    pods: impl IntoIterator<Item = &'a Arc<PodView>>,
    requests: &adapter_pods::KnownRequests,
) -> BTreeSet<PodKey> {
    let holds = |pod: &Arc<PodView>| {
        pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).is_some_and(|c| !c.is_empty())
            || requests.get(pod).is_some_and(|r| !adapter_pods::gpu_requests(r).is_empty())
    };
    pods.into_iter()
        .filter(|pod| {
            adapter_pods::bound_node(pod).is_some() && !adapter_pods::is_terminal(pod) && holds(pod)
        })
        .map(|pod| adapter_pods::key(pod))
        .collect()
}

/// What the batcher compares: the demand, the policy generation it is planned under, and the
/// pods holding devices (one leaving is a new look at demand still waiting). None when there
/// is no demand.
pub(crate) fn demand_fingerprint(
    policy: &MigPolicy,
    demand: &DemandByPod,
    holders: &BTreeSet<PodKey>,
) -> Option<Fingerprint> {
    (!demand.is_empty()).then(|| Fingerprint::of(&(policy.metadata.generation, demand, holders)))
}

/// One policy's part of the cluster.
pub struct RoundInput<'a> {
    pub policy: &'a MigPolicy,
    /// Nodes the policy's selector matches.
    pub managed: &'a [String],
    pub nodes: &'a BTreeMap<String, Arc<Node>>,
    pub mignodes: &'a BTreeMap<String, Arc<MigNode>>,
    pub pods: &'a [Arc<PodView>],
    /// Requests already read of some of `pods`; the others are read in the round.
    pub requests: &'a adapter_pods::KnownRequests,
    /// Inventories already read of some of `mignodes`; the others are read in the round.
    pub inventories: &'a adapter::mig_objects::KnownInventories,
    /// Gang minimums declared by PodGroups.
    pub pod_groups: &'a [PodGroupMin],
    /// NVIDIA's DRA driver's slices, and the claims, templates and classes pods ask through.
    pub dra: &'a Arc<crate::dra::objects::DraObjects>,
    /// The round's clock, for the forecast window.
    pub now: Timestamp,
}

/// The solver's input and what was left out of it.
#[derive(Debug)]
pub struct Prepared {
    pub snapshot: Snapshot,
    /// Managed nodes left out of this round, with why.
    pub excluded: Vec<(String, String)>,
    pub warnings: Vec<String>,
    /// Some node left out is on its way to settling (reconfiguring, agent starting, inside its
    /// stabilisation window): a later round may find more room.
    pub settling: bool,
    /// Pending pods whose DRA claims cannot be planned, each with why.
    pub unplanned_claims: Vec<(PodKey, String)>,
    /// Pending pods' claims that fit no DynamicMIG GPU now, and why.
    pub blocked_claims: Vec<crate::adapter::dynamic_mig::Blocked>,
}

/// Why a managed node cannot be planned now, if it cannot, and whether that should pass on
/// its own. A node changed within the policy's stabilisation window stays out too: the
/// rollout would not change it again before the window ends, so a plan for it would only wait
/// (and make pods wait) while other nodes might have room now.
fn not_plannable(node: &str, input: &RoundInput<'_>) -> Option<(String, bool)> {
    let (nodes, mignode) = (input.nodes, input.mignodes.get(node));
    let Some(node_object) = nodes.get(node) else {
        return Some(("the Node object is gone".into(), false));
    };
    if let Err(refusal) = adapter::nodes::operator_preflight(node_object) {
        let passes = matches!(refusal, Refusal::MigConfigInProgress { .. } | Refusal::DriverUpgrade { .. });
        return Some((format!("refused: {refusal}"), passes));
    }
    let Some(mignode) = mignode else {
        return Some(("no MigNode yet (is the node agent running?)".into(), true));
    };
    if mignode.status.as_ref().is_none_or(|s| s.gpus.is_empty()) {
        return Some(("its agent has not reported a GPU inventory yet".into(), true));
    }
    let view = world::node_view(mignode);
    match view.agent {
        AgentState::Failed(why) => Some((format!("failed: {why}"), false)),
        AgentState::Working(phase) => Some((format!("reconfiguring ({phase})"), true)),
        AgentState::Ready if !view.settled() => {
            Some(("its agent has not yet observed the latest spec".into(), true))
        }
        AgentState::Ready => {
            let window = jiff::SignedDuration::from_secs(i64::from(input.policy.spec.stabilisation_seconds));
            let until =
                view.spec_written_at.map(|written| written + window).filter(|until| *until > input.now)?;
            Some((format!("changed less than stabilisationSeconds ago; may change again at {until}"), true))
        }
    }
}

/// Builds the snapshot of the policy's settled nodes and its pending demand, with the running
/// pods only where the policy allows eviction (they are the eviction candidates).
pub fn prepare(input: &RoundInput<'_>, catalog: &Catalog) -> Result<Prepared, AdapterError> {
    let mut excluded = Vec::new();
    let mut included = BTreeSet::new();
    let mut inventories = BTreeMap::new();
    let mut advertised = BTreeMap::new();
    let mut sharing = BTreeSet::new();
    let mut instance_uuids = std::collections::HashMap::new();
    let mut device_stacks = BTreeMap::new();
    let mut settling = false;
    for name in input.managed {
        if let Some((why, passes)) = not_plannable(name, input) {
            settling |= passes;
            excluded.push((name.clone(), why));
            continue;
        }
        let mignode = &input.mignodes[name];
        let known = input.inventories.get(mignode).cloned();
        match known.map_or_else(|| adapter::mig_objects::inventory(mignode).map(Arc::new), Ok) {
            Ok(gpus) => {
                included.insert(name.as_str());
                inventories.insert(name.to_string(), gpus);
                advertised.extend(adapter::mig_objects::advertised(&input.mignodes[name]));
                sharing.extend(adapter::mig_objects::sharing_pods(&input.mignodes[name]).map(String::from));
                instance_uuids.extend(adapter::mig_objects::instance_uuids(&input.mignodes[name]));
                if let Some(stack) = input.mignodes[name].status.as_ref().and_then(|s| s.device_stack) {
                    device_stacks.insert(name.clone(), stack);
                }
            }
            Err(e) => excluded.push((name.clone(), e.to_string())),
        }
    }
    let mut objects = Objects {
        inventories,
        advertised,
        sharing,
        pod_groups: input.pod_groups.to_vec(),
        dra: input.dra.clone(),
        instance_uuids,
        device_stacks,
        known_requests: input.requests.clone(),
        running_only_if_evictable: true,
        ..Objects::default()
    };
    for name in &included {
        objects.nodes.push(input.nodes[*name].clone());
    }
    for pod in input.pods {
        // Gang members anywhere count towards their gang's minimum.
        // One whose requests cannot be read is left out by `build_snapshot` (the controller's
        // pass has reported it already).
        if on_nodes_or_demand(pod, &included) || adapter::gangs::declares_gang(pod) {
            objects.pods.push(pod.clone());
        }
    }
    let mut built = adapter::build_snapshot(
        &objects,
        catalog,
        Some(adapter::mig_objects::mig_policy(input.policy, false)?),
        input.now,
    )?;
    built.snapshot.expected = forecast(input);
    // A node whose inventory the catalog cannot place (the catalog is wrong for that driver)
    // stays out instead of stopping the whole policy's planning.
    let snapshot = &mut built.snapshot;
    let unplaceable = unplaceable_nodes(&mut snapshot.nodes, catalog);
    for (name, e) in &unplaceable {
        excluded.push((name.clone(), format!("its inventory does not fit the catalog: {e}")));
    }
    snapshot.nodes.retain(|n| !unplaceable.contains_key(&n.name));
    snapshot.running.retain(|p| p.node.as_ref().is_none_or(|n| !unplaceable.contains_key(n)));
    Ok(Prepared {
        snapshot: built.snapshot,
        excluded,
        warnings: built.warnings,
        settling,
        unplanned_claims: built.unplanned_claims,
        blocked_claims: built.blocked_claims,
    })
}

/// The nodes whose inventory does not validate against `catalog`, each with why. All are
/// checked at once first (the usual case: none), then one by one.
fn unplaceable_nodes(
    nodes: &mut Vec<geometer_solver::snapshot::Node>,
    catalog: &Catalog,
) -> BTreeMap<String, geometer_solver::snapshot::SnapshotError> {
    let all = Snapshot { nodes: std::mem::take(nodes), ..Snapshot::default() };
    let valid = all.validate(catalog).is_ok();
    *nodes = all.nodes;
    if valid {
        return BTreeMap::new();
    }
    let mut out = BTreeMap::new();
    for node in nodes.iter() {
        let alone = Snapshot { nodes: vec![node.clone()], ..Snapshot::default() };
        if let Err(e) = alone.validate(catalog) {
            out.insert(node.name.clone(), e);
        }
    }
    out
}

/// Whether a pod is bound to one of `nodes`, or unbound and demand.
fn on_nodes_or_demand(pod: &PodView, nodes: &BTreeSet<&str>) -> bool {
    match adapter_pods::bound_node(pod) {
        Some(node) => nodes.contains(node),
        None => pod.spec.is_some() && adapter_pods::demand_check(pod).is_ok(),
    }
}

/// The policy's pods created within its forecast window (bound to its nodes, or waiting for
/// slices), as the pods the next window is expected to bring. Empty when the window is 0.
fn forecast(input: &RoundInput<'_>) -> Vec<geometer_solver::snapshot::Pod> {
    let window = input.policy.spec.forecast_window_seconds;
    if window == 0 {
        return Vec::new();
    }
    let since = input.now - jiff::SignedDuration::from_secs(i64::from(window));
    let managed: BTreeSet<&str> = input.managed.iter().map(String::as_str).collect();
    let keys = &input.policy.spec.disruption.do_not_disrupt_annotations;
    let mut expected = Vec::new();
    for pod in input.pods {
        // No upper bound: a pod stamped ahead of the controller's clock is recent too.
        let recent = pod.metadata.creation_timestamp.as_ref().is_some_and(|t| t.0 > since);
        if !recent || pod.metadata.deletion_timestamp.is_some() || adapter_pods::is_terminal(pod) {
            continue;
        }
        if !on_nodes_or_demand(pod, &managed) {
            continue;
        }
        let Ok(requests) = adapter_pods::effective_requests(pod) else { continue };
        if adapter_pods::gpu_requests(&requests).is_empty() {
            continue;
        }
        if let Ok(mut next) = adapter_pods::planner_pod(pod, &requests, keys, input.now) {
            // Its constraints and requests, not its binding: the next one is not bound yet.
            next.node = None;
            expected.push(next);
        }
    }
    expected
}

/// The solver options a policy asks for (its time limit).
pub fn options(policy: &MigPolicy) -> PlanOptions {
    let limit = policy.spec.solver.time_limit_ms;
    PlanOptions {
        time_limit: (limit > 0).then(|| Duration::from_millis(limit.into())),
        ..PlanOptions::default()
    }
}

/// Runs the solver under the policy's time limit (ILP, greedy fallback inside), its geometry
/// searches answered from `cache` where an earlier round asked the same.
pub(crate) fn solve(
    prepared: &Prepared,
    catalog: &Catalog,
    policy: &MigPolicy,
    cache: &GeometryCache,
) -> Result<Plan, geometer_solver::plan::PlanError> {
    geometer_solver::plan_cached(&prepared.snapshot, catalog, &options(policy), cache)
}

/// What a round ends with.
#[derive(Debug)]
pub(crate) enum Decision {
    /// A new plan to create, and events for the pods it is about.
    Publish { plan: Box<MigPlan>, events: Vec<Action> },
    /// The open plan `plan` already says the same.
    Unchanged { plan: String },
    /// No GPU needs to change; events for pods that cannot be helped.
    NothingToDo { events: Vec<Action> },
}

/// Whether to publish `solved` for `policy`, given the policy's open (Proposed or Approved)
/// plans.
pub(crate) fn decide(
    policy: &MigPolicy,
    solved: &Plan,
    prepared: &Prepared,
    open: &[&MigPlan],
    pods: &BTreeMap<PodKey, &PodView>,
    now: Timestamp,
) -> Decision {
    let name = policy.name_any();
    let spec = plan_spec::to_spec(&name, solved);
    if spec.summary.gpus_changed == 0 {
        let mut events = plan_spec::pod_events(&spec, pods, None);
        events.extend(plan_spec::claim_events(&prepared.unplanned_claims, pods, None));
        events.extend(plan_spec::blocked_events(&prepared.blocked_claims, pods, None));
        return Decision::NothingToDo { events };
    }
    let content = Fingerprint::of(&(&spec.nodes, &spec.evictions, &spec.demand));
    if let Some(same) =
        open.iter().find(|p| p.annotations().get(CONTENT_ANNOTATION) == Some(&content.to_string()))
    {
        return Decision::Unchanged { plan: same.name_any() };
    }
    let plan_name = naming::plan_name(&name, now, content);
    let review = super::review::text(&spec);
    let mut plan = MigPlan::new(&plan_name, spec);
    plan.metadata = ObjectMeta {
        name: Some(plan_name),
        labels: Some(BTreeMap::from([(POLICY_LABEL.to_string(), name.clone())])),
        annotations: Some(BTreeMap::from([
            (CONTENT_ANNOTATION.to_string(), content.to_string()),
            (super::review::REVIEW_ANNOTATION.to_string(), review),
        ])),
        owner_references: owner(policy).map(|o| vec![o]),
        ..ObjectMeta::default()
    };
    plan.status = Some(MigPlanStatus {
        phase: MigPlanPhase::Proposed,
        message: Some("published".to_string()),
        conditions: vec![planned_condition(solved, prepared, policy, now)],
        ..MigPlanStatus::default()
    });
    let reference = plan.object_ref(&());
    let mut events = plan_spec::pod_events(&plan.spec, pods, Some(&reference));
    events.extend(plan_spec::claim_events(&prepared.unplanned_claims, pods, Some(&reference)));
    events.extend(plan_spec::blocked_events(&prepared.blocked_claims, pods, Some(&reference)));
    Decision::Publish { plan: Box::new(plan), events }
}

/// The policy owns its plans: deleting it deletes them.
fn owner(policy: &MigPolicy) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: MigPolicy::api_version(&()).to_string(),
        kind: MigPolicy::kind(&()).to_string(),
        name: policy.name_any(),
        uid: policy.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: None,
    })
}

/// How the plan was made, for `kubectl describe migplan`: solver, time, gap to the bound, and
/// the nodes left out.
fn planned_condition(solved: &Plan, prepared: &Prepared, policy: &MigPolicy, now: Timestamp) -> Condition {
    let (generation, forecast_window) = (policy.metadata.generation, policy.spec.forecast_window_seconds);
    let solver = serde_json::to_value(solved.solver)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut message = format!(
        "{solver} solver, {} ms, {} pending pod(s) considered, objective {} (bound {:.0}, gap {:.1}%)",
        solved.solve_ms,
        prepared.snapshot.pending.len(),
        solved.objective.demand_met,
        solved.bound,
        solved.gap * 100.0
    );
    if !prepared.snapshot.expected.is_empty() {
        message.push_str(&format!(
            "; forecast: room for {} of {} pod(s) like those created in the last {} s",
            solved.objective.expected,
            prepared.snapshot.expected.len(),
            forecast_window
        ));
    }
    if !prepared.excluded.is_empty() {
        let left: Vec<String> = prepared.excluded.iter().map(|(n, why)| format!("{n} ({why})")).collect();
        message.push_str(&format!("; nodes left out: {}", left.join(", ")));
    }
    if prepared.snapshot.placements_inferred {
        message.push_str("; some placements were inferred");
    }
    Condition {
        type_: PLANNED.to_string(),
        status: "True".to_string(),
        reason: "Solved".to_string(),
        message: message.chars().take(1000).collect(),
        last_transition_time: Time(now),
        observed_generation: generation,
    }
}

#[cfg(test)]
#[path = "propose_tests.rs"]
mod tests;
