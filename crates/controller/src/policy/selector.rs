//! Node selectors of policies: parsing with messages a person acts on, and whether two
//! selectors can ever select the same node.
//!
//! Two policies managing one node would fight over its geometry. Nodes that match both today
//! are the urgent case; [`common_node`] also answers for nodes that do not exist yet: label
//! requirements constrain each key independently, so two selectors can select a common node
//! exactly when, key by key, their requirements can hold together. It returns the labels of such
//! a node as the example a person needs to see why.

use std::collections::{BTreeMap, BTreeSet};

use geometer_api::limits::quoted;
use geometer_api::names;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::core::{Expression, Selector};
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("spec.nodeSelector.{field}: {problem}")]
pub(crate) struct SelectorError {
    /// Where under `spec.nodeSelector`: `matchExpressions[1]`, `matchLabels["pool"]`.
    pub field: String,
    pub problem: String,
}

/// The selector as a matcher. Errors name the expression or label and what to write instead.
pub(crate) fn parse(selector: &LabelSelector) -> Result<Selector, SelectorError> {
    for (key, value) in selector.match_labels.iter().flatten() {
        if let Some(problem) = label_problem(key, [value]) {
            return Err(SelectorError { field: format!("matchLabels[{}]", quoted(key)), problem });
        }
    }
    for (index, req) in selector.match_expressions.iter().flatten().enumerate() {
        if let Some(problem) = expression_problem(req) {
            return Err(SelectorError { field: format!("matchExpressions[{index}]"), problem });
        }
    }
    Selector::try_from(selector.clone())
        .map_err(|e| SelectorError { field: "matchExpressions".into(), problem: e.to_string() })
}

fn expression_problem(req: &LabelSelectorRequirement) -> Option<String> {
    let has_values = req.values.as_ref().is_some_and(|v| !v.is_empty());
    match req.operator.as_str() {
        "In" | "NotIn" if !has_values => {
            Some(format!("operator {} on key {:?} needs at least one value", req.operator, req.key))
        }
        "Exists" | "DoesNotExist" if has_values => {
            Some(format!("operator {} on key {:?} takes no values; remove them", req.operator, req.key))
        }
        "In" | "NotIn" | "Exists" | "DoesNotExist" => label_problem(&req.key, req.values.iter().flatten()),
        other => Some(format!("unknown operator {other:?}; use In, NotIn, Exists or DoesNotExist")),
    }
}

/// Why no node label could have this key or one of these values: the API server stores a
/// MigPolicy whatever its selector holds, and such a selector would silently match nothing.
fn label_problem<'a>(key: &str, values: impl IntoIterator<Item = &'a String>) -> Option<String> {
    if let Some(problem) = names::label_key_problem(key) {
        return Some(format!("{} is not a label key: {problem}", quoted(key)));
    }
    values.into_iter().find_map(|value| {
        names::label_value_problem(value)
            .map(|problem| format!("{} is not a label value: {problem}", quoted(value)))
    })
}

/// What one key must satisfy, from all requirements on it.
#[derive(Debug, Default)]
struct KeyRule {
    present: bool,
    absent: bool,
    /// Allowed values (intersection of `In` and `=`); `None` when unconstrained.
    allowed: Option<BTreeSet<String>>,
    forbidden: BTreeSet<String>,
}

impl KeyRule {
    fn allow(&mut self, values: BTreeSet<String>) {
        self.present = true;
        self.allowed = Some(match self.allowed.take() {
            Some(before) => before.intersection(&values).cloned().collect(),
            None => values,
        });
    }

    /// A value (or absence, `None`) satisfying every requirement; `Err` when none can.
    fn example(&self) -> Result<Option<String>, ()> {
        if self.absent {
            return if self.present { Err(()) } else { Ok(None) };
        }
        if let Some(allowed) = &self.allowed {
            return allowed.difference(&self.forbidden).next().cloned().map(Some).ok_or(());
        }
        if !self.present {
            return Ok(None);
        }
        // Any value outside the forbidden set; grow a name until it is free.
        let mut value = String::from("any");
        while self.forbidden.contains(&value) {
            value.push('x');
        }
        Ok(Some(value))
    }
}

/// Labels of a node that both selectors select, or `None` when no node can match both.
pub(crate) fn common_node(a: &Selector, b: &Selector) -> Option<BTreeMap<String, String>> {
    let mut rules: BTreeMap<String, KeyRule> = BTreeMap::new();
    for expression in a.clone().into_iter().chain(b.clone()) {
        match expression {
            Expression::In(key, values) => rules.entry(key).or_default().allow(values),
            Expression::Equal(key, value) => rules.entry(key).or_default().allow(BTreeSet::from([value])),
            Expression::NotIn(key, values) => rules.entry(key).or_default().forbidden.extend(values),
            Expression::NotEqual(key, value) => {
                rules.entry(key).or_default().forbidden.insert(value);
            }
            Expression::Exists(key) => rules.entry(key).or_default().present = true,
            Expression::DoesNotExist(key) => rules.entry(key).or_default().absent = true,
        }
    }
    let mut labels = BTreeMap::new();
    for (key, rule) in rules {
        if let Some(value) = rule.example().ok()? {
            labels.insert(key, value);
        }
    }
    Some(labels)
}

/// `k=v,k2=v2`, or `(no labels)`.
pub(crate) fn describe_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "(no labels)".to_string();
    }
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use kube::core::SelectorExt;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sel(match_labels: &[(&str, &str)], exprs: &[(&str, &str, &[&str])]) -> LabelSelector {
        LabelSelector {
            match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
            match_expressions: (!exprs.is_empty()).then(|| {
                exprs
                    .iter()
                    .map(|(k, op, vs)| LabelSelectorRequirement {
                        key: k.to_string(),
                        operator: op.to_string(),
                        values: (!vs.is_empty()).then(|| vs.iter().map(|v| v.to_string()).collect()),
                    })
                    .collect()
            }),
        }
    }

    fn overlap(a: LabelSelector, b: LabelSelector) -> Option<BTreeMap<String, String>> {
        let (a, b) = (parse(&a).unwrap(), parse(&b).unwrap());
        let found = common_node(&a, &b);
        if let Some(node) = &found {
            assert!(a.matches(node) && b.matches(node), "witness {node:?} must match both");
        }
        found
    }

    #[test]
    fn different_values_of_one_key_are_disjoint() {
        assert_eq!(overlap(sel(&[("pool", "a")], &[]), sel(&[("pool", "b")], &[])), None);
        assert_eq!(
            overlap(sel(&[], &[("pool", "In", &["a", "b"])]), sel(&[], &[("pool", "In", &["c"])])),
            None
        );
        assert_eq!(overlap(sel(&[("pool", "a")], &[]), sel(&[], &[("pool", "NotIn", &["a"])])), None);
        assert_eq!(
            overlap(sel(&[], &[("gpu", "Exists", &[])]), sel(&[], &[("gpu", "DoesNotExist", &[])])),
            None
        );
    }

    #[test]
    fn selectors_on_different_keys_or_empty_ones_overlap_with_an_example() {
        assert_eq!(
            overlap(sel(&[("pool", "a")], &[]), sel(&[("gpu", "h100")], &[])),
            Some(labels(&[("gpu", "h100"), ("pool", "a")]))
        );
        assert_eq!(overlap(sel(&[], &[]), sel(&[("pool", "b")], &[])), Some(labels(&[("pool", "b")])));
        assert_eq!(
            overlap(sel(&[], &[("pool", "In", &["a", "b"])]), sel(&[], &[("pool", "NotIn", &["a"])])),
            Some(labels(&[("pool", "b")]))
        );
        assert_eq!(
            overlap(sel(&[], &[("pool", "Exists", &[])]), sel(&[], &[("pool", "NotIn", &["any"])])),
            Some(labels(&[("pool", "anyx")]))
        );
    }

    #[test]
    fn bad_expressions_are_reported_with_their_position() {
        let err = parse(&sel(&[], &[("a", "Exists", &[]), ("pool", "In", &[])])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.nodeSelector.matchExpressions[1]: operator In on key \"pool\" needs at least one value"
        );
        let err = parse(&sel(&[], &[("pool", "Equals", &["a"])])).unwrap_err();
        assert!(err.to_string().contains("unknown operator \"Equals\""), "{err}");
    }

    #[test]
    fn keys_and_values_no_node_label_can_have_are_named() {
        let err = parse(&sel(&[("pool", "a"), ("bad key", "x")], &[])).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "spec.nodeSelector.matchLabels[\"bad key\"]: \"bad key\" is not a label key: name part"
            ),
            "{err}"
        );
        let err = parse(&sel(&[("pool", "all balanced")], &[])).unwrap_err();
        assert!(err.to_string().contains("\"all balanced\" is not a label value"), "{err}");
        let err = parse(&sel(&[], &[("pool", "In", &["a", "b/c"])])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.nodeSelector.matchExpressions[0]: \"b/c\" is not a label value"),
            "{err}"
        );
        let err = parse(&sel(&[], &[("Nvidia.com/x", "Exists", &[])])).unwrap_err();
        assert!(err.to_string().contains("prefix part"), "{err}");
        assert!(parse(&sel(&[("nvidia.com/mig.config", "")], &[("team", "NotIn", &["x_1"])])).is_ok());
    }
}
