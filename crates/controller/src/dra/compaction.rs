//! DynamicMIG compaction (MigPolicy `spec.dynamicMig.compact`): opening room on a GPU for a
//! claim that fragmentation blocks by moving the cheapest set of pods
//! ([`super::fragmentation::Gpu::opening_for`]).
//!
//! The order keeps it safe. DeviceTaintRules with effect `NoSchedule` (never `NoExecute`, which
//! evicts) first keep other claims off every device that draws a memory slice of the
//! placement being opened: kube-scheduler's allocator skips a device with a taint the claim
//! does not tolerate (kubernetes `staging/src/k8s.io/dynamic-resource-allocation/structured`,
//! `taintPreventsAllocation`), so the moved pods' replacements land elsewhere and the room
//! stays for the claim that needed it. Then the node's MigNode names the pods, and its agent
//! evicts them through the Eviction API under the policy's rules. The rules and the request go
//! once the opened device is allocated, the waiting pod no longer waits, or the drain timeout
//! has passed: whichever controller replica sees it, so a killed replica's rules are removed by
//! the next.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use geometer_api::do_not_disrupt::{evaluate_meta, Verdict};
use geometer_api::{Compaction, MigNode, MigPolicy, PodRef, PolicyMode};
use geometer_solver::PodKey;
use jiff::Timestamp;
use k8s_openapi::api::resource::v1::DeviceTaintRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::fragmentation::Opening;
use super::holders::Holders;
use super::stack::NVIDIA_DRIVER;
use crate::adapter::dynamic_mig::{Blocked, NodeGpus};
use crate::adapter::pod_view::PodView;

/// The taint's key on every guarded device.
pub const TAINT_KEY: &str = "geometer.dev/compaction";
/// The label on every rule Geometer makes (the controller watches only these).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "geometer");
/// The annotation naming the node whose compaction a rule guards.
pub const NODE_ANNOTATION: &str = "geometer.dev/compaction-node";
/// A pod's annotation: what moving it costs (a whole number); unset, 1 plus a minute's worth of
/// its longest readiness delay.
pub const MOVE_COST_ANNOTATION: &str = "geometer.dev/move-cost";

/// Time a compaction is given beyond the policy's drain timeout for the claim to be allocated.
const ALLOCATION_GRACE_SECONDS: i64 = 60;

/// A rule no compaction under way needs is kept this long after it was made: a compaction's
/// rules are made just before its MigNode's request, which a pass may not see yet.
const NEW_RULE_SECONDS: i64 = 30;

/// A compaction to begin: its rules first, then the MigNode's request.
#[derive(Debug, Clone)]
pub struct Start {
    pub node: String,
    pub rules: Vec<DeviceTaintRule>,
    pub compaction: Compaction,
    /// The waiting pod and what is moved for it, for its event.
    pub for_pod: PodKey,
    pub note: String,
}

/// Whether `policy` lets Geometer move pods on its DynamicMIG nodes.
pub fn compacts(policy: &MigPolicy) -> bool {
    let spec = &policy.spec;
    spec.dynamic_mig.as_ref().is_some_and(|d| d.compact)
        && spec.mode == PolicyMode::Auto
        && spec.disruption.eviction_allowed
}

/// Whether a pod (by key) could run on a node (by name), MIG devices aside: its node selector,
/// required node affinity and tolerations against the node's labels and taints.
pub(crate) type Eligible<'a> = &'a dyn Fn(&PodKey, &str) -> bool;

/// The compactions under way: the nodes compacting (of the policy at hand) and the pods room
/// is being opened for (anywhere).
#[derive(Debug, Default)]
pub struct UnderWay {
    pub nodes: BTreeSet<String>,
    pub pods: BTreeSet<PodKey>,
}

/// The compactions `policy` begins now: for each pending pod whose claim fragmentation blocks
/// (`blocked`) and for which no room is being opened yet, the cheapest opening on a managed
/// node with no compaction under way that the pod could run on (`eligible`), within the
/// policy's `maxNodesReconfiguring` (nodes compacting already count).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    policy: &MigPolicy,
    nodes: &[&NodeGpus],
    holders: &Holders,
    pods: &HashMap<PodKey, &PodView>,
    blocked: &[Blocked],
    under_way: &UnderWay,
    eligible: Eligible<'_>,
    now: Timestamp,
) -> Vec<Start> {
    if !compacts(policy) {
        return Vec::new();
    }
    let compacting = &under_way.nodes;
    let mut budget =
        (policy.spec.disruption.max_nodes_reconfiguring as usize).saturating_sub(compacting.len());
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    let waiting = blocked.iter().filter(|b| b.by_fragmentation && !under_way.pods.contains(&b.pod));
    // A pod blocked for two profiles gets room for one at a time.
    let mut served: BTreeSet<&PodKey> = BTreeSet::new();
    for b in waiting {
        if budget == 0 {
            break;
        }
        if served.contains(&b.pod) {
            continue;
        }
        if budget == 0 {
            break;
        }
        let Some(waiting) = pods.get(&b.pod) else { continue };
        let priority = priority_of(waiting);
        let mut best: Option<(&NodeGpus, Opening)> = None;
        let open = |n: &&&NodeGpus| {
            !compacting.contains(&n.node) && !taken.contains(n.node.as_str()) && eligible(&b.pod, &n.node)
        };
        for node in nodes.iter().filter(open) {
            let held = holders.by_name.get(&node.pool);
            let cost = |device: &str| {
                let holder = held?.get(device)?;
                move_cost(pods.get(holder)?, &node.node, priority, policy, now)
            };
            for gpu in &node.gpus {
                let Some(opening) = gpu.opening_for(&b.profile, &cost) else { continue };
                if best.as_ref().is_none_or(|(_, o)| opening.cost < o.cost) {
                    best = Some((*node, opening));
                }
            }
        }
        let Some((node, opening)) = best else { continue };
        let held = holders.by_name.get(&node.pool);
        let movers: Vec<(&String, &PodKey)> =
            opening.moved.iter().filter_map(|d| Some((d, held?.get(d)?))).collect();
        let evict: Vec<PodRef> = movers
            .iter()
            .filter_map(|(_, pod)| {
                let uid = pods.get(*pod)?.metadata.uid.clone()?;
                Some(PodRef { pod: pod.to_string(), uid })
            })
            .collect();
        if evict.len() != opening.moved.len() {
            continue;
        }
        let moved: Vec<String> = movers.iter().map(|(device, pod)| format!("{pod} (on {device})")).collect();
        let note = format!(
            "its claim needs a {}: moving {} on node {} so that it can have {}",
            b.profile,
            moved.join(", "),
            node.node,
            opening.device
        );
        out.push(Start {
            node: node.node.clone(),
            rules: opening.guarded.iter().map(|d| taint_rule(&node.node, &node.pool, d)).collect(),
            compaction: Compaction {
                policy: policy.metadata.name.clone().unwrap_or_default(),
                for_pod: b.pod.to_string(),
                device: opening.device.clone(),
                evict,
                started_at: Time(now),
            },
            for_pod: b.pod.clone(),
            note,
        });
        taken.insert(&node.node);
        served.insert(&b.pod);
        budget -= 1;
    }
    out
}

/// What moving `pod` costs, or `None` when it must not move for a pod of `priority`: it is not
/// running on `node`, nothing would bring it back ([`geometer_api::do_not_disrupt::comes_back`]),
/// a do-not-disrupt annotation of the policy protects it, or its priority is higher.
fn move_cost(pod: &PodView, node: &str, priority: i32, policy: &MigPolicy, now: Timestamp) -> Option<u64> {
    let spec = pod.spec.as_ref()?;
    if spec.node_name.as_deref() != Some(node) || pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    if !geometer_api::do_not_disrupt::comes_back(&pod.metadata) {
        return None;
    }
    let start = pod.status.as_ref().and_then(|s| s.start_time.as_ref());
    let keys = &policy.spec.disruption.do_not_disrupt_annotations;
    if let Verdict::Blocked(_) = evaluate_meta(&pod.metadata, start, keys, now) {
        return None;
    }
    if priority_of(pod) > priority {
        return None;
    }
    let annotated = pod.metadata.annotations.as_ref().and_then(|a| a.get(MOVE_COST_ANNOTATION));
    if let Some(cost) = annotated.and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(cost);
    }
    let delay = spec.containers.iter().filter_map(|c| c.readiness_delay_seconds()).max().unwrap_or(0);
    Some(1 + u64::from(delay.max(0).unsigned_abs()) / 60)
}

fn priority_of(pod: &PodView) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The rule that keeps claims off `device` of `pool` while `node` is compacted: one per device,
/// named after the node and the device.
pub fn taint_rule(node: &str, pool: &str, device: &str) -> DeviceTaintRule {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(node, device),
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": {NODE_ANNOTATION: node},
        },
        "spec": {
            "deviceSelector": {"driver": NVIDIA_DRIVER, "pool": pool, "device": device},
            "taint": {"key": TAINT_KEY, "effect": "NoSchedule"},
        },
    }))
    .expect("a DeviceTaintRule")
}

/// `geometer-<node>-<device>`, cut to a valid name (a hash of the whole keeps it unique).
pub fn rule_name(node: &str, device: &str) -> String {
    let name = format!("geometer-{node}-{device}");
    if name.len() <= 253 {
        return name;
    }
    let hash =
        name.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
    format!("{}-{hash:016x}", &name[..200].trim_end_matches(['-', '.']))
}

/// What a pass does about the compactions under way and the rules Geometer made.
#[derive(Debug, Default)]
pub struct Tend {
    /// Nodes whose compaction ends, with why.
    pub end: Vec<(String, String)>,
    /// Rules to delete: their compaction ended, or none is under way on their node.
    pub delete: Vec<String>,
    /// Rules of a compaction under way that are missing (deleted by someone): made again.
    pub restore: Vec<DeviceTaintRule>,
}

/// The compactions under way (MigNodes with `spec.compaction`), each ended when its device is
/// allocated, its pod no longer waits, its policy no longer compacts, or its time is up; the
/// rules Geometer made (`rules`) kept only for those that go on.
pub(crate) fn tend(
    mignodes: &BTreeMap<String, Arc<MigNode>>,
    policies: &[Arc<MigPolicy>],
    nodes: &[NodeGpus],
    holders: &Holders,
    waiting: &BTreeSet<PodKey>,
    rules: &[Arc<DeviceTaintRule>],
    now: Timestamp,
) -> Tend {
    let mut out = Tend::default();
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for (name, mignode) in mignodes {
        let Some(c) = &mignode.spec.compaction else { continue };
        let node = nodes.iter().find(|n| &n.node == name);
        let policy = policies.iter().find(|p| p.metadata.name.as_deref() == Some(c.policy.as_str()));
        let allocated =
            node.is_some_and(|n| holders.by_name.get(&n.pool).is_some_and(|h| h.contains_key(&c.device)));
        let timeout = policy.map_or(600, |p| i64::from(p.spec.disruption.drain_timeout_seconds))
            + ALLOCATION_GRACE_SECONDS;
        let waited = now.as_second() - c.started_at.0.as_second();
        let ended = if allocated {
            Some(format!("{} is allocated", c.device))
        } else if !PodKey::parse(&c.for_pod).is_ok_and(|k| waiting.contains(&k)) {
            Some(format!("{} no longer waits", c.for_pod))
        } else if !policy.is_some_and(|p| compacts(p)) {
            Some(format!("MigPolicy {} no longer compacts", c.policy))
        } else if node.is_none() {
            Some(format!("node {name} is no longer a DynamicMIG node"))
        } else if waited > timeout {
            Some(format!("{} was not allocated within {timeout} s", c.device))
        } else {
            None
        };
        if let Some(why) = ended {
            out.end.push((name.clone(), why));
            continue;
        }
        let Some(node) = node else { continue };
        let guards = node.gpus.iter().find_map(|g| g.guards(&c.device)).unwrap_or_default();
        for device in guards {
            let rule = rule_name(name, &device);
            if !rules.iter().any(|r| r.metadata.name.as_deref() == Some(rule.as_str())) {
                out.restore.push(taint_rule(name, &node.pool, &device));
            }
            wanted.insert(rule);
        }
    }
    let settled = |r: &DeviceTaintRule| {
        let made = r.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second());
        now.as_second() - made > NEW_RULE_SECONDS
    };
    out.delete = rules
        .iter()
        .filter(|r| settled(r))
        .filter_map(|r| r.metadata.name.clone())
        .filter(|n| !wanted.contains(n))
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::fragmentation::tests::h100_slice;

    fn policy(compact: bool) -> MigPolicy {
        serde_json::from_value(json!({
            "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "pool"},
            "spec": {"mode": "Auto", "disruption": {"evictionAllowed": true}, "dynamicMig": {"compact": compact}},
        }))
        .unwrap()
    }

    /// A pod of ReplicaSet `name`.
    fn pod(name: &str, node: Option<&str>, annotations: &[(&str, &str)]) -> PodView {
        let owners = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": "rs", "controller": true}]);
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"), "ownerReferences": owners,
                "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        }))
        .unwrap()
    }

    /// The driver's issue tracker's H100: 1g.10gb pods at 0, 1 and 5 on node n1.
    fn fragmented(annotations: &[(&str, &str)]) -> (NodeGpus, Holders, Vec<PodView>) {
        let slices = [Arc::new(h100_slice("n1"))];
        let held = [("gpu-0-mig-1g10gb-0", "a"), ("gpu-0-mig-1g10gb-1", "b"), ("gpu-0-mig-1g10gb-5", "c")];
        let mut holders = Holders::default();
        let by_name = holders.by_name.entry("n1".into()).or_default();
        for (device, pod) in held {
            by_name.insert(device.into(), PodKey::new("ml", pod));
        }
        let gpus = crate::dra::fragmentation::of_pool(&slices, &|d| held.iter().any(|(h, _)| *h == d));
        let node = NodeGpus { node: "n1".into(), pool: "n1".into(), gpus };
        let mut pods: Vec<PodView> = ["a", "b"].iter().map(|p| pod(p, Some("n1"), &[])).collect();
        pods.push(pod("c", Some("n1"), annotations));
        pods.push(pod("train", None, &[]));
        (node, holders, pods)
    }

    fn blocked() -> Vec<Blocked> {
        vec![Blocked {
            pod: PodKey::new("ml", "train"),
            profile: "3g.40gb".into(),
            by_fragmentation: true,
            why: String::new(),
        }]
    }

    fn started_where(annotations: &[(&str, &str)], compact: bool, eligible: Eligible<'_>) -> Vec<Start> {
        let (node, holders, pods) = fragmented(annotations);
        let by_key: HashMap<PodKey, &PodView> =
            pods.iter().map(|p| (crate::adapter::pods::key(p), p)).collect();
        let none = UnderWay::default();
        start(
            &policy(compact),
            &[&node],
            &holders,
            &by_key,
            &blocked(),
            &none,
            eligible,
            Timestamp::UNIX_EPOCH,
        )
    }

    fn started(annotations: &[(&str, &str)], compact: bool) -> Vec<Start> {
        started_where(annotations, compact, &|_, _| true)
    }

    #[test]
    fn a_blocked_claim_gets_the_cheapest_opening_with_its_placement_guarded() {
        let starts = started(&[], true);
        assert_eq!(starts.len(), 1);
        let s = &starts[0];
        assert_eq!(s.compaction.device, "gpu-0-mig-3g40gb-4");
        assert_eq!(s.compaction.evict, [PodRef { pod: "ml/c".into(), uid: "uid-c".into() }]);
        assert_eq!(s.compaction.for_pod, "ml/train");
        let guarded: Vec<&str> =
            s.rules.iter().filter_map(|r| r.spec.device_selector.as_ref()?.device.as_deref()).collect();
        assert!(
            guarded.contains(&"gpu-0-mig-1g10gb-4") && !guarded.contains(&"gpu-0-mig-3g40gb-4"),
            "{guarded:?}"
        );
        assert!(s.rules.iter().all(|r| r.spec.taint.effect == "NoSchedule"), "never NoExecute");
        assert!(s.note.contains("ml/c") && s.note.contains("gpu-0-mig-3g40gb-4"), "{}", s.note);
    }

    #[test]
    fn a_protected_or_costly_pod_is_moved_around_and_compaction_off_moves_nothing() {
        let protected = started(&[("karpenter.sh/do-not-disrupt", "true")], true);
        let evicted: Vec<&str> = protected[0].compaction.evict.iter().map(|p| p.pod.as_str()).collect();
        assert_eq!(evicted, ["ml/a", "ml/b"], "the protected pod at 5 stays; 0-3 opens");
        let costly = started(&[(MOVE_COST_ANNOTATION, "5")], true);
        assert_eq!(costly[0].compaction.device, "gpu-0-mig-3g40gb-0");
        assert!(started(&[], false).is_empty());
        assert!(started_where(&[], true, &|_, _| false).is_empty(), "not for a pod that could not run there");
    }

    #[test]
    fn a_compaction_ends_once_its_device_is_allocated_and_its_rules_go_with_it() {
        let (node, mut holders, _) = fragmented(&[]);
        let s = started(&[], true).remove(0);
        let mut mignode = MigNode::new("n1", Default::default());
        mignode.spec.compaction = Some(s.compaction.clone());
        let mignodes = BTreeMap::from([("n1".to_string(), Arc::new(mignode))]);
        let policies = [Arc::new(policy(true))];
        let waiting = BTreeSet::from([PodKey::new("ml", "train")]);
        let rules: Vec<Arc<DeviceTaintRule>> = s.rules.iter().cloned().map(Arc::new).collect();
        // Ten minutes after the compaction began, within its time.
        let now = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(600);
        let made_ago = |seconds: i64| {
            let mut rule = taint_rule("n2", "n2", "gpu-0-mig-1g10gb-0");
            rule.metadata.creation_timestamp = Some(Time(now - jiff::SignedDuration::from_secs(seconds)));
            Arc::new(rule)
        };
        let mut with_new = rules.clone();
        with_new.push(made_ago(5));
        let kept =
            tend(&mignodes, &policies, std::slice::from_ref(&node), &holders, &waiting, &with_new, now);
        assert!(kept.delete.is_empty(), "a rule just made may be of a request not seen yet: {kept:?}");
        let mut with_stale = rules.clone();
        with_stale.push(made_ago(120));
        let going =
            tend(&mignodes, &policies, std::slice::from_ref(&node), &holders, &waiting, &with_stale, now);
        assert!(going.end.is_empty() && going.restore.is_empty());
        assert_eq!(
            going.delete,
            ["geometer-n2-gpu-0-mig-1g10gb-0"],
            "a rule of no compaction under way goes"
        );
        let missing =
            tend(&mignodes, &policies, std::slice::from_ref(&node), &holders, &waiting, &rules[1..], now);
        assert_eq!(missing.restore.len(), 1, "a deleted rule is made again");

        holders
            .by_name
            .get_mut("n1")
            .unwrap()
            .insert("gpu-0-mig-3g40gb-4".into(), PodKey::new("ml", "train"));
        let done = tend(&mignodes, &policies, std::slice::from_ref(&node), &holders, &waiting, &rules, now);
        assert_eq!(done.end, [("n1".to_string(), "gpu-0-mig-3g40gb-4 is allocated".to_string())]);
        assert_eq!(done.delete.len(), rules.len());

        let late = now + jiff::SignedDuration::from_secs(3600);
        let timed_out = tend(
            &mignodes,
            &policies,
            std::slice::from_ref(&node),
            &Holders::default(),
            &waiting,
            &rules,
            late,
        );
        assert!(timed_out.end[0].1.contains("not allocated within"), "{:?}", timed_out.end);
    }

    #[test]
    fn a_pod_nothing_would_bring_back_is_never_moved_and_a_pod_gets_one_compaction_at_a_time() {
        let (node, holders, mut pods) = fragmented(&[]);
        pods[2].metadata.owner_references = None;
        let by_key: HashMap<PodKey, &PodView> =
            pods.iter().map(|p| (crate::adapter::pods::key(p), p)).collect();
        let begin = |under_way: &UnderWay| {
            let anywhere = |_: &PodKey, _: &str| true;
            start(
                &policy(true),
                &[&node],
                &holders,
                &by_key,
                &blocked(),
                under_way,
                &anywhere,
                Timestamp::UNIX_EPOCH,
            )
        };
        let starts = begin(&UnderWay::default());
        let evicted: Vec<&str> = starts[0].compaction.evict.iter().map(|p| p.pod.as_str()).collect();
        assert_eq!(evicted, ["ml/a", "ml/b"], "the bare pod at 5 would not come back: 0-3 opens");
        let served = UnderWay { nodes: BTreeSet::new(), pods: BTreeSet::from([PodKey::new("ml", "train")]) };
        assert!(begin(&served).is_empty(), "room is being opened for it already");
    }
}
