//! Reader for the Alibaba GPU-sharing trace of 2023 (`openb_pod_list_*.csv`,
//! `openb_node_list_*.csv`). The data is research material without a redistribution licence:
//! it is read from a path the user gives and never shipped with the project.

use std::collections::BTreeMap;

use geometer_solver::words::quoted;

use super::records::Table;
use super::{GpuRequest, Trace, TraceError, TracePod};
use crate::cluster::{Cluster, ClusterError, ModelInfo, NodeSpec};

/// One row of an `openb_pod_list_*.csv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlibabaPod {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub num_gpu: u32,
    pub gpu_milli: u32,
    /// Allowed Alibaba GPU models (`V100M16|V100M32`); empty: any.
    pub gpu_spec: Vec<String>,
    pub qos: String,
    /// Seconds, as in the file; the `multigpu*` lists have none.
    pub creation: Option<u64>,
    pub deletion: Option<u64>,
}

/// One row of an `openb_node_list_*.csv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlibabaNode {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpus: u32,
    pub model: String,
}

pub fn read_pods(file: &str, text: &str) -> Result<Vec<AlibabaPod>, TraceError> {
    let table = Table::parse(file, text)?;
    for column in ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"] {
        table.require(column)?;
    }
    let timestamps = table.has("creation_time") && table.has("deletion_time");
    let mut pods = Vec::new();
    for row in table.rows() {
        let name = row.get("name");
        if name.is_empty() {
            return Err(row.error("name", "is required"));
        }
        let num_gpu: u32 = row.number("num_gpu", None)?;
        let gpu_milli: u32 = row.number("gpu_milli", None)?;
        if num_gpu > 64 {
            return Err(row.error("num_gpu", "is more than 64 GPUs"));
        }
        if gpu_milli > 1000 {
            return Err(row.error("gpu_milli", "is more than 1000 (one whole GPU)"));
        }
        if num_gpu > 1 && gpu_milli < 1000 {
            return Err(row.error("gpu_milli", "a share below 1000 is only valid with num_gpu 1"));
        }
        let (creation, deletion) = if timestamps {
            let c: u64 = row.number("creation_time", None)?;
            let d: u64 = row.number("deletion_time", None)?;
            if d < c {
                return Err(row.error("deletion_time", format!("is before creation_time {c}")));
            }
            if d > 1_000_000_000_000 {
                return Err(row.error("deletion_time", "is more than 10^12 seconds"));
            }
            (Some(c), Some(d))
        } else {
            (None, None)
        };
        pods.push(AlibabaPod {
            name: name.to_string(),
            cpu_milli: row.number("cpu_milli", None)?,
            memory_mib: row.number("memory_mib", None)?,
            num_gpu,
            gpu_milli,
            gpu_spec: row.list("gpu_spec"),
            qos: row.get("qos").to_string(),
            creation,
            deletion,
        });
    }
    Ok(pods)
}

pub fn read_nodes(file: &str, text: &str) -> Result<Vec<AlibabaNode>, TraceError> {
    let table = Table::parse(file, text)?;
    for column in ["sn", "cpu_milli", "memory_mib", "gpu", "model"] {
        table.require(column)?;
    }
    let mut nodes = Vec::new();
    for row in table.rows() {
        let gpus: u32 = row.number("gpu", None)?;
        if gpus > 64 {
            return Err(row.error("gpu", "is more than 64 GPUs per node"));
        }
        nodes.push(AlibabaNode {
            name: row.get("sn").to_string(),
            cpu_milli: row.number("cpu_milli", None)?,
            memory_mib: row.number("memory_mib", None)?,
            gpus,
            model: row.get("model").to_string(),
        });
    }
    Ok(nodes)
}

/// Alibaba GPU model codes (`G2`, `T4`, ...) to catalog models, e.g. `G2=H100-80GB,G3=A100-80GB`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelMap(pub BTreeMap<String, String>);

impl ModelMap {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut map = BTreeMap::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (from, to) = item.split_once('=').ok_or_else(|| {
                format!(
                    "--model-map: item {} is not ALIBABA_MODEL=CATALOG_MODEL (e.g. G2=H100-80GB)",
                    quoted(item)
                )
            })?;
            map.insert(from.trim().to_string(), to.trim().to_string());
        }
        Ok(ModelMap(map))
    }

    fn get(&self, model: &str) -> Option<&str> {
        self.0.get(model).map(String::as_str)
    }
}

/// How the pod list becomes a trace: by its own timestamps, or (load mode) all at time 0, the
/// lifetime kept where the file has one, with arrivals assigned later by [`super::load`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    Replay,
    Unordered,
}

/// Converts pod rows into a trace. CPU-only pods are not GPU demand and are left out; `qos`
/// `LS` and `Guaranteed` pods are marked do-not-disrupt; `gpu_spec` models go through `models`,
/// and a constraint naming no simulated model is dropped. Every such decision is counted in
/// the trace's notes.
pub fn to_trace(
    file: &str,
    pods: &[AlibabaPod],
    models: &ModelMap,
    timing: Timing,
) -> Result<Trace, TraceError> {
    let mut trace = Trace::default();
    let (mut cpu_only, mut spec_dropped, mut spec_kept, mut protected) = (0usize, 0usize, 0usize, 0usize);
    for pod in pods {
        if pod.num_gpu == 0 || pod.gpu_milli == 0 {
            cpu_only += 1;
            continue;
        }
        let (arrival, duration) = match (timing, pod.creation, pod.deletion) {
            (Timing::Replay, Some(c), Some(d)) => (c * 1000, Some((d - c) * 1000)),
            (Timing::Unordered, Some(c), Some(d)) => (0, Some((d - c) * 1000)),
            (Timing::Unordered, _, _) => (0, None),
            (Timing::Replay, _, _) => {
                    return Err(TraceError::Invalid {
                        file: file.into(),
                        reason: "this pod list has no creation_time/deletion_time columns (a multigpu variant?); replay it with --load".into(),
                })
            }
        };
        let mut gpu_models: Vec<String> =
            pod.gpu_spec.iter().filter_map(|m| models.get(m)).map(String::from).collect();
        gpu_models.sort();
        gpu_models.dedup();
        if !pod.gpu_spec.is_empty() {
            if gpu_models.is_empty() {
                spec_dropped += 1;
            } else {
                spec_kept += 1;
            }
        }
        let do_not_disrupt = matches!(pod.qos.as_str(), "LS" | "Guaranteed");
        protected += usize::from(do_not_disrupt);
        trace.pods.push(TracePod {
            name: pod.name.clone(),
            arrival,
            duration,
            request: GpuRequest::Share { num_gpu: pod.num_gpu, gpu_milli: pod.gpu_milli },
            cpu_milli: pod.cpu_milli,
            memory_mib: pod.memory_mib,
            priority: 0,
            gpu_models,
            nodes: Vec::new(),
            do_not_disrupt,
            gang: None,
        });
    }
    trace.pods.sort_by_key(|p| p.arrival);
    let notes = &mut trace.notes;
    notes.push(format!(
        "{file}: {} GPU pods read; {cpu_only} CPU-only pods left out (not GPU demand)",
        trace.pods.len()
    ));
    notes.push(format!(
        "{protected} pods with qos LS or Guaranteed are do-not-disrupt; BE and Burstable pods may be evicted"
    ));
    if spec_kept + spec_dropped > 0 {
        notes.push(format!(
            "gpu_spec: {spec_kept} pods constrained to mapped models; {spec_dropped} pods named only models outside --model-map, constraint ignored"
        ));
    }
    Ok(trace)
}

/// Builds a cluster from a node list: each GPU node whose model `models` maps to a catalog
/// model keeps its GPU count, CPU and memory; other nodes are left out and counted in the notes.
pub fn cluster_from_nodes(
    nodes: &[AlibabaNode],
    models: &ModelMap,
    mut resolve: impl FnMut(&str) -> Option<ModelInfo>,
) -> Result<(Cluster, Vec<String>), ClusterError> {
    let mut infos: Vec<ModelInfo> = Vec::new();
    let mut specs = Vec::new();
    let mut dropped: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for node in nodes.iter().filter(|n| n.gpus > 0) {
        let Some(target) = models.get(&node.model) else {
            let entry = dropped.entry(node.model.clone()).or_default();
            entry.0 += 1;
            entry.1 += u64::from(node.gpus);
            continue;
        };
        let info = resolve(target).ok_or_else(|| ClusterError::UnknownModel {
            entry: format!("--model-map {}={target}", node.model),
            model: target.to_string(),
        })?;
        if info.full_profile().is_none() {
            return Err(ClusterError::NoFullProfile { model: info.name });
        }
        let index = match infos.iter().position(|m| m.name == info.name) {
            Some(i) => i,
            None => {
                infos.push(info);
                infos.len() - 1
            }
        };
        specs.push(NodeSpec {
            name: node.name.clone(),
            model: index,
            gpus: node.gpus,
            cpu_milli: Some(node.cpu_milli),
            memory_mib: Some(node.memory_mib),
        });
    }
    let notes = dropped
        .into_iter()
        .map(|(model, (n, g))| {
            format!(
                "node list: {n} nodes ({g} GPUs) of model {} left out: not in --model-map",
                quoted(&model)
            )
        })
        .collect();
    Ok((Cluster::new(infos, specs)?, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
        openb-pod-0001,4000,15258,1,470,nan,BE,Running,10,70,10\n\
        openb-pod-0002,8000,30000,0,0,,LS,Running,12,20,\n\
        openb-pod-0003,88000,327680,8,1000,G2|T4,LS,Failed,15,25,\n";

    #[test]
    fn replay_uses_timestamps_and_drops_cpu_only_pods() {
        let pods = read_pods("p.csv", PODS).unwrap();
        assert_eq!(pods.len(), 3);
        let map = ModelMap::parse("G2=H100-80GB").unwrap();
        let t = to_trace("p.csv", &pods, &map, Timing::Replay).unwrap();
        assert_eq!(t.pods.len(), 2);
        assert_eq!((t.pods[0].arrival, t.pods[0].duration), (10_000, Some(60_000)));
        assert_eq!(t.pods[0].request, GpuRequest::Share { num_gpu: 1, gpu_milli: 470 });
        assert!(!t.pods[0].do_not_disrupt && t.pods[1].do_not_disrupt);
        assert_eq!(t.pods[1].gpu_models, ["H100-80GB"]);
        assert!(t.notes[0].contains("1 CPU-only"), "{:?}", t.notes);
    }

    #[test]
    fn a_pod_list_saved_with_a_byte_order_mark_reads_the_same_pods() {
        assert_eq!(
            read_pods("p.csv", &format!("\u{feff}{PODS}")).unwrap(),
            read_pods("p.csv", PODS).unwrap()
        );
    }

    #[test]
    fn five_column_lists_need_load_mode() {
        let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nopenb-pod-8152,1000,100,2,1000\n";
        let pods = read_pods("m.csv", text).unwrap();
        let e = to_trace("m.csv", &pods, &ModelMap::default(), Timing::Replay).unwrap_err().to_string();
        assert!(e.contains("--load"), "{e}");
        assert_eq!(to_trace("m.csv", &pods, &ModelMap::default(), Timing::Unordered).unwrap().pods.len(), 1);
    }

    #[test]
    fn bad_rows_name_the_field() {
        let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,100,2,500\n";
        let e = read_pods("m.csv", text).unwrap_err().to_string();
        assert!(e.contains("\"gpu_milli\"") && e.contains("\"500\""), "{e}");
        let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,lots,100,1,500\n";
        let e = read_pods("m.csv", text).unwrap_err().to_string();
        assert!(e.contains("\"cpu_milli\"") && e.contains("\"lots\""), "{e}");
        let e = read_pods("m.csv", "name,cpu_milli\n").unwrap_err().to_string();
        assert!(e.contains("missing column \"memory_mib\""), "{e}");
    }
}
