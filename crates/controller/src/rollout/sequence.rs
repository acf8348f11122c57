//! Rollout sequencing: which nodes of an applying plan get their MigNode spec written next, and
//! when the plan is over.
//!
//! The controller writes a node's desired geometry into its MigNode spec; the node agent then
//! cordons, drains, repartitions and reports in the MigNode status. A node has converged when
//! the agent has observed the spec's generation and is `Ready`. This module decides, from those
//! observations alone, what to do next, so that a restarted controller picks up where the last
//! one stopped:
//!
//! - at most `maxNodesReconfiguring` nodes of the policy are reconfiguring at once (counting
//!   nodes busy for any reason, e.g. a Failed agent retrying);
//! - a node changed less than the stabilisation window ago is not changed again yet;
//! - a node whose agent fails for the plan's generation fails the plan, with the agent's words,
//!   and no further node is started.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

/// The policy's disruption limits as they apply to one rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RolloutLimits {
    pub max_nodes_reconfiguring: u32,
    /// No second change to a node within this window after the last one was written.
    pub stabilisation: Duration,
    /// A node that has not converged this long after its spec was written fails the plan.
    pub node_timeout: Option<Duration>,
}

/// What the agent reports about its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AgentState {
    Ready,
    /// Any stage of a reconfiguration (observing, cordoning, draining, ...); the phase name.
    Working(String),
    /// The last attempt failed; the agent's message.
    Failed(String),
}

/// One managed node's MigNode, as rollout sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeView {
    /// Plan named in the spec.
    pub spec_plan: Option<String>,
    pub generation: i64,
    pub observed_generation: Option<i64>,
    pub agent: AgentState,
    /// When the controller last wrote the spec.
    pub spec_written_at: Option<Timestamp>,
}

impl NodeView {
    /// Converged on its current spec.
    pub(crate) fn settled(&self) -> bool {
        self.observed_generation == Some(self.generation) && self.agent == AgentState::Ready
    }

    /// Why it is not settled, for messages.
    fn busy_reason(&self) -> String {
        match &self.agent {
            AgentState::Failed(message) => format!("its agent reports a failure: {message}"),
            AgentState::Working(phase) => format!("it is still reconfiguring ({phase})"),
            AgentState::Ready => "its agent has not yet observed the latest spec".to_string(),
        }
    }
}

/// Where one node of the plan stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeStep {
    /// Not started; the reason it waits, if it does.
    Pending(Option<String>),
    Applying,
    Succeeded,
    Failed(String),
}

/// Where the plan stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlanProgress {
    Applying,
    Succeeded,
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RolloutDecision {
    /// Nodes whose MigNode spec to write now, in order.
    pub write: Vec<String>,
    /// Every node of the plan, in plan order, after the writes.
    pub nodes: Vec<(String, NodeStep)>,
    pub outcome: PlanProgress,
    /// Earliest time at which waiting for time alone (stabilisation, timeout) can change the
    /// decision; the controller looks again then even if nothing else happens.
    pub recheck_at: Option<Timestamp>,
}

/// What the plan's status recorded about a node last time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub step: NodeStep,
    /// When the controller wrote the node's spec for this plan.
    pub started_at: Option<Timestamp>,
}

/// Decides the next step of plan `plan`, whose changing nodes are `plan_nodes` (in the order to
/// roll out). `views` holds every node the policy manages; `recorded` what the plan's status
/// recorded last time: a node once Succeeded stays so; a node recorded Applying whose MigNode
/// does not name the plan is either not yet visible in the cache or its write was lost, and is
/// written again (the write is idempotent), unless a later write by another plan took it over.
pub(crate) fn next_step(
    plan: &str,
    plan_nodes: &[String],
    views: &BTreeMap<String, NodeView>,
    recorded: &BTreeMap<String, Recorded>,
    limits: RolloutLimits,
    now: Timestamp,
) -> RolloutDecision {
    let mut recheck_at: Option<Timestamp> = None;
    let mut recheck = |t: Timestamp| recheck_at = Some(recheck_at.map_or(t, |r: Timestamp| r.min(t)));

    let mut write = Vec::new();
    let mut nodes: Vec<(String, NodeStep)> = Vec::with_capacity(plan_nodes.len());
    for node in plan_nodes {
        let step = match observe(plan, node, views.get(node), recorded.get(node), limits, now, &mut recheck) {
            Observed::Step(step) => step,
            Observed::WriteAgain => {
                write.push(node.clone());
                NodeStep::Applying
            }
        };
        nodes.push((node.clone(), step));
    }

    if let Some((node, NodeStep::Failed(why))) = nodes.iter().find(|(_, s)| matches!(s, NodeStep::Failed(_)))
    {
        let outcome = PlanProgress::Failed(format!("node {node}: {why}"));
        return RolloutDecision { write: vec![], nodes, outcome, recheck_at: None };
    }
    // A node written again holds a slot even where the (stale) cache shows it settled.
    let rewritten =
        write.iter().filter(|n| views.get(n.as_str()).is_some_and(NodeView::settled)).count() as u32;
    if nodes.iter().all(|(_, s)| *s == NodeStep::Succeeded) {
        return RolloutDecision { write: vec![], nodes, outcome: PlanProgress::Succeeded, recheck_at: None };
    }

    let busy = views.values().filter(|v| !v.settled()).count() as u32;
    let mut slots = limits.max_nodes_reconfiguring.saturating_sub(busy + rewritten);
    for (node, step) in nodes.iter_mut() {
        let NodeStep::Pending(waiting) = step else { continue };
        let view = &views[node.as_str()];
        if !view.settled() {
            *waiting = Some(format!("waits: {}", view.busy_reason()));
            continue;
        }
        if let Some(written) = view.spec_written_at {
            let until = add(written, limits.stabilisation);
            if until > now {
                *waiting = Some(format!(
                    "waits for the stabilisation window: last changed {written}, may change again at {until}"
                ));
                recheck(until);
                continue;
            }
        }
        if slots == 0 {
            *waiting = Some(format!(
                "waits: {} node(s) reconfiguring, the policy allows at most {}",
                busy + write.len() as u32,
                limits.max_nodes_reconfiguring
            ));
            continue;
        }
        slots -= 1;
        write.push(node.clone());
        *step = NodeStep::Applying;
        if let Some(timeout) = limits.node_timeout {
            recheck(add(now, timeout));
        }
    }
    RolloutDecision { write, nodes, outcome: PlanProgress::Applying, recheck_at }
}

enum Observed {
    Step(NodeStep),
    /// Recorded as written, but the MigNode does not show it: write it again.
    WriteAgain,
}

fn observe(
    plan: &str,
    node: &str,
    view: Option<&NodeView>,
    recorded: Option<&Recorded>,
    limits: RolloutLimits,
    now: Timestamp,
    recheck: &mut impl FnMut(Timestamp),
) -> Observed {
    Observed::Step(match recorded {
        Some(Recorded { step: NodeStep::Succeeded, .. }) => NodeStep::Succeeded,
        _ => {
            let Some(view) = view else {
                return Observed::Step(NodeStep::Failed(format!(
                    "MigNode {node} no longer exists (is the node agent still running there?)"
                )));
            };
            if view.spec_plan.as_deref() != Some(plan) {
                let Some(Recorded { step: NodeStep::Applying, started_at }) = recorded else {
                    return Observed::Step(NodeStep::Pending(None));
                };
                // Second precision: both times come from the same clock reading, written as
                // RFC 3339 seconds.
                let later_write = match (view.spec_written_at, started_at) {
                    (Some(w), Some(s)) => w.as_second() > s.as_second(),
                    _ => false,
                };
                return match (&view.spec_plan, later_write) {
                    (Some(other), true) => Observed::Step(NodeStep::Failed(format!(
                        "its MigNode spec was overwritten by plan {other} while applying"
                    ))),
                    _ => Observed::WriteAgain,
                };
            }
            converging(view, limits, now, recheck)
        }
    })
}

fn converging(
    view: &NodeView,
    limits: RolloutLimits,
    now: Timestamp,
    recheck: &mut impl FnMut(Timestamp),
) -> NodeStep {
    if view.observed_generation == Some(view.generation) {
        match &view.agent {
            AgentState::Ready => return NodeStep::Succeeded,
            AgentState::Failed(message) => return NodeStep::Failed(message.clone()),
            AgentState::Working(_) => {}
        }
    }
    if let (Some(timeout), Some(written)) = (limits.node_timeout, view.spec_written_at) {
        let deadline = add(written, timeout);
        if deadline <= now {
            return NodeStep::Failed(format!(
                "did not reach its target within {}s of the spec being written ({})",
                timeout.as_secs(),
                view.busy_reason()
            ));
        }
        recheck(deadline);
    }
    NodeStep::Applying
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    let span = jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX);
    t.checked_add(span).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "pool-20250101-000000-abc123";

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn limits(max: u32) -> RolloutLimits {
        RolloutLimits {
            max_nodes_reconfiguring: max,
            stabilisation: Duration::from_secs(600),
            node_timeout: None,
        }
    }

    fn ready(spec_plan: Option<&str>, generation: i64, written: Option<i64>) -> NodeView {
        NodeView {
            spec_plan: spec_plan.map(String::from),
            generation,
            observed_generation: Some(generation),
            agent: AgentState::Ready,
            spec_written_at: written.map(t),
        }
    }

    fn written_for_plan(working: bool) -> NodeView {
        NodeView {
            spec_plan: Some(PLAN.into()),
            generation: 2,
            observed_generation: Some(if working { 2 } else { 1 }),
            agent: AgentState::Working("Draining".into()),
            spec_written_at: Some(t(1000)),
        }
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn writes_one_node_at_a_time_in_plan_order() {
        let views = BTreeMap::from([("a".into(), ready(None, 1, None)), ("b".into(), ready(None, 1, None))]);
        let d = next_step(PLAN, &names(&["a", "b"]), &views, &BTreeMap::new(), limits(1), t(1000));
        assert_eq!(d.write, names(&["a"]));
        assert_eq!(d.outcome, PlanProgress::Applying);
        assert_eq!(d.nodes[0].1, NodeStep::Applying);
        let NodeStep::Pending(Some(why)) = &d.nodes[1].1 else { panic!("b should wait: {:?}", d.nodes[1]) };
        assert!(why.contains("at most 1"), "{why}");
    }

    #[test]
    fn next_node_starts_only_after_the_first_converged() {
        let mut views =
            BTreeMap::from([("a".into(), written_for_plan(true)), ("b".into(), ready(None, 1, None))]);
        let d = next_step(PLAN, &names(&["a", "b"]), &views, &BTreeMap::new(), limits(1), t(1010));
        assert!(d.write.is_empty(), "a still reconfiguring: {d:?}");

        views.insert("a".into(), ready(Some(PLAN), 2, Some(1000)));
        let d = next_step(PLAN, &names(&["a", "b"]), &views, &BTreeMap::new(), limits(1), t(1020));
        assert_eq!(d.write, names(&["b"]));
        assert_eq!(d.nodes[0].1, NodeStep::Succeeded);
    }

    #[test]
    fn wider_limits_start_several_nodes_and_count_nodes_busy_for_other_reasons() {
        let views = BTreeMap::from([
            ("a".into(), ready(None, 1, None)),
            ("b".into(), ready(None, 1, None)),
            ("c".into(), ready(None, 1, None)),
            (
                "other".into(),
                NodeView { agent: AgentState::Failed("NVML error".into()), ..ready(None, 3, None) },
            ),
        ]);
        let d = next_step(PLAN, &names(&["a", "b", "c"]), &views, &BTreeMap::new(), limits(3), t(0));
        assert_eq!(d.write, names(&["a", "b"]), "one of three slots is taken by the failed node");
    }

    #[test]
    fn all_nodes_converged_means_succeeded() {
        let views = BTreeMap::from([
            ("a".into(), ready(Some(PLAN), 2, Some(0))),
            ("b".into(), ready(Some(PLAN), 5, Some(0))),
        ]);
        let d = next_step(PLAN, &names(&["a", "b"]), &views, &BTreeMap::new(), limits(1), t(100));
        assert_eq!(d.outcome, PlanProgress::Succeeded);
        assert!(d.write.is_empty());
    }

    #[test]
    fn an_agent_failure_fails_the_plan_with_its_words_and_starts_nothing_else() {
        let mut failed = written_for_plan(true);
        failed.agent =
            AgentState::Failed("pod ml/db has geometer.dev/do-not-disrupt; drain timed out".into());
        let views = BTreeMap::from([("a".into(), failed), ("b".into(), ready(None, 1, None))]);
        let d = next_step(PLAN, &names(&["a", "b"]), &views, &BTreeMap::new(), limits(2), t(1100));
        assert_eq!(
            d.outcome,
            PlanProgress::Failed("node a: pod ml/db has geometer.dev/do-not-disrupt; drain timed out".into())
        );
        assert!(d.write.is_empty());
    }

    #[test]
    fn a_failure_from_an_older_generation_is_not_this_plans_failure() {
        let mut stale = written_for_plan(false);
        stale.agent = AgentState::Failed("old failure".into());
        let views = BTreeMap::from([("a".into(), stale)]);
        let d = next_step(PLAN, &names(&["a"]), &views, &BTreeMap::new(), limits(1), t(1100));
        assert_eq!(d.outcome, PlanProgress::Applying);
    }

    #[test]
    fn stabilisation_window_delays_a_recently_changed_node_and_says_when() {
        let views = BTreeMap::from([("a".into(), ready(Some("older-plan"), 4, Some(1000)))]);
        let d = next_step(PLAN, &names(&["a"]), &views, &BTreeMap::new(), limits(1), t(1300));
        assert!(d.write.is_empty());
        assert_eq!(d.recheck_at, Some(t(1600)));
        let NodeStep::Pending(Some(why)) = &d.nodes[0].1 else { panic!() };
        assert!(why.contains("stabilisation"), "{why}");

        let d = next_step(PLAN, &names(&["a"]), &views, &BTreeMap::new(), limits(1), t(1600));
        assert_eq!(d.write, names(&["a"]));
    }

    #[test]
    fn a_node_that_never_converges_times_out() {
        let views = BTreeMap::from([("a".into(), written_for_plan(true))]);
        let lim = RolloutLimits { node_timeout: Some(Duration::from_secs(300)), ..limits(1) };
        let d = next_step(PLAN, &names(&["a"]), &views, &BTreeMap::new(), lim, t(1200));
        assert_eq!(d.outcome, PlanProgress::Applying);
        assert_eq!(d.recheck_at, Some(t(1300)));
        let d = next_step(PLAN, &names(&["a"]), &views, &BTreeMap::new(), lim, t(1300));
        let PlanProgress::Failed(why) = d.outcome else { panic!("{d:?}") };
        assert!(why.starts_with("node a: did not reach its target within 300s"), "{why}");
    }

    #[test]
    fn a_missing_mignode_or_a_takeover_fails_the_plan() {
        let d = next_step(PLAN, &names(&["gone"]), &BTreeMap::new(), &BTreeMap::new(), limits(1), t(0));
        assert!(
            matches!(d.outcome, PlanProgress::Failed(ref w) if w.contains("MigNode gone no longer exists"))
        );

        let views = BTreeMap::from([("a".into(), ready(Some("other-plan"), 3, Some(200)))]);
        let recorded = BTreeMap::from([("a".to_string(), applying_since(100))]);
        let d = next_step(PLAN, &names(&["a"]), &views, &recorded, limits(1), t(5000));
        assert!(
            matches!(d.outcome, PlanProgress::Failed(ref w) if w.contains("overwritten by plan other-plan")),
            "{d:?}"
        );
    }

    fn applying_since(secs: i64) -> Recorded {
        Recorded { step: NodeStep::Applying, started_at: Some(t(secs)) }
    }

    #[test]
    fn a_recorded_write_the_mignode_does_not_show_yet_is_written_again_without_a_second_slot() {
        // The plan's status says a was written at 100, but the MigNode cache still shows the
        // spec from before (written at 50): either the cache lags or the write was lost.
        let views = BTreeMap::from([
            ("a".into(), ready(Some("older-plan"), 3, Some(50))),
            ("b".into(), ready(None, 1, None)),
        ]);
        let recorded = BTreeMap::from([("a".to_string(), applying_since(100))]);
        let lim = RolloutLimits { stabilisation: Duration::ZERO, ..limits(1) };
        let d = next_step(PLAN, &names(&["a", "b"]), &views, &recorded, lim, t(110));
        assert_eq!(d.write, names(&["a"]));
        assert_eq!(d.outcome, PlanProgress::Applying);
        assert!(matches!(d.nodes[1].1, NodeStep::Pending(Some(_))), "b waits: a holds the only slot");
    }

    #[test]
    fn a_node_recorded_succeeded_stays_succeeded_after_a_later_plan_took_it() {
        let views = BTreeMap::from([("a".into(), ready(Some("later-plan"), 3, Some(0)))]);
        let recorded =
            BTreeMap::from([("a".to_string(), Recorded { step: NodeStep::Succeeded, started_at: None })]);
        let d = next_step(PLAN, &names(&["a"]), &views, &recorded, limits(1), t(5000));
        assert_eq!(d.outcome, PlanProgress::Succeeded);
    }
}
