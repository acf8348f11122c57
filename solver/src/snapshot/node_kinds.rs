//! Nodes alike to the scheduling rules of a set of pods. The planner checks every template of
//! pods against every node; on a large cluster most nodes differ only in name, CPU and memory,
//! so the rules that read labels, taints and cordons are checked once per kind of node, and
//! only CPU and memory once per node.

use std::collections::{BTreeSet, HashMap};

use super::feasibility::{resource_failure, rule_failure, Failure};
use super::{Freeable, Node, Pod, Taint};

/// What [`rule_failure`] reads of a node, for the pods given: its cordon, taints, the values
/// of the labels their selectors and affinities name, and its name where an affinity matches
/// fields.
type Signature<'a> = (bool, &'a [Taint], Vec<Option<&'a str>>, Option<&'a str>);

pub(crate) struct NodeKinds {
    /// Per node, in the order given: its kind.
    kind_of: Vec<usize>,
    /// Per kind: its first node.
    first: Vec<usize>,
    /// The labels the kinds tell apart, and whether they tell node names apart.
    keys: BTreeSet<String>,
    by_name: bool,
}

impl NodeKinds {
    /// The kinds of `nodes` under the rules of `pods` (every pod whose eligibility will be
    /// asked of them).
    pub(crate) fn new<'p>(nodes: &[&Node], pods: impl IntoIterator<Item = &'p Pod>) -> NodeKinds {
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        let mut by_name = false;
        for pod in pods {
            keys.extend(pod.node_selector.keys().map(String::as_str));
            for term in &pod.affinity {
                keys.extend(term.match_expressions.iter().map(|r| r.key.as_str()));
                by_name |= !term.match_fields.is_empty();
            }
        }
        let mut kinds: HashMap<Signature<'_>, usize> = HashMap::new();
        let mut first = Vec::new();
        let kind_of = nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let labels = keys.iter().map(|k| node.labels.get(*k).map(String::as_str)).collect();
                let name = by_name.then_some(node.name.as_str());
                *kinds.entry((node.unschedulable, &node.taints, labels, name)).or_insert_with(|| {
                    first.push(n);
                    first.len() - 1
                })
            })
            .collect();
        let keys = keys.into_iter().map(str::to_string).collect();
        NodeKinds { kind_of, first, keys, by_name }
    }

    /// Whether the kinds tell apart everything `pod`'s rules read (true of every pod given to
    /// [`Self::new`]).
    fn covers(&self, pod: &Pod) -> bool {
        pod.node_selector.keys().all(|k| self.keys.contains(k))
            && pod.affinity.iter().all(|term| {
                term.match_expressions.iter().all(|r| self.keys.contains(&r.key))
                    && (self.by_name || term.match_fields.is_empty())
            })
    }

    /// The first rule that keeps `pod` off each node of `nodes` (those given to [`Self::new`],
    /// in order), as `feasibility::first_failure` finds it, the rules that read no resources
    /// checked once per kind. A pod reading a label the kinds do not tell apart (one not given
    /// to [`Self::new`]) has every node checked on its own.
    pub(crate) fn failures<'s, 'a: 's>(
        &'s self,
        pod: &'a Pod,
        nodes: &'s [&'a Node],
        freeable: &'s [Freeable],
    ) -> impl Iterator<Item = Option<Failure<'a>>> + 's {
        let by_kind = self.covers(pod);
        let mut rules: Vec<Option<Option<Failure<'a>>>> = vec![None; self.first.len()];
        nodes.iter().enumerate().map(move |(n, node)| {
            let kind = self.kind_of[n];
            let rule = match by_kind {
                true => *rules[kind].get_or_insert_with(|| rule_failure(pod, nodes[self.first[kind]])),
                false => rule_failure(pod, node),
            };
            rule.or_else(|| resource_failure(pod, node, freeable[n]))
        })
    }

    #[cfg(test)]
    fn count(&self) -> usize {
        self.first.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::snapshot::feasibility::first_failure;
    use crate::snapshot::{
        Ineligible, NodeSelectorTerm, Operator, Requirement, TaintEffect, Toleration, TolerationOperator,
    };

    fn node(name: &str, labels: &[(&str, &str)], cpu: u64) -> Node {
        Node {
            name: name.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            free_cpu_millis: Some(cpu),
            ..Node::default()
        }
    }

    fn pod_on_pool(pool: &str, cpu: u64) -> Pod {
        Pod {
            namespace: "ml".into(),
            name: "train".into(),
            cpu_millis: cpu,
            node_selector: BTreeMap::from([("pool".into(), pool.into())]),
            ..Pod::default()
        }
    }

    fn failures(kinds: &NodeKinds, pod: &Pod, nodes: &[&Node]) -> Vec<Option<Ineligible>> {
        let free = vec![Freeable::default(); nodes.len()];
        kinds.failures(pod, nodes, &free).map(|f| f.map(Failure::owned)).collect()
    }

    /// Three A100 nodes differ only in name, hostname and free CPU: one kind, yet the one short
    /// of CPU still fails on CPU, not on its kind's answer.
    #[test]
    fn nodes_alike_but_for_name_and_resources_share_a_kind() {
        let a = node("a", &[("pool", "a100"), ("kubernetes.io/hostname", "a")], 4000);
        let b = node("b", &[("pool", "a100"), ("kubernetes.io/hostname", "b")], 500);
        let c = node("c", &[("pool", "a100"), ("kubernetes.io/hostname", "c")], 4000);
        let h = node("h", &[("pool", "h100"), ("kubernetes.io/hostname", "h")], 4000);
        let cordoned = Node { unschedulable: true, ..node("z", &[("pool", "a100")], 4000) };
        let nodes = [&a, &b, &c, &h, &cordoned];
        let pod = pod_on_pool("a100", 1000);
        let kinds = NodeKinds::new(&nodes, [&pod]);
        assert_eq!(kinds.count(), 3);
        assert_eq!(
            failures(&kinds, &pod, &nodes),
            vec![
                None,
                Some(Ineligible::Cpu { requested: 1000, free: 500 }),
                None,
                Some(Ineligible::NodeSelector { key: "pool".into(), value: "a100".into() }),
                Some(Ineligible::Unschedulable),
            ]
        );
    }

    /// A label some pod's affinity reads splits kinds; the node's name does where a term
    /// matches fields.
    #[test]
    fn only_what_the_pods_read_splits_kinds() {
        let a = node("a", &[("pool", "a100"), ("rack", "1")], 4000);
        let b = node("b", &[("pool", "a100"), ("rack", "2")], 4000);
        let nodes = [&a, &b];
        let plain = pod_on_pool("a100", 0);
        assert_eq!(NodeKinds::new(&nodes, [&plain]).count(), 1);
        let term = |expressions: Vec<Requirement>, fields: Vec<Requirement>| NodeSelectorTerm {
            match_expressions: expressions,
            match_fields: fields,
        };
        let rack = Requirement { key: "rack".into(), operator: Operator::In, values: vec!["2".into()] };
        let on_rack = Pod { affinity: vec![term(vec![rack], vec![])], ..plain.clone() };
        let kinds = NodeKinds::new(&nodes, [&plain, &on_rack]);
        assert_eq!(kinds.count(), 2);
        assert_eq!(failures(&kinds, &on_rack, &nodes), vec![Some(Ineligible::Affinity), None]);
        let name =
            Requirement { key: "metadata.name".into(), operator: Operator::In, values: vec!["a".into()] };
        let on_a = Pod { affinity: vec![term(vec![], vec![name])], ..plain.clone() };
        let kinds = NodeKinds::new(&nodes, [&on_a]);
        assert_eq!(kinds.count(), 2);
        assert_eq!(failures(&kinds, &on_a, &nodes), vec![None, Some(Ineligible::Affinity)]);
    }

    /// A pod the kinds were not made for, reading a label they do not tell apart, is still
    /// answered node by node.
    #[test]
    fn a_pod_reading_other_labels_is_checked_node_by_node() {
        let a = node("a", &[("pool", "a100"), ("rack", "1")], 4000);
        let b = node("b", &[("pool", "a100"), ("rack", "2")], 4000);
        let nodes = [&a, &b];
        let kinds = NodeKinds::new(&nodes, [&pod_on_pool("a100", 0)]);
        assert_eq!(kinds.count(), 1);
        let on_rack =
            Pod { node_selector: BTreeMap::from([("rack".into(), "2".into())]), ..pod_on_pool("a100", 0) };
        assert_eq!(
            failures(&kinds, &on_rack, &nodes),
            vec![Some(Ineligible::NodeSelector { key: "rack".into(), value: "2".into() }), None]
        );
    }

    fn arb_node(i: usize) -> impl Strategy<Value = Node> {
        let labels = proptest::collection::btree_map(
            prop::sample::select(vec!["pool", "zone", "rack"]),
            prop::sample::select(vec!["x", "y"]),
            0..3,
        );
        let taint = prop::option::of(prop::sample::select(vec![
            TaintEffect::NoSchedule,
            TaintEffect::PreferNoSchedule,
            TaintEffect::NoExecute,
        ]));
        (labels, taint, any::<bool>(), 0u64..3000).prop_map(move |(labels, taint, unschedulable, cpu)| Node {
            name: format!("n{i}"),
            labels: labels.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            taints: taint
                .into_iter()
                .map(|effect| Taint { key: "gpu".into(), value: None, effect })
                .collect(),
            unschedulable,
            free_cpu_millis: Some(cpu),
            ..Node::default()
        })
    }

    fn arb_pod() -> impl Strategy<Value = Pod> {
        let selector = proptest::collection::btree_map(
            prop::sample::select(vec!["pool", "zone"]),
            prop::sample::select(vec!["x", "y"]),
            0..2,
        );
        let operator = prop::sample::select(vec![Operator::In, Operator::NotIn, Operator::Exists]);
        let affinity = prop::option::of((prop::sample::select(vec!["rack", "zone"]), operator));
        (selector, affinity, any::<bool>(), 0u64..3000).prop_map(|(selector, affinity, tolerates, cpu)| Pod {
            namespace: "ml".into(),
            name: "p".into(),
            cpu_millis: cpu,
            node_selector: selector.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            affinity: affinity
                .into_iter()
                .map(|(key, operator)| NodeSelectorTerm {
                    match_expressions: vec![Requirement {
                        key: key.into(),
                        operator,
                        values: vec!["x".into()],
                    }],
                    match_fields: Vec::new(),
                })
                .collect(),
            tolerations: if tolerates {
                vec![Toleration {
                    key: Some("gpu".into()),
                    operator: TolerationOperator::Exists,
                    value: None,
                    effect: None,
                }]
            } else {
                Vec::new()
            },
            ..Pod::default()
        })
    }

    proptest! {
        /// Checking the rules once per kind finds, on every node, what checking each node finds.
        #[test]
        fn failures_match_checking_every_node(
            nodes in (1usize..12).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>()),
            pods in proptest::collection::vec(arb_pod(), 1..4),
            freed in 0u64..1000,
        ) {
            let order: Vec<&Node> = nodes.iter().collect();
            let kinds = NodeKinds::new(&order, &pods);
            let free: Vec<Freeable> = (0..order.len() as u64)
                .map(|i| Freeable { cpu_millis: freed * (i % 2), memory_bytes: 0 })
                .collect();
            for pod in &pods {
                let grouped: Vec<_> = kinds.failures(pod, &order, &free).collect();
                let each: Vec<_> = order.iter().zip(&free).map(|(n, f)| first_failure(pod, n, *f)).collect();
                prop_assert_eq!(grouped, each);
            }
        }
    }
}
