//! Snapshot checks against the catalog. Every error names the field (as a path into the
//! snapshot), the value found, and what to do; nothing is planned from a snapshot that fails.

use std::collections::{BTreeSet, HashMap, HashSet};

use thiserror::Error;

use crate::catalog::{Catalog, GpuModel};
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

/// Largest gang minimum accepted (far above any GPU cluster's pod count per job).
pub const MAX_GANG_MEMBERS: u32 = 100_000;

impl Snapshot {
    /// Gang names are unique and their minimums within bounds; the names.
    fn validate_gangs(&self) -> Result<HashSet<&str>, SnapshotError> {
        let mut names = HashSet::with_capacity(self.gangs.len());
        for (i, gang) in self.gangs.iter().enumerate() {
            if !names.insert(gang.name.as_str()) {
                return Err(err(format!("gangs[{i}].name"), &gang.name, "gang listed twice"));
            }
            if gang.min_members == 0 || gang.min_members > MAX_GANG_MEMBERS {
                return Err(err(
                    format!("gangs[{i}].minMembers"),
                    gang.min_members.to_string(),
                    format!("a gang needs 1 to {MAX_GANG_MEMBERS} members"),
                ));
            }
        }
        Ok(names)
    }

    /// Checks names, references and every current geometry against `catalog`. Linear in the
    /// snapshot: field paths are only written out for an error, and a model or geometry shared
    /// by many GPUs is looked up and checked once.
    pub fn validate(&self, catalog: &Catalog) -> Result<(), SnapshotError> {
        let node_names = self.validate_nodes(catalog)?;
        let gangs = self.validate_gangs()?;
        let mut pods: HashSet<(&str, &str)> = HashSet::with_capacity(self.pending.len() + self.running.len());
        for (i, pod) in self.pending.iter().enumerate() {
            let at = || format!("pending[{i}]");
            check_pod(&at, pod)?;
            if pod.requests.is_empty() {
                return Err(err(
                    format!("{}.requests", at()),
                    "{}",
                    "a pending pod is demand only when it requests MIG profiles; drop it from the snapshot",
                ));
            }
            if let Some(node) = &pod.node {
                return Err(err(
                    format!("{}.node", at()),
                    node,
                    "a pending pod is not bound; move it to `running`",
                ));
            }
            if !pods.insert((&pod.namespace, &pod.name)) {
                return Err(err(format!("{}.name", at()), pod.key().to_string(), "pod listed twice"));
            }
            if let Some(gang) = pod.gang.as_deref().filter(|g| !gangs.contains(g)) {
                return Err(err(
                    format!("{}.gang", at()),
                    gang,
                    "no gang of this name in `gangs`; add it with its minMembers",
                ));
            }
        }
        for (i, pod) in self.running.iter().enumerate() {
            let at = || format!("running[{i}]");
            check_pod(&at, pod)?;
            match &pod.node {
                None => {
                    return Err(err(
                        format!("{}.node", at()),
                        "",
                        "a running pod needs the node it is bound to",
                    ))
                }
                Some(node) if !node_names.contains(node.as_str()) => {
                    return Err(err(format!("{}.node", at()), node, "not a node of this snapshot"));
                }
                Some(_) => {}
            }
            if !pods.insert((&pod.namespace, &pod.name)) {
                return Err(err(format!("{}.name", at()), pod.key().to_string(), "pod listed twice"));
            }
        }
        for (i, pod) in self.expected.iter().enumerate() {
            let at = || format!("expected[{i}]");
            check_pod(&at, pod)?;
            if let Some(node) = &pod.node {
                return Err(err(
                    format!("{}.node", at()),
                    node,
                    "an expected pod is not bound yet; leave `node` out",
                ));
            }
        }
        if let Some(policy) = &self.policy {
            for (i, name) in policy.allowed_profiles.iter().enumerate() {
                let at = format!("policy.allowedProfiles[{i}]");
                if name.eq_ignore_ascii_case(crate::catalog::WHOLE) {
                    return Err(err(at, name, "the whole GPU is a mode, not a profile: use allowedModes"));
                }
                check_profile_known(&at, name, catalog)?;
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

    /// Node names unique and present, GPU indexes unique per node, every GPU's model in the
    /// catalog and its current geometry valid there. Returns the node names.
    fn validate_nodes<'s>(&'s self, catalog: &'s Catalog) -> Result<HashSet<&'s str>, SnapshotError> {
        let mut node_names = HashSet::with_capacity(self.nodes.len());
        let mut models: HashMap<&str, &GpuModel> = HashMap::new();
        let mut valid: HashSet<(&str, Geometry)> = HashSet::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let at = || format!("nodes[{i}]");
            if node.name.is_empty() {
                return Err(err(format!("{}.name", at()), "", "every node needs a name"));
            }
            if !node_names.insert(node.name.as_str()) {
                return Err(err(
                    format!("{}.name", at()),
                    &node.name,
                    "node listed twice; list each node once",
                ));
            }
            let mut indexes = BTreeSet::new();
            for (j, gpu) in node.gpus.iter().enumerate() {
                let at = || format!("nodes[{i}].gpus[{j}]");
                if !indexes.insert(gpu.index) {
                    return Err(err(
                        format!("{}.index", at()),
                        gpu.index.to_string(),
                        "GPU index used twice on this node",
                    ));
                }
                let model = match models.get(gpu.model.as_str()) {
                    Some(model) => *model,
                    None => {
                        let Some(model) = catalog.find(&gpu.model) else {
                            return Err(err(
                                format!("{}.model", at()),
                                &gpu.model,
                                "no GPU model in the catalog matches (key, PCI device id, NVML name or gpu.product \
                                 label); add it with a catalog file (--catalog FILE)",
                            ));
                        };
                        models.insert(&gpu.model, model);
                        model
                    }
                };
                let mut placed = Vec::with_capacity(gpu.instances.len());
                for (k, inst) in gpu.instances.iter().enumerate() {
                    let Some(profile) = model.profile(&inst.profile) else {
                        let known: Vec<&str> = model.profiles.iter().map(|p| p.name.as_str()).collect();
                        return Err(err(
                            format!("{}.instances[{k}].profile", at()),
                            &inst.profile,
                            format!("not a profile of {}; known: {}", model.key, known.join(", ")),
                        ));
                    };
                    placed.push(Placed::new(profile, inst.start));
                }
                let current = (model.key.as_str(), Geometry::new(placed));
                if valid.contains(&current) {
                    continue;
                }
                if let Err(e) = geometry::validate(model, &current.1) {
                    return Err(err(
                        format!("{}.instances", at()),
                        current.1.display(model),
                        format!(
                            "not a valid geometry on {}: {e}; fix the snapshot or the catalog",
                            model.key
                        ),
                    ));
                }
                valid.insert(current);
            }
        }
        Ok(node_names)
    }
}

fn check_pod(at: &dyn Fn() -> String, pod: &Pod) -> Result<(), SnapshotError> {
    if pod.namespace.is_empty() {
        return Err(err(format!("{}.namespace", at()), "", "every pod needs a namespace"));
    }
    if pod.name.is_empty() || pod.name.contains('/') {
        return Err(err(format!("{}.name", at()), &pod.name, "a pod name is not empty and has no '/'"));
    }
    for (profile, &count) in &pod.requests {
        if count == 0 {
            return Err(err(
                format!("{}.requests.{profile}", at()),
                "0",
                "a request counts at least 1 slice; drop it",
            ));
        }
        if profile.is_empty() {
            return Err(err(format!("{}.requests", at()), "", "a profile name is not empty"));
        }
    }
    for (t, term) in pod.affinity.iter().enumerate() {
        for (r, req) in term.match_expressions.iter().enumerate() {
            check_requirement(&format!("{}.affinity[{t}].matchExpressions[{r}]", at()), req)?;
        }
        for (r, req) in term.match_fields.iter().enumerate() {
            let field = format!("{}.affinity[{t}].matchFields[{r}]", at());
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
    let values = || format!("{:?}", req.values);
    match req.operator {
        Operator::In | Operator::NotIn if req.values.is_empty() => {
            Err(err(format!("{field}.values"), values(), "In and NotIn need at least one value"))
        }
        Operator::Exists | Operator::DoesNotExist if !req.values.is_empty() => {
            Err(err(format!("{field}.values"), values(), "Exists and DoesNotExist take no values"))
        }
        Operator::Gt | Operator::Lt if req.values.len() != 1 || req.values[0].parse::<i64>().is_err() => {
            Err(err(format!("{field}.values"), values(), "Gt and Lt take exactly one integer value"))
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
