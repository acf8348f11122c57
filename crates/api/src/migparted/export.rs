//! Geometer geometry -> mig-parted config: one config per node, named after the node, with one
//! entry per group of that node's GPUs that have the same instance counts.
//!
//! Sources, each a YAML document (several in a stream, or a `kind: List` as `kubectl get -o
//! yaml` prints):
//! - `MigNode`: current = what the agent reported (`status.gpus`); planned = the desired
//!   geometry (`spec.gpus`), with GPUs the spec does not list as they are now.
//! - `MigPlan`: current = `from`, planned = `to`, for the GPUs the plan lists.
//! - a planning snapshot (`geometer plan`'s input): current only.
//! - a planner result (`geometer plan -o yaml`): current = `from`, planned = `to`, every GPU.

use std::collections::BTreeMap;

use geometer_solver::plan::Plan;
use geometer_solver::snapshot::Snapshot;
use serde_json::Value;

use super::{DeviceEntry, Devices, MigPartedConfig, VERSION};
use crate::{MigNode, MigPlan, PlacedInstance};

/// Which geometry to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// What the GPUs have now.
    Current,
    /// What Geometer is moving them to.
    Planned,
}

/// The GPUs of one node, as a mig-parted config sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    pub node: String,
    pub gpus: Vec<GpuLayout>,
}

/// One GPU: MIG on or off and its instances' profiles (placements are not kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuLayout {
    pub index: u32,
    pub mig_enabled: bool,
    pub profiles: Vec<String>,
}

impl GpuLayout {
    /// A GPU with these instances' profiles; the one instance `whole` is MIG off
    /// (`mig-enabled: false`).
    fn of(index: u32, instances: impl IntoIterator<Item = String>) -> GpuLayout {
        let profiles: Vec<String> = instances.into_iter().collect();
        if matches!(profiles.as_slice(), [p] if p == geometer_solver::catalog::WHOLE) {
            return GpuLayout { index, mig_enabled: false, profiles: Vec::new() };
        }
        GpuLayout { index, mig_enabled: true, profiles }
    }

    fn counts(&self) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for p in &self.profiles {
            *counts.entry(p.clone()).or_insert(0) += 1;
        }
        counts
    }
}

/// Why nothing or not everything could be exported.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExportError {
    #[error("document {index}: {message}")]
    Document { index: usize, message: String },
    #[error(
        "node {node} appears more than once (documents {first} and {second}); export one source per node"
    )]
    DuplicateNode { node: String, first: usize, second: usize },
    #[error("nothing to export: {0}")]
    Empty(String),
}

/// What [`layouts`] found: the nodes to export, and the nodes left out with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub layouts: Vec<NodeLayout>,
    /// E.g. a MigNode whose agent has not reported yet: said, not fatal, unless nothing is left.
    pub skipped: Vec<String>,
}

/// Layouts of every node in `docs` (1-based document numbers in errors), in node name order.
pub fn layouts(docs: &[Value], which: Which) -> Result<Found, ExportError> {
    let mut by_node: BTreeMap<String, (usize, NodeLayout)> = BTreeMap::new();
    let mut skipped = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let index = i + 1;
        for item in items(doc) {
            let found =
                layouts_of(item, which).map_err(|message| ExportError::Document { index, message })?;
            let layouts = match found {
                Ok(layouts) => layouts,
                Err(why) => {
                    skipped.push(why);
                    continue;
                }
            };
            for layout in layouts {
                if let Some(why) = layout_problem(&layout) {
                    skipped.push(format!("node {}: {why}", layout.node));
                    continue;
                }
                if let Some((first, _)) = by_node.get(&layout.node) {
                    return Err(ExportError::DuplicateNode {
                        node: layout.node.clone(),
                        first: *first,
                        second: index,
                    });
                }
                by_node.insert(layout.node.clone(), (index, layout));
            }
        }
    }
    if by_node.is_empty() {
        let why = if skipped.is_empty() {
            "the input holds no MigNode, MigPlan, snapshot or plan with GPUs".to_string()
        } else {
            skipped.join("; ")
        };
        return Err(ExportError::Empty(why));
    }
    Ok(Found { layouts: by_node.into_values().map(|(_, layout)| layout).collect(), skipped })
}

/// Why a node's layout would make a config that import (or mig-parted) refuses, if it would:
/// the same checks as [`MigPartedConfig::parse`], so what export writes, import reads.
fn layout_problem(layout: &NodeLayout) -> Option<String> {
    let max = crate::limits::MAX_GPUS_PER_NODE;
    layout.gpus.iter().find_map(|gpu| {
        let problem = if gpu.index as usize >= max {
            Some(format!("a GPU index is at most {}", max - 1))
        } else {
            gpu.profiles
                .iter()
                .find_map(|p| super::profile_problem(p))
                .or_else(|| super::counts_problem(&gpu.counts()))
        };
        problem.map(|why| format!("GPU {}: {why}", gpu.index))
    })
}

/// `kind: List` (and `MigNodeList`, ...) holds its objects in `items`.
fn items(doc: &Value) -> Vec<&Value> {
    let is_list = doc.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List"));
    match (is_list, doc.get("items").and_then(Value::as_array)) {
        (true, Some(items)) => items.iter().collect(),
        _ => vec![doc],
    }
}

/// Outer error: the document is wrong. Inner error: a MigNode with nothing to export yet.
fn layouts_of(doc: &Value, which: Which) -> Result<Result<Vec<NodeLayout>, String>, String> {
    let kind = doc.get("kind").and_then(Value::as_str);
    match kind {
        Some("MigNode") => {
            let node: MigNode =
                serde_json::from_value(doc.clone()).map_err(|e| format!("not a valid MigNode: {e}"))?;
            Ok(from_mig_node(&node, which).map(|layout| vec![layout]))
        }
        Some("MigPlan") => {
            let plan: MigPlan =
                serde_json::from_value(doc.clone()).map_err(|e| format!("not a valid MigPlan: {e}"))?;
            Ok(Ok(from_mig_plan(&plan, which)))
        }
        Some(other) => {
            Err(format!("kind {other} holds no MIG geometry; give MigNodes, MigPlans, a snapshot or a plan"))
        }
        None if doc.get("solver").is_some() && doc.get("gpus").is_some() => {
            let plan: Plan =
                serde_json::from_value(doc.clone()).map_err(|e| format!("not a valid plan: {e}"))?;
            Ok(Ok(from_plan(&plan, which)))
        }
        None if doc.get("nodes").is_some() => {
            let snapshot: Snapshot =
                serde_json::from_value(doc.clone()).map_err(|e| format!("not a valid snapshot: {e}"))?;
            from_snapshot(&snapshot, which).map(Ok)
        }
        None => Err(
            "neither a Kubernetes object (no kind), a snapshot (no nodes) nor a plan (no solver and gpus)"
                .into(),
        ),
    }
}

/// A MigNode's GPUs. Planned: the spec's geometry for the GPUs it lists, the others as now.
pub fn from_mig_node(node: &MigNode, which: Which) -> Result<NodeLayout, String> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let inventory = node.status.as_ref().map(|s| s.gpus.as_slice()).unwrap_or_default();
    // One GPU listed twice has two layouts, and which one the node has cannot be told.
    let listed_twice = |field: &str, index: Option<u32>| {
        index.map(|i| {
            format!("MigNode {name}: {field} lists GPU {i} twice; each GPU index must appear once (its agent writes status.gpus, the controller spec.gpus)")
        })
    };
    if let Some(why) = listed_twice("status.gpus", repeated(inventory.iter().map(|g| g.index))) {
        return Err(why);
    }
    if which == Which::Planned {
        if let Some(why) = listed_twice("spec.gpus", repeated(node.spec.gpus.iter().map(|g| g.index))) {
            return Err(why);
        }
    }
    let mut gpus: BTreeMap<u32, GpuLayout> = inventory
        .iter()
        .map(|g| {
            let layout = GpuLayout {
                index: g.index,
                mig_enabled: g.mig_mode.current,
                profiles: g.instances.iter().map(|i| i.profile.clone()).collect(),
            };
            (g.index, layout)
        })
        .collect();
    if which == Which::Planned {
        for g in &node.spec.gpus {
            gpus.insert(g.index, GpuLayout::of(g.index, profiles(&g.geometry)));
        }
    }
    if gpus.is_empty() {
        return Err(match which {
            Which::Current => {
                format!("MigNode {name} has no inventory in status.gpus yet (its agent has not reported)")
            }
            Which::Planned => format!(
                "MigNode {name} has neither a desired geometry (spec.gpus) nor an inventory (status.gpus)"
            ),
        });
    }
    Ok(NodeLayout { node: name, gpus: gpus.into_values().collect() })
}

/// The first index that appears a second time.
fn repeated(indices: impl IntoIterator<Item = u32>) -> Option<u32> {
    let mut seen = std::collections::BTreeSet::new();
    indices.into_iter().find(|i| !seen.insert(*i))
}

/// The GPUs a MigPlan lists, per node.
pub fn from_mig_plan(plan: &MigPlan, which: Which) -> Vec<NodeLayout> {
    plan.spec
        .nodes
        .iter()
        .map(|n| NodeLayout {
            node: n.node.clone(),
            gpus: sorted(n.gpus.iter().map(|g| {
                GpuLayout::of(g.index, profiles(if which == Which::Current { &g.from } else { &g.to }))
            })),
        })
        .collect()
}

/// A snapshot's GPUs. It has no planned geometry.
pub fn from_snapshot(snapshot: &Snapshot, which: Which) -> Result<Vec<NodeLayout>, String> {
    if which == Which::Planned {
        return Err("a snapshot holds only the current geometry; use --geometry current, or plan it and export the plan".into());
    }
    Ok(snapshot
        .nodes
        .iter()
        .filter(|n| !n.gpus.is_empty())
        .map(|n| NodeLayout {
            node: n.name.clone(),
            gpus: sorted(
                n.gpus.iter().map(|g| GpuLayout::of(g.index, g.instances.iter().map(|i| i.profile.clone()))),
            ),
        })
        .collect())
}

/// A planner result's GPUs, per node.
pub fn from_plan(plan: &Plan, which: Which) -> Vec<NodeLayout> {
    let mut nodes: BTreeMap<&str, Vec<GpuLayout>> = BTreeMap::new();
    for g in &plan.gpus {
        let placed = if which == Which::Current { &g.from } else { &g.to };
        nodes
            .entry(&g.node)
            .or_default()
            .push(GpuLayout::of(g.index, placed.iter().map(|p| p.profile.clone())));
    }
    nodes.into_iter().map(|(node, gpus)| NodeLayout { node: node.to_string(), gpus: sorted(gpus) }).collect()
}

fn profiles(geometry: &[PlacedInstance]) -> impl Iterator<Item = String> + '_ {
    geometry.iter().map(|p| p.profile.clone())
}

fn sorted(gpus: impl IntoIterator<Item = GpuLayout>) -> Vec<GpuLayout> {
    let mut gpus: Vec<GpuLayout> = gpus.into_iter().collect();
    gpus.sort_by_key(|g| g.index);
    gpus
}

/// One config per node (named by `name(node)`); GPUs with the same MIG mode and counts share an
/// entry, entries in order of their first GPU index.
pub fn to_config(layouts: &[NodeLayout], name: impl Fn(&str) -> String) -> MigPartedConfig {
    let mut mig_configs = BTreeMap::new();
    for layout in layouts {
        let mut entries: Vec<(bool, BTreeMap<String, u32>, Vec<u32>)> = Vec::new();
        for gpu in &layout.gpus {
            let counts = gpu.counts();
            match entries.iter_mut().find(|(mig, c, _)| *mig == gpu.mig_enabled && *c == counts) {
                Some((_, _, indices)) => indices.push(gpu.index),
                None => entries.push((gpu.mig_enabled, counts, vec![gpu.index])),
            }
        }
        let entries = entries
            .into_iter()
            .map(|(mig_enabled, counts, indices)| DeviceEntry {
                device_filter: Vec::new(),
                devices: Devices::Indices(indices),
                mig_enabled,
                mig_devices: mig_enabled.then_some(counts),
            })
            .collect();
        mig_configs.insert(name(&layout.node), entries);
    }
    MigPartedConfig { version: VERSION.to_string(), mig_configs }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mig_node(name: &str, gpu: serde_json::Value) -> Value {
        serde_json::json!({
            "apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode", "metadata": {"name": name},
            "spec": {}, "status": {"gpus": [gpu]}
        })
    }

    fn gpu(index: u32, profiles: &[&str]) -> Value {
        let instances: Vec<Value> = profiles
            .iter()
            .enumerate()
            .map(|(i, p)| {
                serde_json::json!({"profile": p, "start": 0, "size": 1, "gpuInstanceId": i,
                    "computeInstanceId": 0, "uuid": format!("MIG-{index}-{i}")})
            })
            .collect();
        serde_json::json!({"index": index, "uuid": format!("GPU-{index}"), "model": "A100-SXM4-40GB",
            "pciDeviceId": "0x20B010DE", "migMode": {"current": true, "pending": true}, "instances": instances})
    }

    #[test]
    fn export_leaves_out_what_import_would_refuse_and_says_why() {
        let docs = vec![
            mig_node("good", gpu(0, &["3g.20gb", "1g.5gb"])),
            mig_node("compute", gpu(0, &["1c.3g.20gb"])),
            mig_node("crowded", gpu(0, &["1g.5gb"; 17])),
            mig_node("far", gpu(16, &["1g.5gb"])),
        ];
        let found = layouts(&docs, Which::Current).unwrap();
        assert_eq!(found.layouts.iter().map(|l| l.node.as_str()).collect::<Vec<_>>(), ["good"]);
        assert_eq!(found.skipped.len(), 3, "{:?}", found.skipped);
        assert!(
            found.skipped[0].starts_with("node compute: GPU 0: \"1c.3g.20gb\" splits"),
            "{:?}",
            found.skipped
        );
        assert_eq!(
            found.skipped[1],
            "node crowded: GPU 0: 17 instances on one GPU; a MIG GPU holds at most 16"
        );
        assert_eq!(found.skipped[2], "node far: GPU 16: a GPU index is at most 15");
        // What is written reads back, with the same counts.
        let cfg = to_config(&found.layouts, str::to_string);
        let back = MigPartedConfig::parse(&cfg.to_yaml()).unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn a_mig_node_listing_a_gpu_twice_is_skipped_and_named() {
        let mut twice = mig_node("twice", gpu(0, &["3g.20gb"]));
        twice["status"]["gpus"].as_array_mut().unwrap().push(gpu(0, &["7g.40gb"]));
        let docs = vec![mig_node("good", gpu(0, &["3g.20gb"])), twice];
        let found = layouts(&docs, Which::Current).unwrap();
        assert_eq!(found.layouts.iter().map(|l| l.node.as_str()).collect::<Vec<_>>(), ["good"]);
        assert_eq!(
            found.skipped,
            ["MigNode twice: status.gpus lists GPU 0 twice; each GPU index must appear once (its agent writes status.gpus, the controller spec.gpus)"]
        );
    }

    #[test]
    fn gpus_with_equal_counts_share_an_entry_whatever_the_placements() {
        let layout = NodeLayout {
            node: "gpu-1".into(),
            gpus: vec![
                GpuLayout::of(0, ["3g.40gb".into(), "1g.10gb".into()]),
                GpuLayout { index: 1, mig_enabled: false, profiles: vec![] },
                GpuLayout::of(2, ["1g.10gb".into(), "3g.40gb".into()]),
                GpuLayout::of(3, []),
                GpuLayout::of(4, ["whole".into()]),
            ],
        };
        let cfg = to_config(&[layout], str::to_string);
        let entries = cfg.config("gpu-1").unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[1].devices, Devices::Indices(vec![1, 4]), "a whole GPU is MIG off");
        assert_eq!(entries[0].devices, Devices::Indices(vec![0, 2]));
        assert_eq!(
            entries[0].mig_devices.as_ref().unwrap(),
            &BTreeMap::from([("1g.10gb".into(), 1), ("3g.40gb".into(), 1)])
        );
        assert_eq!((entries[1].mig_enabled, entries[1].mig_devices.clone()), (false, None));
        assert_eq!((entries[2].mig_enabled, entries[2].mig_devices.clone()), (true, Some(BTreeMap::new())));
    }
}
