//! Policy validation beyond what the CRD schema can say: profiles no GPU offers, and node
//! selectors of two policies that select the same node. Each problem is a sentence naming the
//! setting, the value and what to do; the controller puts them into the policy's conditions and
//! makes no plans for an invalid policy.

use geometer_solver::catalog::WHOLE;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use crate::conditions::Desired;
use crate::policy::selector::{self, common_node, describe_labels};

/// Condition types the controller sets on a MigPolicy.
pub(crate) const READY: &str = "Ready";
pub(crate) const INVALID: &str = "Invalid";
pub(crate) const OVERLAP_RISK: &str = "SelectorOverlapRisk";

/// Profiles each GPU model offers, by catalog key. Names include aliases (they are accepted);
/// suggestions use canonical names only.
#[derive(Debug, Clone, Default)]
pub struct KnownProfiles {
    models: BTreeMap<String, (Vec<String>, BTreeSet<String>)>,
}

impl KnownProfiles {
    pub fn add_model(&mut self, key: &str, canonical: Vec<String>, aliases: Vec<String>) {
        let mut names: BTreeSet<String> = canonical.iter().cloned().collect();
        names.extend(aliases);
        self.models.insert(key.to_string(), (canonical, names));
    }

    fn offers(&self, model: &str, profile: &str) -> bool {
        self.models.get(model).is_some_and(|(_, names)| names.contains(profile))
    }

    fn knows_model(&self, model: &str) -> bool {
        self.models.contains_key(model)
    }

    fn any_offers(&self, profile: &str) -> bool {
        self.models.values().any(|(_, names)| names.contains(profile))
    }

    /// Canonical names the given models offer, sorted, without repeats.
    fn canonical_of<'a>(&'a self, models: impl Iterator<Item = &'a String>) -> Vec<&'a str> {
        let mut out: BTreeSet<&str> = BTreeSet::new();
        for m in models {
            if let Some((canonical, _)) = self.models.get(m) {
                out.extend(canonical.iter().map(String::as_str));
            }
        }
        out.into_iter().collect()
    }
}

/// A policy's settings that validation reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PolicyFacts<'a> {
    pub name: &'a str,
    pub selector: &'a LabelSelector,
    pub allowed_profiles: &'a [String],
    pub headroom: &'a BTreeMap<String, u32>,
}

/// A node that could be managed: its labels and the GPU models its agent reports.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub gpu_models: Vec<String>,
}

/// What validation found for one policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyReport {
    /// Nodes the selector matches (whether or not another policy matches them too).
    pub matched_nodes: Vec<String>,
    /// Problems that stop planning; each a sentence.
    pub problems: Vec<Problem>,
    /// Risks that do not stop planning.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// CamelCase reason for the condition.
    pub reason: &'static str,
    pub message: String,
}

impl PolicyReport {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }

    /// Ready, Invalid and SelectorOverlapRisk conditions for the policy's status.
    pub fn conditions(&self, gpus: u32) -> Vec<Desired> {
        let valid = self.is_valid();
        let problems = self.problems.iter().map(|p| p.message.as_str()).collect::<Vec<_>>().join("; ");
        let first_reason = self.problems.first().map_or("Valid", |p| p.reason);
        vec![
            Desired {
                type_: READY,
                status: valid,
                reason: if valid { "Valid" } else { first_reason },
                message: if valid {
                    format!("manages {} node(s) with {gpus} MIG-capable GPU(s)", self.matched_nodes.len())
                } else {
                    format!("no plans are made for this policy until it is fixed: {problems}")
                },
            },
            Desired {
                type_: INVALID,
                status: !valid,
                reason: first_reason,
                message: if valid { "all settings are valid".to_string() } else { problems },
            },
            Desired {
                type_: OVERLAP_RISK,
                status: !self.warnings.is_empty(),
                reason: if self.warnings.is_empty() { "SelectorsExclusive" } else { "SelectorsMayOverlap" },
                message: if self.warnings.is_empty() {
                    "no node can be selected by this and another policy".to_string()
                } else {
                    self.warnings.join("; ")
                },
            },
        ]
    }
}

/// Validates every policy against the others, the nodes and the known profiles.
pub(crate) fn check_policies(
    policies: &[PolicyFacts<'_>],
    nodes: &[NodeFacts],
    known: &KnownProfiles,
) -> BTreeMap<String, PolicyReport> {
    let parsed: Vec<Result<Selector, selector::SelectorError>> =
        policies.iter().map(|p| selector::parse(p.selector)).collect();
    let matched: Vec<Vec<&NodeFacts>> = parsed
        .iter()
        .map(|s| match s {
            Ok(s) => nodes.iter().filter(|n| s.matches(&n.labels)).collect(),
            Err(_) => vec![],
        })
        .collect();

    let mut reports = BTreeMap::new();
    for (i, policy) in policies.iter().enumerate() {
        let mut report = PolicyReport {
            matched_nodes: matched[i].iter().map(|n| n.name.clone()).collect(),
            ..Default::default()
        };
        match &parsed[i] {
            Err(e) => report.problems.push(Problem {
                reason: "InvalidSelector",
                message: format!("{e}; until it is fixed this policy selects no node"),
            }),
            Ok(mine) => check_overlaps(i, mine, policies, &parsed, &matched, &mut report),
        }
        check_profiles(policy, &matched[i], known, &mut report);
        reports.insert(policy.name.to_string(), report);
    }
    reports
}

fn check_overlaps(
    i: usize,
    mine: &Selector,
    policies: &[PolicyFacts<'_>],
    parsed: &[Result<Selector, selector::SelectorError>],
    matched: &[Vec<&NodeFacts>],
    report: &mut PolicyReport,
) {
    for (j, other) in policies.iter().enumerate() {
        let Ok(theirs) = &parsed[j] else { continue };
        if i == j {
            continue;
        }
        let shared: Vec<&str> = matched[i]
            .iter()
            .filter(|n| matched[j].iter().any(|m| m.name == n.name))
            .map(|n| n.name.as_str())
            .collect();
        if !shared.is_empty() {
            report.problems.push(Problem {
                reason: "OverlappingSelectors",
                message: format!(
                    "spec.nodeSelector: node(s) {} are also selected by policy {:?}; change one of the two node selectors so that each node belongs to one policy (neither policy plans until then)",
                    shared.join(", "),
                    other.name
                ),
            });
        } else if let Some(labels) = common_node(mine, theirs) {
            report.warnings.push(format!(
                "spec.nodeSelector: a node labelled {} would be selected by this policy and by policy {:?}; none exists now, but make the selectors exclusive (e.g. different values of one label) before such a node joins",
                describe_labels(&labels),
                other.name
            ));
        }
    }
}

fn check_profiles(
    policy: &PolicyFacts<'_>,
    managed: &[&NodeFacts],
    known: &KnownProfiles,
    report: &mut PolicyReport,
) {
    let managed_models: BTreeSet<&String> =
        managed.iter().flat_map(|n| n.gpu_models.iter()).filter(|m| known.knows_model(m)).collect();
    for (i, _) in policy.allowed_profiles.iter().enumerate().filter(|(_, p)| *p == WHOLE) {
        report.problems.push(Problem {
            reason: "WholeIsAMode",
            message: format!(
                "spec.allowedProfiles[{i}]: {WHOLE:?} is a mode, not a profile; list it in spec.allowedModes"
            ),
        });
    }
    let fields = policy
        .allowed_profiles
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("spec.allowedProfiles[{i}]"), p))
        .chain(policy.headroom.keys().map(|p| (format!("spec.headroom[{p:?}]"), p)));
    for (field, profile) in fields {
        if !known.any_offers(profile) {
            let candidates = if managed_models.is_empty() {
                known.canonical_of(known.models.keys())
            } else {
                known.canonical_of(managed_models.iter().copied())
            };
            let hint = match closest(profile, &candidates) {
                Some(best) => format!("did you mean {best:?}?"),
                None => "check the name against `geometer catalog show MODEL`".to_string(),
            };
            report.problems.push(Problem {
                reason: "UnknownProfile",
                message: format!(
                    "{field}: {profile:?} is not a MIG profile of any GPU Geometer knows; {hint}"
                ),
            });
        } else if !managed_models.is_empty() && !managed_models.iter().any(|m| known.offers(m, profile)) {
            let models: Vec<&str> = managed_models.iter().map(|m| m.as_str()).collect();
            let offered = known.canonical_of(managed_models.iter().copied());
            report.problems.push(Problem {
                reason: "ProfileNotOnManagedGpus",
                message: format!(
                    "{field}: no managed GPU offers {profile:?} (managed models: {}); remove it or use one they offer: {}",
                    models.join(", "),
                    offered.join(", ")
                ),
            });
        }
    }
}

/// The candidate closest to `name` by edit distance, when close enough to be a typo.
fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates.iter().map(|c| (edit_distance(name, c), *c)).filter(|(d, _)| *d <= 2).min().map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut row = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != *cb);
            row.push(substitute.min(prev[j + 1] + 1).min(row[j] + 1));
        }
        prev = row;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> KnownProfiles {
        let mut k = KnownProfiles::default();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        k.add_model("A100-40GB", names(&["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]), vec![]);
        k.add_model(
            "H100-80GB",
            names(&["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
            names(&["7g.79gb"]),
        );
        k
    }

    fn node(name: &str, pool: &str, model: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            labels: BTreeMap::from([("pool".to_string(), pool.to_string())]),
            gpu_models: vec![model.into()],
        }
    }

    fn pool_selector(pool: Option<&str>) -> LabelSelector {
        LabelSelector {
            match_labels: pool.map(|p| BTreeMap::from([("pool".to_string(), p.to_string())])),
            match_expressions: None,
        }
    }

    #[test]
    fn a_valid_policy_is_ready() {
        let sel = pool_selector(Some("a100"));
        let allowed = vec!["1g.5gb".to_string()];
        let headroom = BTreeMap::new();
        let policies =
            [PolicyFacts { name: "a", selector: &sel, allowed_profiles: &allowed, headroom: &headroom }];
        let reports = check_policies(&policies, &[node("n1", "a100", "A100-40GB")], &known());
        let r = &reports["a"];
        assert!(r.is_valid(), "{r:?}");
        assert_eq!(r.matched_nodes, vec!["n1"]);
        let conds = r.conditions(8);
        assert!(conds[0].status && conds[0].message == "manages 1 node(s) with 8 MIG-capable GPU(s)");
        assert!(!conds[1].status);
    }

    #[test]
    fn a_typo_in_a_profile_gets_a_suggestion() {
        let sel = pool_selector(Some("h100"));
        let allowed = vec!["1g.10g".to_string(), "7g.79gb".to_string()];
        let headroom = BTreeMap::from([("3g.40bg".to_string(), 1)]);
        let policies =
            [PolicyFacts { name: "a", selector: &sel, allowed_profiles: &allowed, headroom: &headroom }];
        let r = &check_policies(&policies, &[node("n1", "h100", "H100-80GB")], &known())["a"];
        let messages: Vec<&str> = r.problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(
            messages,
            vec![
                "spec.allowedProfiles[0]: \"1g.10g\" is not a MIG profile of any GPU Geometer knows; did you mean \"1g.10gb\"?",
                "spec.headroom[\"3g.40bg\"]: \"3g.40bg\" is not a MIG profile of any GPU Geometer knows; did you mean \"3g.40gb\"?",
            ],
            "the alias 7g.79gb is accepted"
        );
        let conds = r.conditions(8);
        assert!(!conds[0].status);
        assert_eq!(conds[0].reason, "UnknownProfile");
        assert!(conds[0]
            .message
            .starts_with("no plans are made for this policy until it is fixed: spec.allowedProfiles[0]"));
    }

    #[test]
    fn a_profile_no_managed_gpu_offers_is_invalid_and_lists_what_they_offer() {
        let sel = pool_selector(Some("a100"));
        let allowed = vec!["1g.10gb".to_string()];
        let headroom = BTreeMap::new();
        let policies =
            [PolicyFacts { name: "a", selector: &sel, allowed_profiles: &allowed, headroom: &headroom }];
        let nodes = [node("n1", "a100", "A100-40GB"), node("n2", "h100", "H100-80GB")];
        let r = &check_policies(&policies, &nodes, &known())["a"];
        assert_eq!(r.problems.len(), 1);
        assert_eq!(r.problems[0].reason, "ProfileNotOnManagedGpus");
        assert_eq!(
            r.problems[0].message,
            "spec.allowedProfiles[0]: no managed GPU offers \"1g.10gb\" (managed models: A100-40GB); remove it or use one they offer: 1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
        );
    }

    #[test]
    fn two_policies_selecting_one_node_are_both_invalid_and_name_the_node() {
        let all = pool_selector(None);
        let a100 = pool_selector(Some("a100"));
        let none: Vec<String> = vec![];
        let headroom = BTreeMap::new();
        let policies = [
            PolicyFacts { name: "everything", selector: &all, allowed_profiles: &none, headroom: &headroom },
            PolicyFacts { name: "a100-pool", selector: &a100, allowed_profiles: &none, headroom: &headroom },
        ];
        let nodes = [node("n1", "a100", "A100-40GB"), node("n2", "h100", "H100-80GB")];
        let reports = check_policies(&policies, &nodes, &known());
        assert_eq!(
            reports["everything"].problems[0].message,
            "spec.nodeSelector: node(s) n1 are also selected by policy \"a100-pool\"; change one of the two node selectors so that each node belongs to one policy (neither policy plans until then)"
        );
        assert_eq!(reports["a100-pool"].problems[0].reason, "OverlappingSelectors");
    }

    #[test]
    fn selectors_that_could_overlap_only_warn_and_exclusive_ones_are_quiet() {
        let a = LabelSelector {
            match_labels: Some(BTreeMap::from([("team".into(), "x".into())])),
            match_expressions: None,
        };
        let b = pool_selector(Some("h100"));
        let c = pool_selector(Some("a100"));
        let none: Vec<String> = vec![];
        let headroom = BTreeMap::new();
        let policies = [
            PolicyFacts { name: "team-x", selector: &a, allowed_profiles: &none, headroom: &headroom },
            PolicyFacts { name: "h100", selector: &b, allowed_profiles: &none, headroom: &headroom },
            PolicyFacts { name: "a100", selector: &c, allowed_profiles: &none, headroom: &headroom },
        ];
        let reports = check_policies(&policies, &[node("n2", "h100", "H100-80GB")], &known());
        assert!(reports["team-x"].is_valid());
        assert_eq!(reports["team-x"].warnings.len(), 2);
        assert!(
            reports["team-x"].warnings[0].contains("a node labelled pool=h100,team=x"),
            "{:?}",
            reports["team-x"].warnings
        );
        assert_eq!(reports["h100"].warnings.len(), 1, "h100 and a100 are exclusive");
        let conds = reports["a100"].conditions(0);
        assert!(conds[2].status, "a100 may overlap team-x");
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("1g.10gb", "1g.10gb"), 0);
        assert_eq!(edit_distance("1g.10g", "1g.10gb"), 1);
        assert_eq!(edit_distance("3g.40bg", "3g.40gb"), 2);
        assert_eq!(closest("9g.99gb", &["1g.10gb"]), None);
    }
}
