//! Conversions from API objects to the plain values the pure decision modules take.

use crate::adapter::PodView;
use std::collections::BTreeMap;

use geometer_solver::PodKey;
use jiff::Timestamp;
use kube::ResourceExt;

use geometer_api::{MigNode, MigNodePhase, MigNodeStatus, MigPlanSpec, NodeProgress, NodeProgressPhase};

use crate::rollout::sequence::{AgentState, NodeStep, NodeView, Recorded};
use crate::rollout::supersede::{GpuBasis, HelpedPod, InstanceNow, PlanBasis, PodState, WorldView};

/// Annotation on a MigNode: when the controller last wrote its spec (RFC 3339). Rollout's
/// stabilisation window counts from it, and it survives controller restarts.
pub(crate) const SPEC_WRITTEN_AT: &str = "geometer.dev/spec-written-at";

/// What a plan assumed, for supersession.
pub(crate) fn plan_basis(spec: &MigPlanSpec) -> PlanBasis {
    PlanBasis {
        helped: spec
            .demand
            .met
            .iter()
            .map(|m| HelpedPod { pod: m.pod.clone(), node: m.node.clone() })
            .collect(),
        gpus: spec
            .nodes
            .iter()
            .flat_map(|n| {
                n.gpus.iter().filter(|g| g.changes()).map(|g| GpuBasis {
                    node: n.node.clone(),
                    index: g.index,
                    from: g.from.iter().map(|p| p.to_string()).collect(),
                    destroy: g.operations.destroy.iter().map(|p| p.to_string()).collect(),
                })
            })
            .collect(),
        evicted: spec.evictions.iter().map(|e| PodKey::new(&e.namespace, &e.name).to_string()).collect(),
    }
}

/// Where a pod is now: pending, bound, or finished.
pub(crate) fn pod_state(pod: &PodView) -> PodState {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded") | Some("Failed")) || pod.metadata.deletion_timestamp.is_some() {
        return PodState::Finished;
    }
    match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        Some(node) => PodState::Bound(node),
        None => PodState::Pending,
    }
}

/// The world as supersession sees it: every pod, and each MigNode's instances.
pub(crate) fn world_view<'a>(
    pods: impl Iterator<Item = &'a PodView>,
    nodes: impl Iterator<Item = &'a MigNode>,
) -> WorldView {
    let mut world = WorldView::default();
    for pod in pods {
        let key = crate::adapter::pods::key(pod).to_string();
        world.pods.insert(key, pod_state(pod));
    }
    for node in nodes {
        let Some(status) = &node.status else { continue };
        for gpu in &status.gpus {
            let instances = gpu
                .placed_instances()
                .into_iter()
                .map(|(placed, pod)| InstanceNow { placed: placed.to_string(), pod: pod.cloned() })
                .collect();
            world.gpus.insert((node.name_any(), gpu.index), instances);
        }
    }
    world
}

/// The agent's state in rollout's terms. A Failed phase carries the Failed condition's message
/// (the agent's words), or the phase name when it set none.
pub(crate) fn agent_state(status: Option<&MigNodeStatus>) -> AgentState {
    let Some(status) = status else { return AgentState::Working("no status yet".to_string()) };
    match status.phase {
        MigNodePhase::Ready => AgentState::Ready,
        MigNodePhase::Failed => {
            let message = status
                .conditions
                .iter()
                .find(|c| c.type_ == MigNodeStatus::FAILED && c.status == "True")
                .map(|c| c.message.clone())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "the node agent reports Failed without a message".to_string());
            AgentState::Failed(message)
        }
        other => AgentState::Working(format!("{other:?}")),
    }
}

pub(crate) fn node_view(node: &MigNode) -> NodeView {
    let status = node.status.as_ref();
    NodeView {
        spec_plan: node.spec.plan.clone(),
        generation: node.metadata.generation.unwrap_or(0),
        observed_generation: status.and_then(|s| s.observed_generation),
        agent: agent_state(status),
        spec_written_at: node.annotations().get(SPEC_WRITTEN_AT).and_then(|t| t.parse::<Timestamp>().ok()),
    }
}

/// The annotation value for a spec written at `at`: RFC 3339 at second precision, as
/// Kubernetes writes times, so it compares with the plan status' `startedAt`.
pub(crate) fn written_at_value(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Node steps a plan's status recorded, for rollout.
pub(crate) fn recorded_steps(progress: &[NodeProgress]) -> BTreeMap<String, Recorded> {
    progress
        .iter()
        .map(|p| {
            let step = match p.phase {
                NodeProgressPhase::Pending => NodeStep::Pending(p.message.clone()),
                NodeProgressPhase::Applying => NodeStep::Applying,
                NodeProgressPhase::Succeeded => NodeStep::Succeeded,
                NodeProgressPhase::Failed => NodeStep::Failed(p.message.clone().unwrap_or_default()),
            };
            (p.node.clone(), Recorded { step, started_at: p.started_at.as_ref().map(|t| t.0) })
        })
        .collect()
}
