//! A published plan's life: Proposed -> (approval) -> Approved -> Applying -> Succeeded or
//! Failed, or Superseded when the world overtook it before it applied.
//!
//! [`reconcile_plan`] is pure: it reads the plan, its policy and the cluster as plain values and
//! returns the actions to take. It is called on every change and must converge: when nothing
//! changed it returns nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};

use geometer_api::{
    GpuGeometry, MigNode, MigNodeSpec, MigPlan, MigPlanPhase, MigPlanStatus, MigPolicy, NodeProgress,
    NodeProgressPhase, PolicyMode,
};

use crate::rollout::sequence::{self, NodeStep, NodeView, PlanProgress, RolloutLimits};
use crate::rollout::supersede::{self, Overtaken, WorldView};
use crate::runtime::actions::{Action, EventSpec};
use crate::world;

/// A node whose agent is silent this long past the policy's drain timeout fails the plan; the
/// agent reports its own failures much sooner, this only catches a dead agent.
const AGENT_SILENCE_MARGIN: Duration = Duration::from_secs(900);

/// Everything one plan's reconcile reads.
pub(crate) struct PlanInputs<'a> {
    pub plan: &'a MigPlan,
    /// None when the policy was deleted.
    pub policy: Option<&'a MigPolicy>,
    /// Whether policy validation passed (see `policy_check`).
    pub policy_valid: bool,
    /// The newest plan of the same policy, when it is not this one.
    pub newer: Option<&'a str>,
    /// Another plan of the same policy that is Applying.
    pub another_applying: Option<&'a str>,
    pub world: &'a WorldView,
    /// MigNodes of every node the policy manages, by name.
    pub mignodes: &'a BTreeMap<String, Arc<MigNode>>,
    pub now: Timestamp,
}

/// What one plan's reconcile decided.
#[derive(Debug, Default)]
pub(crate) struct PlanDecision {
    pub actions: Vec<Action>,
    /// When to look again even if nothing changes (a stabilisation window ends, a node times out).
    pub recheck_at: Option<Timestamp>,
}

pub(crate) fn reconcile_plan(inp: &PlanInputs<'_>) -> PlanDecision {
    let plan = inp.plan;
    let current = plan.status.clone().unwrap_or_default();
    if current.phase.is_final() {
        return PlanDecision::default();
    }
    let mut next = current.clone();
    let mut actions = Vec::new();
    let mut recheck_at = None;

    if matches!(current.phase, MigPlanPhase::Proposed | MigPlanPhase::Approved) {
        if let Some(why) = superseded(inp) {
            next.phase = MigPlanPhase::Superseded;
            next.message = Some(format!("superseded: {why}"));
            actions.push(plan_event(plan, false, "Superseded", "Supersede", format!("Superseded: {why}")));
        } else if let Some(wait) = hold(inp) {
            next.message = Some(wait);
        } else if let Some(other) = inp.another_applying {
            next.phase = MigPlanPhase::Approved;
            next.message =
                Some(format!("approved; waits for plan {other} of the same policy to finish applying"));
        } else if changing_nodes(plan).is_empty() {
            next.phase = MigPlanPhase::Succeeded;
            next.message = Some("nothing to change: no GPU's geometry differs from its target".to_string());
            actions.push(plan_event(
                plan,
                false,
                "Succeeded",
                "Apply",
                "Succeeded: no GPU needed a change".to_string(),
            ));
        } else {
            next.phase = MigPlanPhase::Applying;
            let nodes = changing_nodes(plan);
            actions.push(plan_event(
                plan,
                false,
                "Applying",
                "Apply",
                format!("Applying to {} node(s): {}", nodes.len(), nodes.join(", ")),
            ));
        }
    }

    if next.phase == MigPlanPhase::Applying {
        let (more, recheck) = roll_out(inp, &mut next);
        actions.extend(more);
        recheck_at = recheck;
    }

    if next != current {
        actions.insert(
            0,
            Action::PlanStatus {
                plan: plan.name_any(),
                resource_version: plan.resource_version(),
                before: plan.status.clone(),
                status: next,
            },
        );
    }
    PlanDecision { actions, recheck_at }
}

/// Why the plan no longer applies, if it does not.
fn superseded(inp: &PlanInputs<'_>) -> Option<String> {
    if inp.policy.is_none() {
        return Some(format!("its policy {} was deleted", inp.plan.spec.policy));
    }
    if let Some(newer) = inp.newer {
        return Some(Overtaken::ReplacedBy { plan: newer.to_string() }.to_string());
    }
    supersede::overtaken(&world::plan_basis(&inp.plan.spec), inp.world).map(|o| o.to_string())
}

/// Why the plan may not start applying yet, as its status message.
fn hold(inp: &PlanInputs<'_>) -> Option<String> {
    let policy = inp.policy?;
    let name = inp.plan.name_any();
    if !inp.policy_valid {
        return Some(format!(
            "not applied: policy {} is invalid (see `kubectl describe migpolicy {}`)",
            policy.name_any(),
            policy.name_any()
        ));
    }
    match policy.spec.mode {
        PolicyMode::DryRun => Some(format!(
            "DryRun: published for review only; set spec.mode of policy {} to Approve or Auto to apply plans",
            policy.name_any()
        )),
        PolicyMode::Approve if !inp.plan.spec.approved => Some(format!(
            "waiting for approval: kubectl geometer approve {name}  (or: kubectl patch migplan {name} --type=merge -p '{{\"spec\":{{\"approved\":true}}}}')"
        )),
        PolicyMode::Approve | PolicyMode::Auto => None,
    }
}

/// Nodes with at least one GPU to change, in plan order.
fn changing_nodes(plan: &MigPlan) -> Vec<String> {
    plan.spec.nodes.iter().filter(|n| n.gpus.iter().any(|g| g.changes())).map(|n| n.node.clone()).collect()
}

fn roll_out(inp: &PlanInputs<'_>, next: &mut MigPlanStatus) -> (Vec<Action>, Option<Timestamp>) {
    let plan = inp.plan;
    let name = plan.name_any();
    let nodes = changing_nodes(plan);
    let node_views: BTreeMap<String, NodeView> =
        inp.mignodes.iter().map(|(n, m)| (n.clone(), world::node_view(m))).collect();
    let recorded = world::recorded_steps(&next.nodes);
    // Second precision throughout, as the API stores times; see `world::written_at_value`.
    let now = Timestamp::from_second(inp.now.as_second()).unwrap_or(inp.now);
    let limits = inp.policy.map_or(
        RolloutLimits { max_nodes_reconfiguring: 1, stabilisation: Duration::ZERO, node_timeout: None },
        |p| RolloutLimits {
            max_nodes_reconfiguring: p.spec.disruption.max_nodes_reconfiguring.max(1),
            stabilisation: Duration::from_secs(p.spec.stabilisation_seconds.into()),
            node_timeout: Some(
                Duration::from_secs(p.spec.disruption.drain_timeout_seconds.into()) + AGENT_SILENCE_MARGIN,
            ),
        },
    );
    let decision = sequence::next_step(&name, &nodes, &node_views, &recorded, limits, now);

    let mut actions = Vec::new();
    for node in &decision.write {
        let Some(mignode) = inp.mignodes.get(node) else { continue };
        actions.push(Action::NodeSpec {
            node: node.clone(),
            resource_version: mignode.resource_version(),
            spec: desired_spec(plan, node, mignode),
            written_at: now,
        });
    }

    let before: BTreeMap<&str, &NodeProgress> = next.nodes.iter().map(|p| (p.node.as_str(), p)).collect();
    next.nodes = decision
        .nodes
        .iter()
        .map(|(node, step)| progress(node, step, before.get(node.as_str()).copied(), now))
        .collect();

    match decision.outcome {
        PlanProgress::Applying => {
            let waiting: Vec<String> = decision
                .nodes
                .iter()
                .filter_map(|(n, s)| match s {
                    NodeStep::Pending(Some(why)) => Some(format!("{n} {why}")),
                    _ => None,
                })
                .collect();
            let applying = decision.nodes.iter().filter(|(_, s)| *s == NodeStep::Applying).count();
            let done = decision.nodes.iter().filter(|(_, s)| *s == NodeStep::Succeeded).count();
            let mut message =
                format!("{done}/{} node(s) done, {applying} reconfiguring", decision.nodes.len());
            if let Some(first) = waiting.first() {
                message.push_str(&format!("; {first}"));
            }
            next.message = Some(message);
        }
        PlanProgress::Succeeded => {
            next.phase = MigPlanPhase::Succeeded;
            next.message = Some(format!("{} node(s) reached their target geometry", decision.nodes.len()));
            actions.push(plan_event(
                plan,
                false,
                "Succeeded",
                "Apply",
                format!("Succeeded: {} node(s) reconfigured", decision.nodes.len()),
            ));
        }
        PlanProgress::Failed(why) => {
            next.phase = MigPlanPhase::Failed;
            next.message = Some(format!("failed: {why}"));
            actions.push(plan_event(plan, true, "Failed", "Apply", format!("Failed: {why}")));
        }
    }
    (actions, decision.recheck_at)
}

/// The node's spec after this plan: its GPUs get the plan's targets, other GPUs keep what an
/// earlier plan asked for.
fn desired_spec(plan: &MigPlan, node: &str, mignode: &MigNode) -> MigNodeSpec {
    let mut gpus: BTreeMap<u32, GpuGeometry> =
        mignode.spec.gpus.iter().map(|g| (g.index, g.clone())).collect();
    for change in plan.spec.nodes.iter().filter(|n| n.node == node).flat_map(|n| &n.gpus) {
        gpus.insert(change.index, GpuGeometry { index: change.index, geometry: change.to.clone() });
    }
    MigNodeSpec { plan: Some(plan.name_any()), gpus: gpus.into_values().collect(), compaction: None }
}

fn progress(node: &str, step: &NodeStep, before: Option<&NodeProgress>, now: Timestamp) -> NodeProgress {
    let (phase, message) = match step {
        NodeStep::Pending(why) => (NodeProgressPhase::Pending, why.clone()),
        NodeStep::Applying => (NodeProgressPhase::Applying, None),
        NodeStep::Succeeded => (NodeProgressPhase::Succeeded, None),
        NodeStep::Failed(why) => (NodeProgressPhase::Failed, Some(why.clone())),
    };
    let started_at = before
        .and_then(|b| b.started_at.clone())
        .or_else(|| (phase != NodeProgressPhase::Pending).then_some(Time(now)));
    let finished = matches!(phase, NodeProgressPhase::Succeeded | NodeProgressPhase::Failed);
    let finished_at = before.and_then(|b| b.finished_at.clone()).or_else(|| finished.then_some(Time(now)));
    NodeProgress { node: node.to_string(), phase, message, started_at, finished_at }
}

fn plan_event(
    plan: &MigPlan,
    warning: bool,
    reason: &'static str,
    action: &'static str,
    note: String,
) -> Action {
    Action::Event(EventSpec { regarding: plan.object_ref(&()), related: None, warning, reason, action, note })
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
