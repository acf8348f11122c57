//! Nodes -> planner nodes: labels, taints, cordon, free CPU/memory, and, where no MigNode
//! reports an inventory, GPUs inferred from the GPU Operator's labels and the node's
//! `nvidia.com/mig-*` capacity.

use std::collections::BTreeMap;

use geometer_solver::catalog::{Catalog, GpuModel, ProfileId};
use geometer_solver::geometry::{place, Geometry};
use geometer_solver::snapshot::{Gpu, Instance, Node as PlannerNode, Taint};
use geometer_solver::PodKey;
use k8s_openapi::api::core::v1::Node;

use crate::adapter::pods::taint_effect;
use crate::adapter::AdapterError;
use crate::dra::stack::DraMode;
use geometer_api::gpu_operator::{self, PausedOperands, Refusal, PAUSED_OPERANDS_ANNOTATION};
use geometer_api::limits::{quote, MAX_GPUS_PER_NODE, MAX_INSTANCES_PER_GPU};
use geometer_api::quantity;
use geometer_api::resources::{is_mig_resource, GPU_RESOURCE, MIG_RESOURCE_PREFIX};

pub const PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
pub const COUNT_LABEL: &str = "nvidia.com/gpu.count";
pub const MIG_CONFIG_LABEL: &str = "nvidia.com/mig.config";

fn err(node: &str, field: String, value: &str, problem: &str) -> AdapterError {
    AdapterError::Field {
        object: format!("Node {node}"),
        field,
        value: quote(value),
        problem: problem.to_string(),
    }
}

pub fn name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

pub fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// Whether Geometer may change the node now, as the GPU Operator's labels say
/// ([`geometer_api::gpu_operator::preflight`]). A pause record the agent left on the Node makes
/// its own `paused-for-mig-change` values its own; one that does not parse counts as none.
pub fn operator_preflight(node: &Node) -> Result<(), Refusal> {
    let own = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PAUSED_OPERANDS_ANNOTATION))
        .and_then(|v| PausedOperands::from_annotation(v).ok());
    gpu_operator::preflight(&labels(node), own.as_ref())
}

/// Why a node NVIDIA's DRA driver advertises (`mode`) is refused when the device plugin
/// advertises it too: each GPU is given out twice, which NVIDIA says never to run (repository
/// `kubernetes-sigs/dra-driver-nvidia-gpu`, pull request 82).
pub fn both_stacks(node: &Node, mode: DraMode) -> Option<String> {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let (resource, _) = allocatable
        .into_iter()
        .flatten()
        .find(|(k, q)| (is_mig_resource(k) || *k == GPU_RESOURCE) && q.0.trim() != "0")?;
    Some(format!(
        "both NVIDIA's device plugin ({resource} in its allocatable) and its DRA driver ({mode}) advertise its GPUs, \
         so each GPU is given out twice; run one of them on a node"
    ))
}

/// Node facts. `used` is what bound, unfinished pods request, in milli-units per resource.
pub fn planner_node(node: &Node, used: &BTreeMap<String, u64>) -> Result<PlannerNode, AdapterError> {
    let node_name = name(node).to_string();
    let spec = node.spec.clone().unwrap_or_default();
    let mut taints = Vec::new();
    for (i, t) in spec.taints.iter().flatten().enumerate() {
        let effect = taint_effect(&t.effect).ok_or_else(|| {
            err(
                &node_name,
                format!("spec.taints[{i}].effect"),
                &t.effect,
                "expected NoSchedule, PreferNoSchedule or NoExecute",
            )
        })?;
        taints.push(Taint { key: t.key.clone(), value: t.value.clone().filter(|v| !v.is_empty()), effect });
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    let free = |resource: &str, scale: f64, div: u64| -> Result<Option<u64>, AdapterError> {
        let Some(q) = allocatable.get(resource) else { return Ok(None) };
        let total = quantity::parse_scaled(&q.0, scale).ok_or_else(|| {
            err(&node_name, format!("status.allocatable.{resource}"), &q.0, "not a Kubernetes quantity")
        })?;
        let used = used.get(resource).copied().unwrap_or(0).div_ceil(div);
        Ok(Some(total.saturating_sub(used)))
    };
    Ok(PlannerNode {
        name: node_name.clone(),
        labels: labels(node),
        taints,
        unschedulable: spec.unschedulable.unwrap_or(false),
        free_cpu_millis: free("cpu", 1000.0, 1)?,
        free_memory_bytes: free("memory", 1.0, 1000)?,
        gpus: Vec::new(),
    })
}

/// The GPU model from the product label; MIG-strategy and sharing suffixes the GPU Operator
/// appends (`-MIG-1g.5gb`, `-SHARED`) are dropped first.
pub fn product_model<'c>(node: &Node, catalog: &'c Catalog) -> Option<(String, Option<&'c GpuModel>)> {
    let product = labels(node).get(PRODUCT_LABEL)?.clone();
    let mut base = product.as_str();
    if let Some(i) = base.find("-MIG-") {
        base = &base[..i];
    }
    let base = base.strip_suffix("-SHARED").unwrap_or(base);
    Some((product.clone(), catalog.find(base)))
}

/// Most MIG instances of one profile a node can hold.
const MAX_INSTANCES_PER_NODE: u32 = (MAX_GPUS_PER_NODE * MAX_INSTANCES_PER_GPU) as u32;

/// A count label or capacity: a whole number up to `max`.
fn bounded_count(
    node: &str,
    field: String,
    text: &str,
    n: Option<u64>,
    max: u32,
    what: &str,
) -> Result<u32, AdapterError> {
    match n {
        Some(n) if n <= u64::from(max) => Ok(n as u32),
        Some(_) => Err(err(node, field, text, &format!("more {what} than a node can hold (at most {max})"))),
        None => Err(err(node, field, text, &format!("expected the number of {what}, a whole number"))),
    }
}

/// The node's GPUs as the GPU Operator labels them (`nvidia.com/gpu.count`), needed to infer
/// the geometry where no MigNode reports it.
pub fn gpu_count(node: &Node) -> Result<u32, AdapterError> {
    let field = format!("metadata.labels.{COUNT_LABEL}");
    let Some(text) = labels(node).get(COUNT_LABEL).cloned() else {
        return Err(err(
            name(node),
            field,
            "(missing)",
            "expected the number of GPUs (GPU Operator label) to infer the geometry",
        ));
    };
    let n = text.parse::<u64>().ok();
    bounded_count(name(node), field, &text, n, MAX_GPUS_PER_NODE as u32, "GPUs")
}

/// MIG instances per profile on the node: `nvidia.com/mig-<p>.count` labels, else capacity.
pub fn mig_counts(node: &Node) -> Result<BTreeMap<String, u32>, AdapterError> {
    let node_name = name(node);
    let mut counts = BTreeMap::new();
    for (k, v) in labels(node) {
        if let Some(profile) = k.strip_prefix(MIG_RESOURCE_PREFIX).and_then(|r| r.strip_suffix(".count")) {
            let field = format!("metadata.labels.{k}");
            let n =
                bounded_count(node_name, field, &v, v.parse().ok(), MAX_INSTANCES_PER_NODE, "MIG instances")?;
            if n > 0 {
                counts.insert(profile.to_string(), n);
            }
        }
    }
    if counts.is_empty() {
        let capacity = node.status.as_ref().and_then(|s| s.capacity.clone()).unwrap_or_default();
        for (k, q) in capacity {
            if let Some(profile) = k.strip_prefix(MIG_RESOURCE_PREFIX) {
                let field = format!("status.capacity.{k}");
                let n = bounded_count(
                    node_name,
                    field,
                    &q.0,
                    quantity::units(&q.0),
                    MAX_INSTANCES_PER_NODE,
                    "MIG instances",
                )?;
                if n > 0 {
                    counts.insert(profile.to_string(), n);
                }
            }
        }
    }
    Ok(counts)
}

/// Lays out the node's instances on its GPUs: the same share on every GPU when the counts
/// divide evenly (what mig-parted's `all-*` configs do), otherwise largest first, first fit.
/// `used` lists, per profile, the pods using instances of it; they take the first instances.
pub fn infer_gpus(
    node: &Node,
    model: &GpuModel,
    gpu_count: u32,
    counts: &BTreeMap<String, u32>,
    used: &BTreeMap<String, Vec<PodKey>>,
) -> Result<(Vec<Gpu>, Vec<String>), AdapterError> {
    let node_name = name(node);
    let mut wanted: Vec<(ProfileId, u32)> = Vec::new();
    for (profile, &n) in counts {
        let id = model.profile(profile).ok_or_else(|| {
            err(
                node_name,
                format!("metadata.labels.{MIG_RESOURCE_PREFIX}{profile}.count"),
                &n.to_string(),
                &format!("{} has no profile {profile}", model.key),
            )
        })?;
        wanted.push((id, n));
    }
    let mut geometries = vec![Geometry::empty(); gpu_count as usize];
    let even = gpu_count > 0 && wanted.iter().all(|(_, n)| n % gpu_count == 0);
    let laid_out = even && {
        let share: Vec<ProfileId> =
            wanted.iter().flat_map(|&(id, n)| std::iter::repeat_n(id, (n / gpu_count) as usize)).collect();
        match place(model, &Geometry::empty(), &share) {
            Ok(g) => {
                geometries.iter_mut().for_each(|x| *x = g.clone());
                true
            }
            Err(_) => false,
        }
    };
    if !laid_out {
        let mut all: Vec<ProfileId> =
            wanted.iter().flat_map(|&(id, n)| std::iter::repeat_n(id, n as usize)).collect();
        all.sort_by_key(|&id| std::cmp::Reverse(model.profile_info(id).size));
        for id in all {
            let slot = geometries.iter().position(|g| place(model, g, &[id]).is_ok());
            match slot {
                Some(i) => geometries[i] = place(model, &geometries[i], &[id]).expect("just checked"),
                None => {
                    let text: Vec<String> = counts.iter().map(|(p, n)| format!("{n}x {p}")).collect();
                    return Err(err(
                        node_name,
                        format!("metadata.labels.{COUNT_LABEL}"),
                        &gpu_count.to_string(),
                        &format!(
                            "{} do not fit on {gpu_count} {} GPU(s); check the labels or publish a MigNode",
                            text.join(", "),
                            model.key
                        ),
                    ));
                }
            }
        }
    }
    let mut warnings = Vec::new();
    let mut users: BTreeMap<ProfileId, Vec<PodKey>> = BTreeMap::new();
    for (profile, pods) in used {
        match model.profile(profile) {
            Some(id) => users.entry(id).or_default().extend(pods.iter().cloned()),
            None => warnings.push(format!(
                "node {node_name}: pods use {MIG_RESOURCE_PREFIX}{profile}, which {} does not have",
                model.key
            )),
        }
    }
    let mut gpus = Vec::new();
    for (i, g) in geometries.iter().enumerate() {
        let mut instances = Vec::new();
        for p in g.instances() {
            let pod = users.get_mut(&p.profile).and_then(|list| (!list.is_empty()).then(|| list.remove(0)));
            instances.push(Instance {
                profile: model.profile_info(p.profile).name.clone(),
                start: p.start,
                pod,
            });
        }
        gpus.push(Gpu { index: i as u32, model: model.key.clone(), instances });
    }
    for (id, left) in users {
        if !left.is_empty() {
            warnings.push(format!(
                "node {node_name}: {} pod(s) use {} but the node advertises fewer instances; ignored: {}",
                left.len(),
                model.profile_info(id).name,
                left.iter().map(PodKey::as_str).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok((gpus, warnings))
}
