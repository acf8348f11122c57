//! Snapshot checks against the catalog. Every error names the field (as a path into the
//! snapshot), the value found, and what to do; nothing is planned from a snapshot that fails.

use std::collections::BTreeSet;

use thiserror::Error;

use crate::catalog::Catalog;
use crate::geometry::{self, Geometry, Placed};

use super::{Operator, Pod, Requirement, Snapshot};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("snapshot field `{field}` = {value:?}: {problem}")]
pub struct SnapshotError {
    /// Path into the snapshot, e.g. `nodes[2].gpus[0].model`.
    pub field: String,
    pub value: String,
    /// What is wrong and what to do.
    pub problem: String,
}

fn err(field: impl Into<String>, value: impl Into<String>, problem: impl Into<String>) -> SnapshotError {
    SnapshotError { field: field.into(), value: value.into(), problem: problem.into() }
}

impl Snapshot {
    /// Checks names, references and every current geometry against `catalog`.
    pub fn validate(&self, catalog: &Catalog) -> Result<(), SnapshotError> {
        let mut node_names = BTreeSet::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let at = format!("nodes[{i}]");
            if node.name.is_empty() {
                return Err(err(format!("{at}.name"), "", "every node needs a name"));
            }
            if !node_names.insert(node.name.as_str()) {
                return Err(err(format!("{at}.name"), &node.name, "node listed twice; list each node once"));
            }
            let mut indexes = BTreeSet::new();
            for (j, gpu) in node.gpus.iter().enumerate() {
                let at = format!("{at}.gpus[{j}]");
                if !indexes.insert(gpu.index) {
                    return Err(err(
                        format!("{at}.index"),
                        gpu.index.to_string(),
                        "GPU index used twice on this node",
                    ));
                }
                let Some(model) = catalog.find(&gpu.model) else {
                    return Err(err(
                        format!("{at}.model"),
                        &gpu.model,
                        "no GPU model in the catalog matches (key, PCI device id, NVML name or gpu.product \
                         label); add it with a catalog file (--catalog FILE)",
                    ));
                };
                let mut placed = Vec::with_capacity(gpu.instances.len());
                for (k, inst) in gpu.instances.iter().enumerate() {
                    let at = format!("{at}.instances[{k}]");
                    let Some(profile) = model.profile(&inst.profile) else {
                        let known: Vec<&str> = model.profiles.iter().map(|p| p.name.as_str()).collect();
                        return Err(err(
                            format!("{at}.profile"),
                            &inst.profile,
                            format!("not a profile of {}; known: {}", model.key, known.join(", ")),
                        ));
                    };
                    placed.push(Placed::new(profile, inst.start));
                }
                let current = Geometry::new(placed);
                if let Err(e) = geometry::validate(model, &current) {
                    return Err(err(
                        format!("{at}.instances"),
                        current.display(model),
                        format!(
                            "not a valid geometry on {}: {e}; fix the snapshot or the catalog",
                            model.key
                        ),
                    ));
                }
            }
        }
        let mut pods = BTreeSet::new();
        for (i, pod) in self.pending.iter().enumerate() {
            let at = format!("pending[{i}]");
            check_pod(&at, pod, catalog)?;
            if pod.requests.is_empty() {
                return Err(err(
                    format!("{at}.requests"),
                    "{}",
                    "a pending pod is demand only when it requests MIG profiles; drop it from the snapshot",
                ));
            }
            if let Some(node) = &pod.node {
                return Err(err(
                    format!("{at}.node"),
                    node,
                    "a pending pod is not bound; move it to `running`",
                ));
            }
            if !pods.insert(pod.key()) {
                return Err(err(format!("{at}.name"), pod.key().to_string(), "pod listed twice"));
            }
        }
        for (i, pod) in self.running.iter().enumerate() {
            let at = format!("running[{i}]");
            check_pod(&at, pod, catalog)?;
            match &pod.node {
                None => {
                    return Err(err(format!("{at}.node"), "", "a running pod needs the node it is bound to"))
                }
                Some(node) if !node_names.contains(node.as_str()) => {
                    return Err(err(format!("{at}.node"), node, "not a node of this snapshot"));
                }
                Some(_) => {}
            }
            if !pods.insert(pod.key()) {
                return Err(err(format!("{at}.name"), pod.key().to_string(), "pod listed twice"));
            }
        }
        for (i, pod) in self.expected.iter().enumerate() {
            let at = format!("expected[{i}]");
            check_pod(&at, pod, catalog)?;
            if let Some(node) = &pod.node {
                return Err(err(
                    format!("{at}.node"),
                    node,
                    "an expected pod is not bound yet; leave `node` out",
                ));
            }
        }
        if let Some(policy) = &self.policy {
            for (i, name) in policy.allowed_profiles.iter().enumerate() {
                check_profile_known(&format!("policy.allowedProfiles[{i}]"), name, catalog)?;
            }
            for name in policy.headroom.keys() {
                check_profile_known(&format!("policy.headroom.{name}"), name, catalog)?;
            }
            if policy.time_limit_ms == Some(0) {
                return Err(err("policy.timeLimitMs", "0", "must be positive (milliseconds), or absent"));
            }
        }
        Ok(())
    }
}

fn check_pod(at: &str, pod: &Pod, catalog: &Catalog) -> Result<(), SnapshotError> {
    if pod.namespace.is_empty() {
        return Err(err(format!("{at}.namespace"), "", "every pod needs a namespace"));
    }
    if pod.name.is_empty() || pod.name.contains('/') {
        return Err(err(format!("{at}.name"), &pod.name, "a pod name is not empty and has no '/'"));
    }
    for (profile, &count) in &pod.requests {
        if count == 0 {
            return Err(err(
                format!("{at}.requests.{profile}"),
                "0",
                "a request counts at least 1 slice; drop it",
            ));
        }
        if profile.is_empty() {
            return Err(err(format!("{at}.requests"), "", "a profile name is not empty"));
        }
    }
    let _ = catalog;
    for (t, term) in pod.affinity.iter().enumerate() {
        for (r, req) in term.match_expressions.iter().enumerate() {
            check_requirement(&format!("{at}.affinity[{t}].matchExpressions[{r}]"), req)?;
        }
        for (r, req) in term.match_fields.iter().enumerate() {
            let field = format!("{at}.affinity[{t}].matchFields[{r}]");
            if req.key != "metadata.name" {
                return Err(err(
                    format!("{field}.key"),
                    &req.key,
                    "the only supported field is metadata.name",
                ));
            }
            if !matches!(req.operator, Operator::In | Operator::NotIn) {
                return Err(err(
                    format!("{field}.operator"),
                    format!("{:?}", req.operator),
                    "matchFields takes In or NotIn",
                ));
            }
            check_requirement(&field, req)?;
        }
    }
    Ok(())
}

fn check_requirement(field: &str, req: &Requirement) -> Result<(), SnapshotError> {
    let values = format!("{:?}", req.values);
    match req.operator {
        Operator::In | Operator::NotIn if req.values.is_empty() => {
            Err(err(format!("{field}.values"), values, "In and NotIn need at least one value"))
        }
        Operator::Exists | Operator::DoesNotExist if !req.values.is_empty() => {
            Err(err(format!("{field}.values"), values, "Exists and DoesNotExist take no values"))
        }
        Operator::Gt | Operator::Lt if req.values.len() != 1 || req.values[0].parse::<i64>().is_err() => {
            Err(err(format!("{field}.values"), values, "Gt and Lt take exactly one integer value"))
        }
        _ => Ok(()),
    }
}

fn check_profile_known(field: &str, name: &str, catalog: &Catalog) -> Result<(), SnapshotError> {
    if catalog.models().iter().any(|m| m.profile(name).is_some()) {
        Ok(())
    } else {
        Err(err(
            field,
            name,
            "no GPU model in the catalog has this profile; check the spelling (e.g. 1g.10gb)",
        ))
    }
}
