//! The simulated cluster: GPU models (as the simulator needs them) and nodes, built from a
//! `--cluster` spec such as `4xA100-80GB:8,4xH100-80GB:8` or from an Alibaba node list.

use geometer_solver::words::quoted;
use thiserror::Error;

/// One MIG profile as the simulator sees it: a resource name and the slices it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileInfo {
    /// The name pods request, as in `nvidia.com/mig-<name>`.
    pub name: String,
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub memory_mib: u64,
}

/// A GPU model reduced to what allocation accounting needs. Built from the solver's catalog;
/// tests build it by hand so that the simulator's accounting can be checked on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// The catalog's key for the model, e.g. `A100-80GB`.
    pub name: String,
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub memory_mib: u64,
    /// MIG mode changes only through a GPU reset (Ampere), so the planners never turn one of
    /// its GPUs whole.
    pub mode_change_needs_reset: bool,
    /// Standard profiles (no media-extension variants), smallest first.
    pub profiles: Vec<ProfileInfo>,
}

impl ModelInfo {
    /// The profile that takes the whole GPU (`7g.80gb`), the MIG unit of a whole-GPU request.
    pub fn full_profile(&self) -> Option<&ProfileInfo> {
        self.profiles
            .iter()
            .filter(|p| p.compute_slices == self.compute_slices)
            .max_by_key(|p| p.memory_slices)
    }

    pub fn profile(&self, name: &str) -> Option<&ProfileInfo> {
        self.profiles.iter().find(|p| p.name == name)
    }
}

/// A simulated node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    /// Index into [`Cluster::models`].
    pub model: usize,
    pub gpus: u32,
    /// `None`: CPU is not modelled on this node (every pod's CPU request fits).
    pub cpu_milli: Option<u64>,
    pub memory_mib: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub models: Vec<ModelInfo>,
    /// In name order: first-fit scheduling and the greedy planner both walk nodes in this order.
    pub nodes: Vec<NodeSpec>,
}

impl Cluster {
    pub fn gpu_count(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.gpus)).sum()
    }

    pub fn memory_slices(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.gpus) * u64::from(self.models[n.model].memory_slices)).sum()
    }

    pub fn compute_slices(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.gpus) * u64::from(self.models[n.model].compute_slices)).sum()
    }

    pub fn model_index(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m.name.eq_ignore_ascii_case(name))
    }

    /// The model whose profile names pods are mapped to: the one with the most GPUs (first on ties).
    pub fn reference_model(&self) -> &ModelInfo {
        let mut gpus = vec![0u64; self.models.len()];
        for n in &self.nodes {
            gpus[n.model] += u64::from(n.gpus);
        }
        let best = (0..self.models.len()).rev().max_by_key(|&i| gpus[i]).unwrap_or(0);
        &self.models[best]
    }

    /// Builds a cluster and checks it is usable (at least one GPU, unique node names).
    pub fn new(models: Vec<ModelInfo>, mut nodes: Vec<NodeSpec>) -> Result<Self, ClusterError> {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = nodes.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(ClusterError::DuplicateNode(w[0].name.clone()));
        }
        let cluster = Cluster { models, nodes };
        if cluster.gpu_count() == 0 {
            return Err(ClusterError::NoGpus);
        }
        Ok(cluster)
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ClusterError {
    #[error("--cluster: entry {entry:?}: {reason} (expected NODESxMODEL:GPUS[:cpu=CORES][:mem=GIB], e.g. 4xA100-80GB:8)")]
    Entry { entry: String, reason: String },
    #[error("--cluster: GPU model {model:?} in entry {entry:?} is not in the catalog (see `geometer catalog list`)")]
    UnknownModel { entry: String, model: String },
    #[error(
        "--cluster: GPU model {model:?} has no MIG profile that takes the whole GPU; it cannot be simulated"
    )]
    NoFullProfile { model: String },
    #[error("the cluster has no GPUs; give at least one node with GPUs")]
    NoGpus,
    #[error("node name {0:?} appears twice")]
    DuplicateNode(String),
}

/// Parses `4xA100-80GB:8,4xH100-80GB:8[:cpu=96][:mem=768]`. `resolve` turns a model name as the
/// user wrote it into the model (the catalog lookup); nodes are named `<model>-<nn>`.
pub fn parse_cluster_spec(
    spec: &str,
    mut resolve: impl FnMut(&str) -> Option<ModelInfo>,
) -> Result<Cluster, ClusterError> {
    let mut models: Vec<ModelInfo> = Vec::new();
    let mut nodes = Vec::new();
    let mut per_model_count: Vec<usize> = Vec::new();
    for entry in spec.split(',').map(str::trim) {
        let bad = |reason: &str| ClusterError::Entry { entry: entry.to_string(), reason: reason.to_string() };
        if entry.is_empty() {
            return Err(bad("empty entry"));
        }
        let mut parts = entry.split(':');
        let head = parts.next().unwrap_or_default();
        let (count, model_name) =
            head.split_once(['x', 'X']).ok_or_else(|| bad("missing NODESx before the model"))?;
        let count: usize = count
            .trim()
            .parse()
            .map_err(|_| bad(&format!("node count {} is not a whole number", quoted(count))))?;
        if count == 0 || count > 100_000 {
            return Err(bad(&format!("node count {count} must be between 1 and 100000")));
        }
        let gpus = parts.next().ok_or_else(|| bad("missing :GPUS per node"))?;
        let gpus: u32 = gpus
            .trim()
            .parse()
            .map_err(|_| bad(&format!("GPUs per node {} is not a whole number", quoted(gpus))))?;
        if gpus == 0 || gpus > 64 {
            return Err(bad(&format!("GPUs per node {gpus} must be between 1 and 64")));
        }
        let (mut cpu_milli, mut memory_mib) = (None, None);
        for extra in parts {
            let (key, value) = extra
                .split_once('=')
                .ok_or_else(|| bad(&format!("option {} is not key=value", quoted(extra))))?;
            let number: f64 = value
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| bad(&format!("{key}={} is not a positive number", quoted(value))))?;
            match key.trim() {
                "cpu" => cpu_milli = Some((number * 1000.0).round() as u64),
                "mem" => memory_mib = Some((number * 1024.0).round() as u64),
                other => return Err(bad(&format!("unknown option {} (known: cpu, mem)", quoted(other)))),
            }
        }
        let model_name = model_name.trim();
        let model = resolve(model_name).ok_or_else(|| ClusterError::UnknownModel {
            entry: entry.to_string(),
            model: model_name.to_string(),
        })?;
        if model.full_profile().is_none() {
            return Err(ClusterError::NoFullProfile { model: model.name });
        }
        let index = match models.iter().position(|m| m.name == model.name) {
            Some(i) => i,
            None => {
                models.push(model);
                per_model_count.push(0);
                models.len() - 1
            }
        };
        let slug = models[index].name.to_ascii_lowercase();
        for _ in 0..count {
            nodes.push(NodeSpec {
                name: format!("{slug}-{:03}", per_model_count[index]),
                model: index,
                gpus,
                cpu_milli,
                memory_mib,
            });
            per_model_count[index] += 1;
        }
    }
    Cluster::new(models, nodes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn a100() -> ModelInfo {
        let p = |name: &str, c, m, mib| ProfileInfo {
            name: name.into(),
            compute_slices: c,
            memory_slices: m,
            memory_mib: mib,
        };
        ModelInfo {
            name: "A100-80GB".into(),
            compute_slices: 7,
            memory_slices: 8,
            memory_mib: 81920,
            mode_change_needs_reset: true,
            profiles: vec![
                p("1g.10gb", 1, 1, 9728),
                p("1g.20gb", 1, 2, 19968),
                p("2g.20gb", 2, 2, 19968),
                p("3g.40gb", 3, 4, 40192),
                p("4g.40gb", 4, 4, 40192),
                p("7g.80gb", 7, 8, 80896),
            ],
        }
    }

    fn resolve(name: &str) -> Option<ModelInfo> {
        (name == "A100-80GB").then(a100)
    }

    #[test]
    fn spec_builds_named_nodes_with_options() {
        let c = parse_cluster_spec("2xA100-80GB:8, 1xA100-80GB:4:cpu=96:mem=768", resolve).unwrap();
        assert_eq!(c.models.len(), 1);
        let names: Vec<_> = c.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a100-80gb-000", "a100-80gb-001", "a100-80gb-002"]);
        assert_eq!(c.gpu_count(), 20);
        assert_eq!(c.memory_slices(), 160);
        assert_eq!(c.nodes[2].cpu_milli, Some(96_000));
        assert_eq!(c.nodes[2].memory_mib, Some(768 * 1024));
        assert_eq!(c.nodes[0].cpu_milli, None);
    }

    #[test]
    fn spec_errors_name_entry_and_value() {
        let e = parse_cluster_spec("4xA100-80GB", resolve).unwrap_err().to_string();
        assert!(e.contains("\"4xA100-80GB\"") && e.contains("GPUS"), "{e}");
        let e = parse_cluster_spec("fourxA100-80GB:8", resolve).unwrap_err().to_string();
        assert!(e.contains("\"four\""), "{e}");
        let e = parse_cluster_spec("4xT4:8", resolve).unwrap_err().to_string();
        assert!(e.contains("\"T4\"") && e.contains("catalog"), "{e}");
        let e = parse_cluster_spec("1xA100-80GB:8:gpu=3", resolve).unwrap_err().to_string();
        assert!(e.contains("\"gpu\""), "{e}");
        let e = parse_cluster_spec("1xA100-80GB:0", resolve).unwrap_err().to_string();
        assert!(e.contains("GPUs per node 0"), "{e}");
    }

    #[test]
    fn full_profile_is_the_seven_slice_one() {
        assert_eq!(a100().full_profile().unwrap().name, "7g.80gb");
    }
}
