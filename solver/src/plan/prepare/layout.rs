//! Nodes and GPUs in name and index order, each instance with who holds it now, and the GPUs
//! each running pod's instances are on.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::GpuModel;
use crate::geometry::{Geometry, Placed};
use crate::snapshot::{Node, PodKey};

use super::tables::ModelNames;
use super::{GpuInfo, NodeInfo, User};

pub(super) struct Layout<'a> {
    pub nodes: Vec<NodeInfo<'a>>,
    pub gpus: Vec<GpuInfo>,
    /// By pod key (`namespace/name`): the GPUs holding its instances.
    pub pod_gpus: BTreeMap<&'a PodKey, BTreeSet<usize>>,
}

pub(super) fn layout<'a>(node_order: &[&'a Node], models: &[&GpuModel], names: &ModelNames) -> Layout<'a> {
    let mut out =
        Layout { nodes: Vec::with_capacity(node_order.len()), gpus: Vec::new(), pod_gpus: BTreeMap::new() };
    for (n, node) in node_order.iter().enumerate() {
        let mut order: Vec<_> = node.gpus.iter().collect();
        order.sort_by_key(|g| g.index);
        let mut ids = Vec::new();
        for gpu in order {
            let model_idx = names.index(&gpu.model);
            let model = models[model_idx];
            let mut placed: Vec<(Placed, Option<&PodKey>)> = gpu
                .instances
                .iter()
                .map(|i| {
                    (Placed::new(model.profile(&i.profile).expect("validated"), i.start), i.pod.as_ref())
                })
                .collect();
            placed.sort();
            for pod in placed.iter().filter_map(|(_, pod)| *pod) {
                out.pod_gpus.entry(pod).or_default().insert(out.gpus.len());
            }
            let current = Geometry::new(placed.iter().map(|(p, _)| *p).collect());
            let users =
                placed.iter().map(|(_, pod)| if pod.is_some() { User::Pinned } else { User::Free }).collect();
            ids.push(out.gpus.len());
            out.gpus.push(GpuInfo { node: n, index: gpu.index, model: model_idx, current, users });
        }
        out.nodes.push(NodeInfo {
            name: node.name.as_str(),
            gpus: ids,
            free_cpu: node.free_cpu_millis,
            free_memory: node.free_memory_bytes,
        });
    }
    out
}
