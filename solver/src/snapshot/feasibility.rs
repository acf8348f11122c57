//! Could a pod land on a node, apart from MIG slices? The scheduler's rules for node selector,
//! required node affinity, taints and tolerations, cordons and CPU/memory fit.
//!
//! The planner only creates slices where a pod could actually land, so these rules follow the
//! kube-scheduler's (NodeUnschedulable, NodeAffinity, TaintToleration, NodeResourcesFit).

use std::fmt;

use super::{
    Node, NodeSelectorTerm, Operator, Pod, Requirement, Taint, TaintEffect, Toleration, TolerationOperator,
};

/// The first rule that keeps a pod off a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ineligible {
    /// The node is cordoned and the pod does not tolerate it.
    Unschedulable,
    /// `nodeSelector` key=value that the node's labels lack.
    NodeSelector {
        key: String,
        value: String,
    },
    /// No term of the required node affinity matches.
    Affinity,
    /// A NoSchedule/NoExecute taint the pod does not tolerate.
    Taint(Taint),
    Cpu {
        requested: u64,
        free: u64,
    },
    Memory {
        requested: u64,
        free: u64,
    },
}

impl Ineligible {
    /// Short name of the constraint, used to group reasons across nodes.
    pub fn constraint(&self) -> &'static str {
        self.borrowed().constraint()
    }

    fn borrowed(&self) -> Failure<'_> {
        match self {
            Ineligible::Unschedulable => Failure::Unschedulable,
            Ineligible::NodeSelector { key, value } => Failure::NodeSelector { key, value },
            Ineligible::Affinity => Failure::Affinity,
            Ineligible::Taint(t) => Failure::Taint(t),
            &Ineligible::Cpu { requested, free } => Failure::Cpu { requested, free },
            &Ineligible::Memory { requested, free } => Failure::Memory { requested, free },
        }
    }
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ineligible::Unschedulable => write!(f, "node is cordoned (spec.unschedulable)"),
            Ineligible::NodeSelector { key, value } => write!(f, "nodeSelector {key}={value} does not match"),
            Ineligible::Affinity => write!(f, "required node affinity matches no term"),
            Ineligible::Taint(t) => match &t.value {
                Some(v) => write!(f, "taint {}={}:{:?} not tolerated", t.key, v, t.effect),
                None => write!(f, "taint {}:{:?} not tolerated", t.key, t.effect),
            },
            Ineligible::Cpu { requested, free } => {
                write!(f, "cpu: requests {requested}m, node has {free}m free")
            }
            Ineligible::Memory { requested, free } => {
                write!(f, "memory: requests {requested} bytes, node has {free} bytes free")
            }
        }
    }
}

/// Whether `pod` may be scheduled on `node`, MIG slices aside.
pub fn eligibility(pod: &Pod, node: &Node) -> Result<(), Ineligible> {
    eligibility_after_evictions(pod, node, Freeable::default())
}

/// CPU (millicores) and memory (bytes) that evicting pods could free on a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freeable {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// [`eligibility`] where evictions could give `freeable` back to the node: a planner that may
/// move pods off a node counts what they request as free there (whether it moves them is
/// its decision).
pub fn eligibility_after_evictions(pod: &Pod, node: &Node, freeable: Freeable) -> Result<(), Ineligible> {
    first_failure(pod, node, freeable).map_or(Ok(()), |f| Err(f.owned()))
}

/// The first rule that keeps a pod off a node, borrowed from both: the planner checks every
/// template of pods against every node, so a failing check allocates nothing (3 in 4 nodes of
/// a cluster fail a zone selector). [`Failure::owned`] is the reason as users read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure<'a> {
    Unschedulable,
    NodeSelector { key: &'a str, value: &'a str },
    Affinity,
    Taint(&'a Taint),
    Cpu { requested: u64, free: u64 },
    Memory { requested: u64, free: u64 },
}

impl Failure<'_> {
    pub(crate) fn constraint(&self) -> &'static str {
        match self {
            Failure::Unschedulable => "node cordoned",
            Failure::NodeSelector { .. } => "nodeSelector",
            Failure::Affinity => "required node affinity",
            Failure::Taint(_) => "untolerated taint",
            Failure::Cpu { .. } => "cpu",
            Failure::Memory { .. } => "memory",
        }
    }

    pub(crate) fn owned(self) -> Ineligible {
        match self {
            Failure::Unschedulable => Ineligible::Unschedulable,
            Failure::NodeSelector { key, value } => {
                Ineligible::NodeSelector { key: key.to_string(), value: value.to_string() }
            }
            Failure::Affinity => Ineligible::Affinity,
            Failure::Taint(t) => Ineligible::Taint(t.clone()),
            Failure::Cpu { requested, free } => Ineligible::Cpu { requested, free },
            Failure::Memory { requested, free } => Ineligible::Memory { requested, free },
        }
    }
}

pub(crate) fn first_failure<'a>(pod: &'a Pod, node: &'a Node, freeable: Freeable) -> Option<Failure<'a>> {
    rule_failure(pod, node).or_else(|| resource_failure(pod, node, freeable))
}

/// The first of the rules that read only the node's cordon, labels, name and taints (so give
/// one answer on nodes alike in those: [`super::NodeKinds`]).
pub(crate) fn rule_failure<'a>(pod: &'a Pod, node: &'a Node) -> Option<Failure<'a>> {
    if node.unschedulable && !tolerates_cordon(&pod.tolerations) {
        return Some(Failure::Unschedulable);
    }
    for (key, value) in &pod.node_selector {
        if node.labels.get(key) != Some(value) {
            return Some(Failure::NodeSelector { key, value });
        }
    }
    if !pod.affinity.is_empty() && !pod.affinity.iter().any(|term| term_matches(term, node)) {
        return Some(Failure::Affinity);
    }
    node.taints
        .iter()
        .find(|taint| taint.effect != TaintEffect::PreferNoSchedule && !tolerates(&pod.tolerations, taint))
        .map(Failure::Taint)
}

/// CPU, then memory, where the node's free amount (plus what evictions could free) is short.
pub(crate) fn resource_failure<'a>(pod: &Pod, node: &Node, freeable: Freeable) -> Option<Failure<'a>> {
    if let Some(free) = node.free_cpu_millis.map(|f| f + freeable.cpu_millis) {
        if pod.cpu_millis > free {
            return Some(Failure::Cpu { requested: pod.cpu_millis, free });
        }
    }
    if let Some(free) = node.free_memory_bytes.map(|f| f + freeable.memory_bytes) {
        if pod.memory_bytes > free {
            return Some(Failure::Memory { requested: pod.memory_bytes, free });
        }
    }
    None
}

fn tolerates_cordon(tolerations: &[Toleration]) -> bool {
    tolerates(tolerations, &cordon_taint())
}

fn cordon_taint() -> Taint {
    Taint { key: "node.kubernetes.io/unschedulable".into(), value: None, effect: TaintEffect::NoSchedule }
}

/// A term with no requirements matches nothing, as in Kubernetes.
fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        return false;
    }
    term.match_expressions.iter().all(|r| requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
        && term.match_fields.iter().all(|r| {
            let value = (r.key == "metadata.name").then_some(node.name.as_str());
            r.key == "metadata.name" && requirement_matches(r, value)
        })
}

fn requirement_matches(r: &Requirement, value: Option<&str>) -> bool {
    match r.operator {
        Operator::In => value.is_some_and(|v| r.values.iter().any(|x| x == v)),
        Operator::NotIn => value.is_none_or(|v| !r.values.iter().any(|x| x == v)),
        Operator::Exists => value.is_some(),
        Operator::DoesNotExist => value.is_none(),
        Operator::Gt | Operator::Lt => {
            // Kubernetes requires exactly one integer value; anything else never matches.
            let (Some(v), [bound]) = (value, r.values.as_slice()) else { return false };
            let (Ok(v), Ok(bound)) = (v.parse::<i64>(), bound.parse::<i64>()) else { return false };
            if r.operator == Operator::Gt {
                v > bound
            } else {
                v < bound
            }
        }
    }
}

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| toleration_matches(t, taint))
}

fn toleration_matches(t: &Toleration, taint: &Taint) -> bool {
    if t.effect.is_some_and(|e| e != taint.effect) {
        return false;
    }
    match t.operator {
        TolerationOperator::Exists => t.key.as_deref().is_none_or(|k| k.is_empty() || k == taint.key),
        TolerationOperator::Equal => {
            t.key.as_deref() == Some(taint.key.as_str())
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node() -> Node {
        Node {
            name: "gpu-a".into(),
            labels: BTreeMap::from([("pool".into(), "a100".into()), ("rack".into(), "7".into())]),
            free_cpu_millis: Some(4000),
            free_memory_bytes: Some(8 << 30),
            ..Node::default()
        }
    }

    fn pod() -> Pod {
        Pod { namespace: "ml".into(), name: "train".into(), cpu_millis: 1000, ..Pod::default() }
    }

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement { key: key.into(), operator, values: values.iter().map(|v| v.to_string()).collect() }
    }

    fn term(exprs: Vec<Requirement>) -> NodeSelectorTerm {
        NodeSelectorTerm { match_expressions: exprs, match_fields: vec![] }
    }

    #[test]
    fn node_selector_must_match_every_label() {
        let mut p = pod();
        p.node_selector.insert("pool".into(), "a100".into());
        assert_eq!(eligibility(&p, &node()), Ok(()));
        p.node_selector.insert("zone".into(), "b".into());
        assert_eq!(
            eligibility(&p, &node()),
            Err(Ineligible::NodeSelector { key: "zone".into(), value: "b".into() })
        );
    }

    #[test]
    fn affinity_terms_are_ored_and_expressions_anded() {
        let mut p = pod();
        p.affinity = vec![
            term(vec![req("pool", Operator::In, &["h100"])]),
            term(vec![req("pool", Operator::In, &["a100", "a30"]), req("rack", Operator::Gt, &["5"])]),
        ];
        assert_eq!(eligibility(&p, &node()), Ok(()));
        p.affinity[1].match_expressions.push(req("rack", Operator::Lt, &["7"]));
        assert_eq!(eligibility(&p, &node()), Err(Ineligible::Affinity));
    }

    #[test]
    fn affinity_operators_follow_kubernetes() {
        let n = node();
        let check = |r: Requirement| term_matches(&term(vec![r]), &n);
        assert!(check(req("pool", Operator::NotIn, &["h100"])));
        assert!(!check(req("pool", Operator::NotIn, &["a100"])));
        assert!(check(req("missing", Operator::NotIn, &["x"])));
        assert!(check(req("pool", Operator::Exists, &[])));
        assert!(!check(req("missing", Operator::Exists, &[])));
        assert!(check(req("missing", Operator::DoesNotExist, &[])));
        assert!(!check(req("rack", Operator::Gt, &["7"])));
        assert!(!check(req("pool", Operator::Gt, &["1"])), "non-integer label never matches Gt");
        assert!(!check(req("rack", Operator::Lt, &["9", "10"])), "Lt needs exactly one value");
        assert!(!term_matches(&NodeSelectorTerm::default(), &n), "an empty term matches nothing");
        let by_name = NodeSelectorTerm {
            match_expressions: vec![],
            match_fields: vec![req("metadata.name", Operator::In, &["gpu-a"])],
        };
        assert!(term_matches(&by_name, &n));
    }

    #[test]
    fn taints_need_tolerations_except_prefer_no_schedule() {
        let mut n = node();
        n.taints.push(Taint {
            key: "nvidia.com/gpu".into(),
            value: Some("present".into()),
            effect: TaintEffect::NoSchedule,
        });
        n.taints.push(Taint { key: "soft".into(), value: None, effect: TaintEffect::PreferNoSchedule });
        let mut p = pod();
        assert!(matches!(eligibility(&p, &n), Err(Ineligible::Taint(t)) if t.key == "nvidia.com/gpu"));
        p.tolerations.push(Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: TolerationOperator::Equal,
            value: Some("other".into()),
            effect: None,
        });
        assert!(eligibility(&p, &n).is_err(), "Equal needs the same value");
        p.tolerations.push(Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: TolerationOperator::Exists,
            value: None,
            effect: Some(TaintEffect::NoSchedule),
        });
        assert_eq!(eligibility(&p, &n), Ok(()));
        let wildcard = Pod {
            tolerations: vec![Toleration { operator: TolerationOperator::Exists, ..Toleration::default() }],
            ..pod()
        };
        assert_eq!(eligibility(&wildcard, &n), Ok(()));
    }

    #[test]
    fn effect_of_toleration_must_match() {
        let mut n = node();
        n.taints.push(Taint { key: "k".into(), value: None, effect: TaintEffect::NoExecute });
        let mut p = pod();
        p.tolerations.push(Toleration {
            key: Some("k".into()),
            operator: TolerationOperator::Exists,
            value: None,
            effect: Some(TaintEffect::NoSchedule),
        });
        assert!(matches!(eligibility(&p, &n), Err(Ineligible::Taint(_))));
    }

    #[test]
    fn cordoned_node_is_ineligible_unless_tolerated() {
        let mut n = node();
        n.unschedulable = true;
        let mut p = pod();
        assert_eq!(eligibility(&p, &n), Err(Ineligible::Unschedulable));
        p.tolerations.push(Toleration {
            key: Some("node.kubernetes.io/unschedulable".into()),
            operator: TolerationOperator::Exists,
            value: None,
            effect: None,
        });
        assert_eq!(eligibility(&p, &n), Ok(()));
    }

    #[test]
    fn cpu_and_memory_must_fit_when_known() {
        let mut p = pod();
        p.cpu_millis = 4001;
        assert_eq!(eligibility(&p, &node()), Err(Ineligible::Cpu { requested: 4001, free: 4000 }));
        p.cpu_millis = 4000;
        p.memory_bytes = (8 << 30) + 1;
        assert!(matches!(eligibility(&p, &node()), Err(Ineligible::Memory { .. })));
        let unknown = Node { free_cpu_millis: None, free_memory_bytes: None, ..node() };
        assert_eq!(eligibility(&p, &unknown), Ok(()));
    }
}
