//! Whole GPUs (MIG mode off): a trace's whole-GPU pods are demand for GPUs with MIG mode off
//! (`--whole-gpus whole`, the default) or, as before, the full-GPU MIG profile
//! (`--whole-gpus full-profile`). On Hopper GPUs: an Ampere GPU keeps its MIG mode (its mode
//! changes only through a GPU reset; `solver/tests/planner/whole.rs`).

use std::process::Command;

use geometer_sim::cluster::{parse_cluster_spec, Cluster};
use geometer_sim::engine::{Engine, Timings};
use geometer_sim::mapping::{Mapping, WholeGpus};
use geometer_sim::metrics::Summary;
use geometer_sim::models::{resolve, static_geometry};
use geometer_sim::strategy::{PlannerStrategy, StaticLayout, StaticStrategy, Strategy, StrategyKind};
use geometer_sim::trace::geometer as trace_format;
use geometer_sim::workload::{Workload, WHOLE_GPU};
use geometer_solver::catalog::Catalog;

fn cluster(spec: &str) -> Cluster {
    parse_cluster_spec(spec, |m| resolve(Catalog::builtin(), m)).unwrap()
}

fn workload(csv: &str, cluster: &Cluster, whole: WholeGpus) -> Workload {
    Workload::new(&trace_format::parse("t.csv", csv).unwrap(), cluster, Mapping::Compute, whole)
}

fn run(strategy: &mut dyn Strategy, cluster: &Cluster, workload: &Workload) -> Summary {
    Engine::new(cluster, workload, Timings::default(), strategy).run().unwrap()
}

fn planned(kind: StrategyKind, cluster: &Cluster, workload: &Workload) -> Summary {
    let mut strategy = PlannerStrategy::new(kind, Catalog::builtin(), cluster, workload, 5_000, 0).unwrap();
    run(&mut strategy, cluster, workload)
}

fn first_start(s: &Summary, w: &Workload, name: &str) -> Option<u64> {
    s.outcomes[w.pods.iter().position(|p| p.name == name).unwrap()].first_start
}

/// Two inference pods on slices, then three training pods of one GPU each.
const TRAINING: &str = "name,arrival_s,duration_s,mig,num_gpu\n\
    infer-0,0,3000,3g.40gb,\n\
    infer-1,0,3000,4g.40gb,\n\
    train-0,60,1200,,1\n\
    train-1,60,1200,,1\n\
    train-2,61,1200,,1\n";

#[test]
fn whole_gpu_pods_ask_for_the_whole_profile_or_the_full_profile() {
    let c = cluster("1xH100-80GB:4");
    let whole = workload(TRAINING, &c, WholeGpus::Whole);
    assert_eq!(whole.profiles[WHOLE_GPU], "whole");
    assert_eq!(whole.pods[2].mig, vec![(WHOLE_GPU, 1)]);
    // Same need as the full-GPU profile: all 8 memory slices.
    assert_eq!(whole.pods[2].need_memory_slices, 8);
    let old = workload(TRAINING, &c, WholeGpus::FullProfile);
    assert_eq!(old.profiles[old.pods[2].mig[0].0], "7g.80gb");
    assert_eq!(old.pods[2].need_memory_slices, 8);
}

#[test]
fn geometer_and_greedy_turn_idle_gpus_mig_off_for_a_training_burst() {
    let c = cluster("1xH100-80GB:4");
    let w = workload(TRAINING, &c, WholeGpus::Whole);
    for kind in [StrategyKind::Greedy, StrategyKind::Geometer, StrategyKind::GeometerEvict] {
        let s = planned(kind, &c, &w);
        assert_eq!((s.served, s.not_served, s.evictions), (5, 0, 0), "{kind}");
        // The two slices share one GPU; the three others leave MIG in the batch after 61 s
        // (ends at 66 s) and are ready 30 s later.
        for name in ["train-0", "train-1", "train-2"] {
            assert_eq!(first_start(&s, &w, name), Some(96_000), "{kind}: {name}");
        }
        // Nothing asks for slices again: the three stay whole to the end.
        assert_eq!(s.whole_gpus_end, 3, "{kind}");
        assert!(s.whole_gpus_mean() > 2.0 && s.whole_gpus_mean() < 3.0, "{kind}: {}", s.whole_gpus_mean());
    }
}

#[test]
fn the_full_profile_option_keeps_the_old_behaviour() {
    let c = cluster("1xH100-80GB:4");
    let w = workload(TRAINING, &c, WholeGpus::FullProfile);
    for kind in [StrategyKind::Greedy, StrategyKind::Geometer, StrategyKind::GeometerEvict] {
        let s = planned(kind, &c, &w);
        assert_eq!(s.served, 5, "{kind}");
        // The training pods run on 7g.80gb instances: no GPU ever leaves MIG.
        assert_eq!((s.whole_gpus_end, s.whole_gpu_integral), (0, 0), "{kind}");
        assert!(s.series.iter().all(|sample| sample.whole_gpus == 0), "{kind}");
        for name in ["train-0", "train-1", "train-2"] {
            assert_eq!(first_start(&s, &w, name), Some(96_000), "{kind}: {name}");
        }
    }
}

#[test]
fn a_gpu_running_a_whole_gpu_pod_keeps_its_mode_until_the_pod_ends() {
    // One GPU, whole for `train` (0..1035 s once ready at 35 s); slices wait for it, then the
    // GPU goes back to MIG: two reconfigurations, none while `train` runs.
    let c = cluster("1xH100-80GB:1");
    let csv = "name,arrival_s,duration_s,mig,num_gpu\ntrain,0,1000,,1\nsmall,100,100,1g.10gb,\n";
    let w = workload(csv, &c, WholeGpus::Whole);
    for kind in [StrategyKind::Greedy, StrategyKind::Geometer] {
        let s = planned(kind, &c, &w);
        assert_eq!(first_start(&s, &w, "train"), Some(35_000), "{kind}");
        // Departure at 1035 s, batch to 1040 s, ready at 1070 s.
        assert_eq!(first_start(&s, &w, "small"), Some(1_070_000), "{kind}");
        assert_eq!((s.served, s.gpus_reconfigured, s.whole_gpus_end), (2, 2, 0), "{kind}");
        // Whole from 35 s until the reconfiguration that ends it completes at 1070 s.
        assert_eq!(s.whole_gpu_integral, 1_035_000, "{kind}");
    }
}

#[test]
fn static_layouts_serve_no_whole_gpu_pods() {
    let c = cluster("1xH100-80GB:4");
    let w = workload(TRAINING, &c, WholeGpus::Whole);
    let model = Catalog::builtin().find("H100-80GB").unwrap();
    let geometry = static_geometry(StaticLayout::AllBalanced, model, &w).unwrap();
    let mut strategy = StaticStrategy { layout: StaticLayout::AllBalanced, geometries: vec![geometry] };
    let s = run(&mut strategy, &c, &w);
    // infer-0 (3g.40gb) fits the balanced layout; 4g.40gb and the training pods do not.
    assert_eq!((s.served, s.not_served, s.whole_gpus_end), (1, 4, 0));
    assert!(first_start(&s, &w, "infer-0").is_some());
    for name in ["train-0", "train-1", "train-2"] {
        assert_eq!(first_start(&s, &w, name), None, "{name}");
    }
}

#[test]
fn whole_gpu_pods_cannot_use_ampere_gpus_the_planners_keep_in_mig() {
    // Six training pods that never finish on 2 A100 and 2 H100 GPUs: demand (40 memory slices,
    // then 48) exceeds capacity (32) from the start, but the planners never turn an A100
    // whole, so the pods could hold the H100s' 16 slices at most.
    let c = cluster("1xA100-80GB:2,1xH100-80GB:2");
    let csv = "name,arrival_s,duration_s,mig,num_gpu\n\
        t0,0,,,1\nt1,0,,,1\nt2,0,,,1\nt3,0,,,1\nt4,0,,,1\nt5,100,,,1\n";
    let w = workload(csv, &c, WholeGpus::Whole);
    for kind in [StrategyKind::Greedy, StrategyKind::Geometer] {
        let s = planned(kind, &c, &w);
        assert_eq!((s.served, s.whole_gpus_end), (2, 2), "{kind}");
        assert_eq!(s.saturated_usable_share(), Some(0.5), "{kind}");
        let held = s.saturated_memory_share().unwrap();
        assert!(held > 0.0 && held < 0.5, "{kind}: {held}");
    }
    // With MIG off everywhere every GPU takes one: the pods could hold all of them.
    let s = run(&mut geometer_sim::strategy::WholeGpu, &c, &w);
    assert_eq!(s.served, 4);
    assert_eq!(s.saturated_usable_share(), Some(1.0));
    assert_eq!(s.saturated_memory_share(), Some(1.0));
}

#[test]
fn the_usable_bound_counts_a_profile_at_its_largest_size() {
    // `1g.10gb` holds 2 memory slices on an A100-40GB and 1 on an H100-80GB; `1g.20gb` exists
    // only on the H100. Four of each fill both GPUs (16 slices), so the bound must allow 16,
    // though counting `1g.10gb` at 1 slice would say 12 (every step checks allocated <= usable).
    let c = cluster("1xH100-80GB:1,1xA100-40GB:1");
    let mut csv = String::from("name,arrival_s,duration_s,mig,num_gpu\n");
    for i in 0..4 {
        csv.push_str(&format!("small-{i},0,,1g.10gb,\n"));
    }
    for i in 0..7 {
        csv.push_str(&format!("big-{i},{},,1g.20gb,\n", 10 + i));
    }
    let w = workload(&csv, &c, WholeGpus::Whole);
    let s = planned(StrategyKind::Geometer, &c, &w);
    assert_eq!(s.saturated_usable_share(), Some(1.0));
    assert_eq!(s.served, 8, "{:?}", s.outcomes);
}

fn geometer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_geometer"))
}

/// The first 14 GPU rows of Alibaba's `openb_pod_list_multigpu40.csv` (cluster-trace-gpu-v2023):
/// whole GPUs, 460 milli-GPU shares and one 8-GPU pod.
const ALIBABA: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\
    openb-pod-0000,12000,16384,1,1000\n\
    openb-pod-0001,6000,12288,1,460\n\
    openb-pod-0002,12000,24576,1,1000\n\
    openb-pod-0003,6000,12288,1,460\n\
    openb-pod-0004,12000,16384,1,1000\n\
    openb-pod-0006,4000,16384,1,1000\n\
    openb-pod-0007,12000,16384,1,1000\n\
    openb-pod-0008,12000,16384,1,1000\n\
    openb-pod-0009,12000,16384,1,1000\n\
    openb-pod-0010,16000,49152,1,1000\n\
    openb-pod-0011,6000,8192,1,460\n\
    openb-pod-0012,8000,32768,1,1000\n\
    openb-pod-0017,88000,327680,8,1000\n";

/// The cell of the table row whose first cell is `row`, in the column headed `column`.
fn cell(stdout: &str, row: &str, column: &str) -> String {
    let header = stdout.lines().find(|l| l.starts_with("| strategy |")).unwrap_or_else(|| panic!("{stdout}"));
    let index = header.split('|').position(|c| c.trim() == column).unwrap_or_else(|| panic!("{header}"));
    let line =
        stdout.lines().find(|l| l.starts_with(&format!("| {row} |"))).unwrap_or_else(|| panic!("{stdout}"));
    line.split('|').nth(index).unwrap().trim().to_string()
}

fn whole_end(stdout: &str, row: &str) -> u32 {
    let text = cell(stdout, row, "GPUs whole (mean / end)");
    text.split(" / ").nth(1).unwrap_or_else(|| panic!("{text}")).parse().unwrap()
}

#[test]
fn the_cli_reports_whole_gpus_per_strategy_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("openb_pod_list_excerpt.csv");
    std::fs::write(&trace, ALIBABA).unwrap();
    let simulate = |mode: Option<&str>, out: &str| {
        let mut command = geometer();
        command.args(["simulate", "--trace"]).arg(&trace).args([
            "--cluster",
            "1xA100-80GB:8,1xH100-80GB:8",
            "--load",
            "1.0",
            "--seed",
            "42",
            "--strategy",
            "whole-gpu,static:all-balanced,greedy,geometer",
            "-o",
        ]);
        command.arg(dir.path().join(out));
        if let Some(mode) = mode {
            command.args(["--whole-gpus", mode]);
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let whole = simulate(None, "whole");
    assert!(whole.contains("--whole-gpus whole;"), "{whole}");
    assert!(whole.contains("asking for GPUs with MIG off"), "{whole}");
    // Without MIG every GPU is whole from start to end; the static layout never leaves MIG.
    assert_eq!(cell(&whole, "whole-gpu", "GPUs whole (mean / end)"), "16.0 / 16");
    assert_eq!(cell(&whole, "static:all-balanced", "GPUs whole (mean / end)"), "0.0 / 0");
    for strategy in ["greedy", "geometer"] {
        assert!(whole_end(&whole, strategy) >= 8, "{strategy} runs the 8-GPU pod on whole GPUs\n{whole}");
    }
    let bound: usize = cell(&whole, "upper bound (capacity)", "pods served").parse().unwrap();
    for strategy in ["whole-gpu", "static:all-balanced", "greedy", "geometer"] {
        let served: usize = cell(&whole, strategy, "pods served").parse().unwrap();
        assert!(served <= bound, "{strategy} beats the bound\n{whole}");
    }
    // The whole-GPU pods are most of the submitted pods: the bound counts them.
    assert!(bound >= 10, "{whole}");

    let old = simulate(Some("full-profile"), "full-profile");
    assert!(old.contains("--whole-gpus full-profile;"), "{old}");
    assert!(old.contains("mapped to the full-GPU profile per GPU"), "{old}");
    for strategy in ["static:all-balanced", "greedy", "geometer"] {
        assert_eq!(cell(&old, strategy, "GPUs whole (mean / end)"), "0.0 / 0", "{strategy}\n{old}");
    }
    // The same pods fit the same capacity either way.
    assert_eq!(cell(&old, "upper bound (capacity)", "pods served"), bound.to_string());

    let csv = std::fs::read_to_string(dir.path().join("whole/summary.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
    let geometer_row: Vec<&str> =
        csv.lines().find(|l| l.starts_with("geometer,")).unwrap().split(',').collect();
    assert!(geometer_row[column("whole_gpus_end")].parse::<u32>().unwrap() >= 8, "{csv}");
    assert!(geometer_row[column("whole_gpus_mean")].parse::<f64>().unwrap() > 0.0, "{csv}");
}

#[test]
fn an_unknown_whole_gpus_value_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, TRAINING).unwrap();
    let out = geometer()
        .args(["simulate", "--cluster", "1xA100-80GB:1", "--whole-gpus", "mig-off", "--trace"])
        .arg(&trace)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mig-off") && stderr.contains("full-profile"), "{stderr}");
}

/// One training pod, then two more 200 s later, on one H100 node of four GPUs in MIG mode with no
/// instance, under a 600 s stabilisation window.
const LATE_TRAINING: &str = "name,arrival_s,duration_s,mig,num_gpu\n\
    train-0,0,5000,,1\n\
    train-1,200,5000,,1\n\
    train-2,200,5000,,1\n";

#[test]
fn under_a_window_the_node_turned_whole_for_one_pod_is_ready_for_the_next() {
    let c = cluster("1xH100-80GB:4");
    let w = workload(LATE_TRAINING, &c, WholeGpus::Whole);
    let timings = Timings { stabilisation: 600_000, ..Timings::default() };
    let run_with = |kind: StrategyKind| {
        let mut strategy = PlannerStrategy::new(kind, Catalog::builtin(), &c, &w, 5_000, 0)
            .unwrap()
            .with_stabilisation(timings.stabilisation);
        Engine::new(&c, &w, timings, &mut strategy).run().unwrap()
    };
    for kind in [StrategyKind::Geometer, StrategyKind::GeometerEvict] {
        let s = run_with(kind);
        // The first plan turns the node's three other GPUs whole as well: the later pods start on
        // arrival instead of waiting for the window to end.
        assert_eq!(first_start(&s, &w, "train-1"), Some(200_000), "{kind}");
        assert_eq!(first_start(&s, &w, "train-2"), Some(200_000), "{kind}");
    }
    // The greedy baseline leaves the other GPUs empty: its later pods wait for the window.
    let s = run_with(StrategyKind::Greedy);
    assert!(first_start(&s, &w, "train-1").unwrap() >= 600_000, "{:?}", first_start(&s, &w, "train-1"));
}
