//! The embedded default scenario: a small mixed fleet of A100-80GB and H100-80GB nodes with a
//! static geometry an administrator might pick, and a workload whose profile mix shifts from
//! training (with whole-GPU jobs) to an inference burst to large fine-tuning jobs.

use std::time::Duration;

use crate::{ClusterSpec, GpuSpec, NodeSpec};

/// GPUs per node in the default scenario.
pub const GPUS_PER_NODE: usize = 8;

/// One stretch of the workload with a steady profile mix.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    /// Share of the workload's duration.
    pub share: f64,
    /// New pods per scenario second per node.
    pub arrivals_per_node_second: f64,
    /// `(profile, weight)`.
    pub mix: Vec<(&'static str, u32)>,
    /// Run time of each pod, drawn uniformly from this range (scenario seconds).
    pub run_seconds: (f64, f64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub cluster: ClusterSpec,
    pub phases: Vec<Phase>,
}

/// The model whole-GPU jobs run on. An Ampere GPU changes MIG mode only through a GPU reset
/// with every NVML client stopped (NVIDIA MIG user guide, "Enable MIG Mode"), so the planner
/// never changes an A100's mode; Hopper changes mode when idle. So the demo's training jobs ask
/// for the Hopper nodes, and only those have a GPU with MIG off to start with.
pub const WHOLE_GPU_MODEL: &str = "H100-80GB";

/// What an administrator set up in advance: mostly halves for training, a full-size slice, one
/// GPU with MIG off for whole-GPU jobs (on the Hopper nodes), and a few small slices. Placements
/// are legal on both A100-80GB and H100-80GB.
fn static_geometry(gpu: usize, model: &str) -> Vec<(&'static str, u8)> {
    match gpu {
        0..=3 => vec![("3g.40gb", 0), ("3g.40gb", 4)],
        4 => vec![("7g.80gb", 0)],
        5 if model == WHOLE_GPU_MODEL => vec![(geometer_solver::catalog::WHOLE, 0)],
        _ => vec![("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)],
    }
}

/// Node `i` (from 1): odd ones A100-80GB, even ones H100-80GB.
fn node(i: usize, width: usize) -> NodeSpec {
    let (model, family) = if i % 2 == 1 { ("A100-80GB", "a100") } else { ("H100-80GB", "h100") };
    let gpus = (0..GPUS_PER_NODE)
        .map(|g| {
            let geometry: Vec<(&str, u8)> = static_geometry(g, model);
            GpuSpec::new(model, &geometry)
        })
        .collect();
    NodeSpec { gpus, ..NodeSpec::new(format!("gpu-{family}-{i:0width$}"), model, 0, &[]) }
        .label("geometer.dev/pool", "mig")
}

impl Scenario {
    /// The default scenario on `nodes` nodes (4 unless asked otherwise). Each mutating NVML call
    /// takes `nvml_latency`, as instance creation does on real GPUs.
    pub fn default_with(nodes: usize, nvml_latency: Duration) -> Scenario {
        let width = nodes.to_string().len();
        let cluster =
            ClusterSpec::new((1..=nodes).map(|i| node(i, width)).collect()).with_nvml_latency(nvml_latency);
        Scenario {
            cluster,
            phases: vec![
                Phase {
                    // Training jobs ask for whole GPUs (`nvidia.com/gpu`): GPUs leave MIG mode
                    // for them, and come back to MIG for the inference burst.
                    name: "training",
                    share: 0.3,
                    arrivals_per_node_second: 0.27,
                    mix: vec![
                        (geometer_solver::catalog::WHOLE, 25),
                        ("3g.40gb", 40),
                        ("7g.80gb", 10),
                        ("2g.20gb", 15),
                        ("1g.10gb", 10),
                    ],
                    run_seconds: (24.0, 48.0),
                },
                Phase {
                    name: "inference burst",
                    share: 0.4,
                    arrivals_per_node_second: 0.67,
                    mix: vec![("1g.10gb", 65), ("2g.20gb", 20), ("3g.40gb", 15)],
                    run_seconds: (18.0, 42.0),
                },
                Phase {
                    name: "fine-tuning",
                    share: 0.3,
                    arrivals_per_node_second: 0.2,
                    mix: vec![("7g.80gb", 40), ("4g.40gb", 20), ("3g.40gb", 20), ("1g.10gb", 20)],
                    run_seconds: (24.0, 48.0),
                },
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use geometer_solver::catalog::Catalog;

    use super::*;

    #[test]
    fn every_profile_in_the_scenario_exists_on_both_models() {
        let s = Scenario::default_with(4, Duration::ZERO);
        let catalog = Catalog::builtin();
        for model in ["A100-80GB", "H100-80GB"] {
            let m = catalog.find(model).unwrap();
            for p in s.phases.iter().flat_map(|p| &p.mix).map(|(p, _)| *p) {
                assert!(m.profile(p).is_some(), "{model} has no {p}");
            }
        }
        assert_eq!(s.cluster.nodes.len(), 4);
        assert_eq!(s.cluster.gpu_count(), 32);
        assert!((s.phases.iter().map(|p| p.share).sum::<f64>() - 1.0).abs() < 1e-9);
    }
}
