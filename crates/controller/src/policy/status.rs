//! Policies' status: validation conditions, managed nodes and GPUs, the last plan. Pure: reads
//! the cached objects and returns the status writes and events that differ from what is there.

use std::collections::BTreeMap;
use std::sync::Arc;

use geometer_solver::catalog::Catalog;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::{Resource, ResourceExt};

use geometer_api::{MigNode, MigPlan, MigPolicy, MigPolicyStatus};

use crate::conditions;
use crate::policy::validation::{self, KnownProfiles, NodeFacts, PolicyFacts, PolicyReport};
use crate::runtime::actions::{Action, EventSpec};

/// Profiles per catalog model, for validation.
pub fn known_profiles(catalog: &Catalog) -> KnownProfiles {
    let mut known = KnownProfiles::default();
    for model in catalog.models() {
        let canonical = model.profiles.iter().map(|p| p.name.clone()).collect();
        let aliases = model.profiles.iter().flat_map(|p| p.aliases.iter().cloned()).collect();
        known.add_model(&model.key, canonical, aliases);
    }
    known
}

/// A node with its labels and, when its agent reported, the catalog keys of its GPUs.
pub fn node_facts(
    nodes: &[Arc<Node>],
    mignodes: &BTreeMap<String, Arc<MigNode>>,
    catalog: &Catalog,
) -> Vec<NodeFacts> {
    nodes
        .iter()
        .map(|node| {
            let name = node.name_any();
            let gpu_models = mignodes
                .get(&name)
                .and_then(|m| m.status.as_ref())
                .map(|s| {
                    s.gpus
                        .iter()
                        .map(|g| catalog.find(&g.model).map_or_else(|| g.model.clone(), |m| m.key.clone()))
                        .collect()
                })
                .unwrap_or_default();
            NodeFacts { name, labels: node.labels().clone(), gpu_models }
        })
        .collect()
}

/// Validation of every policy, by name.
pub fn validate(
    policies: &[Arc<MigPolicy>],
    facts: &[NodeFacts],
    known: &KnownProfiles,
) -> BTreeMap<String, PolicyReport> {
    let names: Vec<String> = policies.iter().map(|p| p.name_any()).collect();
    let settings: Vec<PolicyFacts<'_>> = policies
        .iter()
        .zip(&names)
        .map(|(p, name)| PolicyFacts {
            name,
            selector: &p.spec.node_selector,
            allowed_profiles: &p.spec.allowed_profiles,
            headroom: &p.spec.headroom,
        })
        .collect();
    validation::check_policies(&settings, facts, known)
}

/// The newest plan of each policy (by creation time, then name, which starts with the time).
pub(crate) fn newest_plans(plans: &[Arc<MigPlan>]) -> BTreeMap<String, Arc<MigPlan>> {
    let mut newest: BTreeMap<String, Arc<MigPlan>> = BTreeMap::new();
    for plan in plans {
        let key = |p: &MigPlan| (p.creation_timestamp().map(|t| t.0), p.name_any());
        match newest.get(&plan.spec.policy) {
            Some(current) if key(current) >= key(plan) => {}
            _ => {
                newest.insert(plan.spec.policy.clone(), plan.clone());
            }
        }
    }
    newest
}

/// Status writes and events for policies whose status differs from what validation found; one
/// group of actions per policy, the status write first.
pub(crate) fn reconcile_policies(
    policies: &[Arc<MigPolicy>],
    reports: &BTreeMap<String, PolicyReport>,
    mignodes: &BTreeMap<String, Arc<MigNode>>,
    newest: &BTreeMap<String, Arc<MigPlan>>,
    catalog: &Catalog,
    now: Timestamp,
) -> Vec<Vec<Action>> {
    let mut groups = Vec::new();
    for policy in policies {
        let mut actions = Vec::new();
        let name = policy.name_any();
        let Some(report) = reports.get(&name) else { continue };
        let managed: Vec<&Arc<MigNode>> =
            report.matched_nodes.iter().filter_map(|n| mignodes.get(n)).collect();
        let gpus: u32 = managed
            .iter()
            .filter_map(|m| m.status.as_ref())
            .flat_map(|s| s.gpus.iter())
            .filter(|g| catalog.find(&g.model).is_some())
            .count() as u32;

        let current = policy.status.clone().unwrap_or_default();
        let mut next = MigPolicyStatus {
            managed_nodes: managed.len() as u32,
            managed_gpus: gpus,
            last_plan: newest.get(&name).map(|p| p.name_any()).or(current.last_plan.clone()),
            observed_generation: policy.metadata.generation,
            conditions: current.conditions.clone(),
        };
        let was_ready = conditions::find(&current.conditions, validation::READY).map(|c| c.status.as_str());
        conditions::apply(&mut next.conditions, &report.conditions(gpus), policy.metadata.generation, now);
        if next == current {
            continue;
        }
        let is_ready = report.is_valid();
        let regarding = policy.object_ref(&());
        if !is_ready && was_ready != Some("False") {
            let problems: Vec<&str> = report.problems.iter().map(|p| p.message.as_str()).collect();
            actions.push(Action::Event(EventSpec {
                regarding: regarding.clone(),
                related: None,
                warning: true,
                reason: "InvalidPolicy",
                action: "Validate",
                note: format!("No plans until fixed: {}", problems.join("; ")),
            }));
        } else if is_ready && was_ready == Some("False") {
            actions.push(Action::Event(EventSpec {
                regarding: regarding.clone(),
                related: None,
                warning: false,
                reason: "PolicyValid",
                action: "Validate",
                note: "The policy is valid again; planning resumes".to_string(),
            }));
        }
        actions.insert(
            0,
            Action::PolicyStatus {
                policy: name,
                resource_version: policy.resource_version(),
                before: policy.status.clone(),
                status: next,
            },
        );
        groups.push(actions);
    }
    groups
}
