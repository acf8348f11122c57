//! DynamicMIG compaction in the controller's pass ([`crate::dra::compaction`] decides): a round
//! begins the compactions its policy allows for the claims fragmentation blocks, and every pass
//! ends those that are done and keeps the DeviceTaintRules Geometer made to those under way.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use geometer_api::MigPolicy;
use geometer_solver::PodKey;
use jiff::Timestamp;
use kube::Resource;

use super::{Controller, Seen};
use crate::adapter::dynamic_mig::{dynamic_nodes, Blocked, NodeGpus};
use crate::adapter::nodes::planner_node;
use crate::adapter::pods::{bound_node, key, planner_pod};
use crate::adapter::PodView;
use crate::dra::compaction;
use crate::dra::holders::holders;
use crate::runtime::actions::{Action, EventSpec};

impl Controller {
    /// Begins the compactions `policy` allows for `blocked` on its `managed` nodes: each one's
    /// DeviceTaintRules first, and only once they all exist the MigNode's request (which its
    /// agent acts on) and an event on the waiting pod.
    pub(super) async fn start_compactions(
        &self,
        policy: &MigPolicy,
        managed: &[String],
        blocked: &[Blocked],
        seen: &Seen,
        now: Timestamp,
    ) {
        if self.caches.taint_rules().is_none() || !compaction::compacts(policy) || blocked.is_empty() {
            return;
        }
        let holders = holders(&seen.dra);
        let nodes = dynamic_nodes(&seen.dra, &holders);
        let ours: Vec<&NodeGpus> = nodes.iter().filter(|n| managed.contains(&n.node)).collect();
        let under_way = compaction::UnderWay {
            nodes: ours
                .iter()
                .filter(|n| seen.mignodes.get(&n.node).is_some_and(|m| m.spec.compaction.is_some()))
                .map(|n| n.node.clone())
                .collect(),
            pods: seen
                .mignodes
                .values()
                .filter_map(|m| PodKey::parse(&m.spec.compaction.as_ref()?.for_pod).ok())
                .collect(),
        };
        let pods: HashMap<PodKey, &PodView> = seen.pods.iter().map(|p| (key(p), &**p)).collect();
        let by_key: HashMap<PodKey, &Arc<PodView>> = seen.pods.iter().map(|p| (key(p), p)).collect();
        let eligible = |pod: &PodKey, node: &str| eligible(seen, by_key.get(pod).copied(), node, now);
        for start in compaction::start(policy, &ours, &holders, &pods, blocked, &under_way, &eligible, now) {
            let rules: Vec<Action> =
                start.rules.into_iter().map(|r| Action::CreateTaintRule(Box::new(r))).collect();
            let count = rules.len();
            let made = self.executor.run_group(rules).await;
            if made.done != count {
                tracing::warn!(node = %start.node, "not every DeviceTaintRule of the compaction could be made; it is not begun");
                continue;
            }
            tracing::info!(node = %start.node, pod = %start.for_pod, "compaction begun");
            let regarding = pods.get(&start.for_pod).map(|p| p.object_ref(&()));
            let mut group = vec![Action::NodeCompaction {
                node: start.node,
                compaction: Some(Box::new(start.compaction)),
            }];
            group.extend(regarding.map(|regarding| {
                Action::Event(EventSpec {
                    regarding,
                    related: None,
                    warning: false,
                    reason: "CompactionStarted",
                    action: "Compact",
                    note: start.note,
                })
            }));
            self.executor.run_group(group).await;
        }
    }

    /// Ends the compactions that are done (request cleared first, so the agent evicts no
    /// more), makes again a missing rule of one under way, and deletes every other rule
    /// Geometer made: a killed replica's too.
    pub(super) async fn tend_compactions(&self, seen: &Seen, now: Timestamp) {
        let Some(rules) = self.caches.taint_rules() else { return };
        if rules.is_empty() && seen.mignodes.values().all(|m| m.spec.compaction.is_none()) {
            return;
        }
        let holders = holders(&seen.dra);
        let nodes = dynamic_nodes(&seen.dra, &holders);
        let waiting: BTreeSet<PodKey> =
            seen.pods.iter().filter(|p| bound_node(p).is_none()).map(|p| key(p)).collect();
        let tend = compaction::tend(&seen.mignodes, &seen.policies, &nodes, &holders, &waiting, &rules, now);
        for (node, why) in tend.end {
            tracing::info!(node = %node, why = %why, "compaction ended");
            let mut group = vec![Action::NodeCompaction { node: node.clone(), compaction: None }];
            group.extend(seen.mignodes.get(&node).map(|m| {
                Action::Event(EventSpec {
                    regarding: m.object_ref(&()),
                    related: None,
                    warning: false,
                    reason: "CompactionEnded",
                    action: "Compact",
                    note: format!("compaction ended: {why}"),
                })
            }));
            self.executor.run_group(group).await;
        }
        if !tend.restore.is_empty() {
            self.executor
                .run_group(tend.restore.into_iter().map(|r| Action::CreateTaintRule(Box::new(r))).collect())
                .await;
        }
        for name in tend.delete {
            self.executor.run_group(vec![Action::DeleteTaintRule(name)]).await;
        }
    }
}

/// Whether `pod` could run on `node` as the planner reads both (node selector, required node
/// affinity, tolerations, CPU and memory), MIG devices aside; one that cannot be read could not.
fn eligible(seen: &Seen, pod: Option<&Arc<PodView>>, node: &str, now: Timestamp) -> bool {
    let (Some(pod), Some(node)) = (pod, seen.nodes.get(node)) else { return false };
    let requests = seen.requests.get(pod).map(|r| (**r).clone()).unwrap_or_default();
    let (Ok(pod), Ok(node)) = (planner_pod(pod, &requests, &[], now), planner_node(node, &BTreeMap::new()))
    else {
        return false;
    };
    geometer_solver::snapshot::eligibility(&pod, &node).is_ok()
}
