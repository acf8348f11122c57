//! `geometer simulate`: replays a workload trace on a simulated cluster under several allocation
//! strategies and compares them (Markdown on stdout; CSV and an SVG chart with `-o DIR`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, Context};
use clap::{Args, ValueEnum};
use geometer_solver::catalog::Catalog;

use super::catalog::CatalogSource;
use super::output::Failure;
use geometer_sim::cluster::{parse_cluster_spec, Cluster};
use geometer_sim::engine::{Engine, Timings};
use geometer_sim::mapping::{Mapping, WholeGpus};
use geometer_sim::metrics::Summary;
use geometer_sim::models;
use geometer_sim::report;
use geometer_sim::strategy::{PlannerStrategy, StaticStrategy, Strategy, StrategyKind, WholeGpu};
use geometer_sim::trace::load::{self, Lifetime, LoadMode};
use geometer_sim::trace::synthetic::Synthetic;
use geometer_sim::trace::{alibaba, geometer, GpuRequest, Millis, Trace};
use geometer_sim::workload::Workload;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceFormat {
    /// Alibaba when the header has `gpu_milli` but no `arrival_s`, else Geometer's format.
    Auto,
    /// Geometer's trace format, CSV or YAML (see docs/simulator.md, "Trace format (Geometer)").
    Geometer,
    /// An Alibaba `openb_pod_list_*.csv` (cluster-trace-gpu-v2023).
    Alibaba,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LifetimeArg {
    /// Pods never finish (the trace authors' mode): the cluster only fills up.
    Forever,
    /// Pods keep the lifetime the trace gives them.
    Trace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WholeGpusArg {
    /// Whole-GPU demand: pods run on GPUs with MIG mode off, one whole GPU each; Geometer and
    /// greedy turn MIG off (and back on) where the planner says so.
    Whole,
    /// The full-GPU MIG profile (e.g. 7g.80gb) once per GPU: MIG stays on everywhere.
    FullProfile,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Workload trace to replay (Geometer CSV/YAML, or an Alibaba pod list).
    #[arg(long, value_name = "FILE", required_unless_present = "generate")]
    pub trace: Option<PathBuf>,
    /// Format of --trace.
    #[arg(long, value_enum, default_value_t = TraceFormat::Auto)]
    pub format: TraceFormat,
    /// Cluster as NODESxMODEL:GPUS entries, e.g. `4xA100-80GB:8,4xH100-80GB:8`; optional
    /// `:cpu=CORES:mem=GIB` per entry (without them CPU and memory always fit).
    #[arg(long, value_name = "SPEC", required_unless_present_any = ["generate", "node_list"])]
    pub cluster: Option<String>,
    /// Build the cluster from an Alibaba `openb_node_list_*.csv` instead of --cluster; node
    /// models go through --model-map and unmapped nodes are left out.
    #[arg(long, value_name = "FILE", conflicts_with = "cluster")]
    pub node_list: Option<PathBuf>,
    /// Alibaba GPU models to catalog models, e.g. `G2=H100-80GB,G3=A100-80GB`; used for
    /// --node-list and for pods' gpu_spec constraints.
    #[arg(long, value_name = "MAP", default_value = "")]
    pub model_map: String,
    /// Strategy to run (repeat for several; default all): whole-gpu, static:all-balanced,
    /// static:all-1g, greedy, geometer, geometer-evict, geometer-no-gangs (Geometer planning
    /// every pod on its own; in the default set only when the trace has gangs).
    #[arg(long = "strategy", value_name = "S")]
    pub strategies: Vec<String>,
    /// Seed for the load mode's shuffle and for --generate.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// How a GPU share (gpu_milli) becomes a MIG profile: compute, memory, or memory:GIB.
    #[arg(long, default_value = "compute")]
    pub mapping: String,
    /// What pods asking for whole GPUs (gpu_milli 1000) become.
    #[arg(long, value_enum, default_value_t = WholeGpusArg::Whole)]
    pub whole_gpus: WholeGpusArg,
    /// Load mode: submit pods in shuffled order until their GPU requests reach this multiple of
    /// the cluster's GPUs (e.g. 1.3), one every --interval-secs; without it, replay timestamps.
    #[arg(long, value_name = "SHARE", value_parser = crate::cli::bounds::load_share)]
    pub load: Option<f64>,
    /// Load mode: the GPU count the load is a share of (default: the cluster's GPUs). Lets the
    /// same pods run on clusters of different sizes.
    #[arg(long, value_name = "N", value_parser = crate::cli::bounds::load_gpus)]
    pub load_gpus: Option<u64>,
    /// Load mode: seconds between two submissions.
    #[arg(long, default_value_t = 1.0, value_parser = crate::cli::bounds::interval_seconds)]
    pub interval_secs: f64,
    /// Load mode: how long pods run.
    #[arg(long, value_enum, default_value_t = LifetimeArg::Forever)]
    pub lifetime: LifetimeArg,
    /// Modelled drain: seconds to evict pods and see them go (only when a plan evicts).
    #[arg(long, default_value_t = 30.0, value_parser = crate::cli::bounds::scenario_seconds)]
    pub drain_secs: f64,
    /// Modelled NVML reconfiguration of a node's GPUs, in seconds.
    #[arg(long, default_value_t = 10.0, value_parser = crate::cli::bounds::scenario_seconds)]
    pub reconfig_secs: f64,
    /// Modelled device-plugin restart until the new slices are advertised, in seconds.
    #[arg(long, default_value_t = 20.0, value_parser = crate::cli::bounds::scenario_seconds)]
    pub plugin_restart_secs: f64,
    /// Batching: plan once demand has been quiet this many seconds...
    #[arg(long, default_value_t = 5.0, value_parser = crate::cli::bounds::scenario_seconds)]
    pub batch_idle_secs: f64,
    /// ...or this many seconds after the batch opened.
    #[arg(long, default_value_t = 30.0, value_parser = crate::cli::bounds::scenario_seconds)]
    pub batch_max_secs: f64,
    /// A node a plan changed is not planned again for this many seconds (MigPolicy
    /// `stabilisationSeconds`; the default is the policy's). 0 lets every batch change any node.
    #[arg(long, default_value_t = 600.0, value_parser = crate::cli::bounds::scenario_seconds)]
    pub stabilisation_secs: f64,
    /// Geometer's forecast (MigPolicy `spec.forecastWindowSeconds`): slices that pods arriving in
    /// the last this many seconds asked for are prepared on free capacity ahead of the next
    /// ones. 0 turns it off. Default: one batch plus one reconfiguration (60 s with the
    /// defaults). The greedy baseline never forecasts.
    #[arg(long, value_name = "SECS", value_parser = crate::cli::bounds::scenario_seconds)]
    pub forecast_secs: Option<f64>,
    /// A gang member holding its slices waits this long for the rest of its gang before the
    /// gang's waiting members give them back (the Coscheduling plugin's
    /// permitWaitingTimeSeconds). 0: they wait for ever.
    #[arg(long, default_value_t = 60.0, value_parser = crate::cli::bounds::scenario_seconds)]
    pub gang_timeout_secs: f64,
    /// Pods asking for more than one whole GPU (num_gpu > 1, gpu_milli 1000) become gangs of
    /// one-GPU workers that must all start together (applied after --load picks the pods).
    #[arg(long)]
    pub multi_gpu_gangs: bool,
    /// Time limit for one ILP planning call, in milliseconds.
    #[arg(long, default_value_t = 2000, value_parser = crate::cli::bounds::time_limit_ms)]
    pub plan_time_limit_ms: u64,
    /// Write summary.md, summary.csv, timeseries.csv, pods.csv, layout.csv (the GPUs' geometries at
    /// the end) and chart.svg into this directory.
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Time buckets in timeseries.csv.
    #[arg(long, default_value_t = 200, value_parser = crate::cli::bounds::buckets)]
    pub buckets: usize,
    /// Chart title (default: the trace file name).
    #[arg(long)]
    pub title: Option<String>,
    /// Instead of simulating, print a synthetic trace of N pods (80 GB A100/H100 profiles) in
    /// Geometer's CSV format.
    #[arg(long, value_name = "N", value_parser = crate::cli::bounds::generated_pods)]
    pub generate: Option<usize>,
    /// With --generate: this share of jobs (0 to 1) are gangs of 2-8 workers, each asking for
    /// the same 1g.10gb, 2g.20gb or 3g.40gb, that must all start together.
    #[arg(long, value_name = "SHARE", requires = "generate")]
    pub gangs: Option<f64>,
    /// Run the GPUs as DynamicMIG GPUs (NVIDIA's DRA driver makes each instance as a claim is
    /// allocated, first-fit), once alone and once with Geometer's compaction, instead of the
    /// strategies; a moved pod starts again --drain-secs later. Pods asking for whole GPUs are
    /// left out.
    #[arg(long, conflicts_with = "strategies")]
    pub dynamic_mig: bool,
    #[command(flatten)]
    pub catalog: CatalogSource,
}

fn bad(error: anyhow::Error) -> Failure {
    Failure::bad_input(error)
}

fn millis(flag: &str, seconds: f64) -> Result<u64, Failure> {
    if !seconds.is_finite() || !(0.0..=1e9).contains(&seconds) {
        return Err(bad(anyhow!("{flag} {seconds}: must be a number of seconds between 0 and 10^9")));
    }
    Ok((seconds * 1000.0).round() as u64)
}

fn read(path: &Path, what: &str) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))
        .map_err(bad)
}

pub fn run(args: SimulateArgs) -> Result<(), Failure> {
    if let Some(pods) = args.generate {
        if pods == 0 || pods > 10_000_000 {
            return Err(bad(anyhow!("--generate {pods}: give between 1 and 10000000 pods")));
        }
        let mut synthetic = Synthetic::mig_80gb(pods, args.seed);
        if let Some(share) = args.gangs {
            if !(0.0..=1.0).contains(&share) {
                return Err(bad(anyhow!("--gangs {share}: give a share of jobs between 0 and 1")));
            }
            synthetic = synthetic.with_gangs(share);
        }
        print!("{}", geometer::to_csv(&synthetic.generate()));
        return Ok(());
    }
    let catalog = args.catalog.load()?;
    let mapping: Mapping = args.mapping.parse().map_err(|e: String| bad(anyhow!(e)))?;
    let model_map = alibaba::ModelMap::parse(&args.model_map).map_err(|e| bad(anyhow!(e)))?;
    let named = named_strategies(&args.strategies)?;
    let timings = Timings {
        drain: millis("--drain-secs", args.drain_secs)?,
        reconfigure: millis("--reconfig-secs", args.reconfig_secs)?,
        plugin_restart: millis("--plugin-restart-secs", args.plugin_restart_secs)?,
        batch_idle: millis("--batch-idle-secs", args.batch_idle_secs)?,
        batch_max: millis("--batch-max-secs", args.batch_max_secs)?,
        stabilisation: millis("--stabilisation-secs", args.stabilisation_secs)?,
        gang_timeout: millis("--gang-timeout-secs", args.gang_timeout_secs)?,
    };
    let forecast = match args.forecast_secs {
        Some(secs) => millis("--forecast-secs", secs)?,
        None => timings.batch_max + timings.reconfigure + timings.plugin_restart,
    };
    let (cluster, mut notes) = build_cluster(&args, &catalog, &model_map)?;
    let trace_path = args.trace.clone().ok_or_else(|| bad(anyhow!("--trace FILE is required")))?;
    let mut trace = read_trace(&args, &trace_path, &model_map)?;
    if let Some(share) = args.load {
        if !share.is_finite() || share <= 0.0 || share > 100.0 {
            return Err(bad(anyhow!("--load {share}: give a share of capacity above 0 (e.g. 1.3 for 130%)")));
        }
        let interval = millis("--interval-secs", args.interval_secs)?;
        let lifetime = match args.lifetime {
            LifetimeArg::Forever => Lifetime::Forever,
            LifetimeArg::Trace => Lifetime::Trace,
        };
        let mode = LoadMode { load: share, seed: args.seed, interval, lifetime };
        let reference = cluster.reference_model().clone();
        let capacity = match args.load_gpus {
            Some(0) => return Err(bad(anyhow!("--load-gpus 0: give the number of GPUs the load refers to"))),
            Some(gpus) => gpus,
            None => cluster.gpu_count(),
        };
        trace = load::apply(&trace, &mode, capacity as f64, |pod| match &pod.request {
            GpuRequest::Share { num_gpu, gpu_milli } => f64::from(*num_gpu) * f64::from(*gpu_milli) / 1000.0,
            GpuRequest::Mig(items) => items
                .iter()
                .map(|(name, count)| {
                    let compute = reference
                        .profile(name)
                        .map_or(f64::from(reference.compute_slices), |p| f64::from(p.compute_slices));
                    f64::from(*count) * compute / f64::from(reference.compute_slices)
                })
                .sum(),
        });
    }
    if args.multi_gpu_gangs {
        trace = geometer_sim::trace::gangs::split_multi_gpu(&trace);
    }
    let whole_gpus = match args.whole_gpus {
        WholeGpusArg::Whole => WholeGpus::Whole,
        WholeGpusArg::FullProfile => WholeGpus::FullProfile,
    };
    let workload = Workload::new(&trace, &cluster, mapping, whole_gpus);
    notes.extend(workload.notes.iter().cloned());
    if args.dynamic_mig {
        print!("{}", dynamic_mig_table(&cluster, &workload, timings.drain));
        return Ok(());
    }
    let kinds = if named.is_empty() { StrategyKind::defaults(!workload.gangs.is_empty()) } else { named };
    let mut summaries: Vec<Summary> = Vec::new();
    let started = Instant::now();
    for kind in &kinds {
        let mut strategy = build_strategy(
            *kind,
            &catalog,
            &cluster,
            &workload,
            args.plan_time_limit_ms,
            (forecast, timings.stabilisation),
        )?;
        let one = Instant::now();
        let summary = Engine::new(&cluster, &workload, timings, strategy.as_mut())
            .run()
            .map_err(|e| Failure::internal(anyhow!(e)))?;
        notes.push(format!("{kind}: replayed in {:.2} s wall time", one.elapsed().as_secs_f64()));
        summaries.push(summary);
    }
    notes.push(format!(
        "{} pods, {} strategies replayed in {:.2} s wall time",
        workload.pods.len(),
        kinds.len(),
        started.elapsed().as_secs_f64()
    ));
    let bound = geometer_sim::bound::served_bound(&cluster, &workload);
    notes.push(format!(
        "upper bound (capacity): no strategy could serve more than {bound} pods here; pods that never finish counted by the memory and compute slices of the models they may use, smallest first, ignoring placements, nodes, CPU and memory (crates/sim/src/bound.rs)"
    ));
    let name = trace_path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let setup = describe(&args, &cluster, &workload, &name, forecast);
    let mut markdown = format!("{setup}\n\n{}", report::markdown_table(&summaries, Some(bound)));
    markdown.push_str("\nNotes:\n");
    for note in &notes {
        markdown.push_str(&format!("- {note}\n"));
    }
    print!("{markdown}");
    if let Some(dir) = &args.out {
        let title = args.title.clone().unwrap_or_else(|| format!("geometer simulate: {name}"));
        write_outputs(dir, &markdown, &summaries, &workload, args.buckets, &title, &setup)?;
    }
    Ok(())
}

/// The strategies `--strategy` names, in order, each once; empty when none is named.
fn named_strategies(names: &[String]) -> Result<Vec<StrategyKind>, Failure> {
    let mut kinds = Vec::new();
    for name in names.iter().flat_map(|n| n.split(',')).map(str::trim) {
        let kind: StrategyKind = name.parse().map_err(|e: String| bad(anyhow!(e)))?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

fn build_cluster(
    args: &SimulateArgs,
    catalog: &Catalog,
    map: &alibaba::ModelMap,
) -> Result<(Cluster, Vec<String>), Failure> {
    if let Some(path) = &args.node_list {
        let text = read(path, "--node-list")?;
        let nodes = alibaba::read_nodes(&path.display().to_string(), &text).map_err(|e| bad(e.into()))?;
        let (cluster, notes) =
            alibaba::cluster_from_nodes(&nodes, map, |name| models::resolve(catalog, name)).map_err(|e| {
                bad(anyhow!(
                "{e}; map the node list's GPU models to catalog models with --model-map, e.g. G2=H100-80GB"
            ))
            })?;
        return Ok((cluster, notes));
    }
    let spec =
        args.cluster.as_deref().ok_or_else(|| bad(anyhow!("give --cluster SPEC or --node-list FILE")))?;
    let cluster =
        parse_cluster_spec(spec, |name| models::resolve(catalog, name)).map_err(|e| bad(e.into()))?;
    Ok((cluster, Vec::new()))
}

fn read_trace(args: &SimulateArgs, path: &Path, map: &alibaba::ModelMap) -> Result<Trace, Failure> {
    let text = read(path, "--trace")?;
    let file = path.display().to_string();
    let format = match args.format {
        TraceFormat::Auto => {
            let header = text.lines().find(|l| !l.trim().is_empty() && !l.starts_with('#')).unwrap_or("");
            if header.contains("gpu_milli") && !header.contains("arrival_s") {
                TraceFormat::Alibaba
            } else {
                TraceFormat::Geometer
            }
        }
        other => other,
    };
    match format {
        TraceFormat::Alibaba => {
            let pods = alibaba::read_pods(&file, &text).map_err(|e| bad(e.into()))?;
            let timing =
                if args.load.is_some() { alibaba::Timing::Unordered } else { alibaba::Timing::Replay };
            alibaba::to_trace(&file, &pods, map, timing).map_err(|e| bad(e.into()))
        }
        _ => geometer::parse(&file, &text).map_err(|e| bad(e.into())),
    }
}

fn build_strategy(
    kind: StrategyKind,
    catalog: &Catalog,
    cluster: &Cluster,
    workload: &Workload,
    time_limit_ms: u64,
    (forecast, stabilisation): (Millis, Millis),
) -> Result<Box<dyn Strategy>, Failure> {
    Ok(match kind {
        StrategyKind::WholeGpu => Box::new(WholeGpu),
        StrategyKind::Static(layout) => {
            let mut geometries = Vec::new();
            for model in &cluster.models {
                let gpu = catalog
                    .find(&model.name)
                    .ok_or_else(|| bad(anyhow!("GPU model {} left the catalog", model.name)))?;
                geometries.push(
                    models::static_geometry(layout, gpu, workload)
                        .map_err(|e| bad(anyhow!("--strategy {kind}: {e}")))?,
                );
            }
            Box::new(StaticStrategy { layout, geometries })
        }
        _ => Box::new(
            PlannerStrategy::new(kind, catalog, cluster, workload, time_limit_ms, forecast)
                .map_err(|e| bad(anyhow!("--strategy {kind}: {e}")))?
                .with_stabilisation(stabilisation),
        ),
    })
}

fn describe(
    args: &SimulateArgs,
    cluster: &Cluster,
    workload: &Workload,
    name: &str,
    forecast: Millis,
) -> String {
    let mut per_model: Vec<String> = Vec::new();
    for (i, m) in cluster.models.iter().enumerate() {
        let nodes = cluster.nodes.iter().filter(|n| n.model == i).count();
        let gpus: u64 = cluster.nodes.iter().filter(|n| n.model == i).map(|n| u64::from(n.gpus)).sum();
        per_model.push(format!("{nodes} nodes / {gpus} {}", m.name));
    }
    let mode = match args.load {
        Some(share) => {
            let lifetime = match args.lifetime {
                LifetimeArg::Forever => "pods never finish",
                LifetimeArg::Trace => "trace lifetimes",
            };
            let of = args.load_gpus.map_or_else(String::new, |g| format!(" of {g} GPUs"));
            format!(
                "load mode {:.0}%{of} (seed {}, one pod every {} s, {lifetime})",
                share * 100.0,
                args.seed,
                args.interval_secs
            )
        }
        None => "trace timestamps".into(),
    };
    let gangs = if workload.gangs.is_empty() {
        String::new()
    } else {
        format!("; {} gangs, Permit timeout {} s", workload.gangs.len(), args.gang_timeout_secs)
    };
    format!(
        "Trace {name}: {} pods, {mode}; cluster: {} ({} GPUs); mapping {}, --whole-gpus {}; drain {} s, reconfigure {} s, plugin restart {} s, batch {}/{} s, stabilisation {} s; Geometer forecast window {} s{gangs}.",
        workload.pods.len(),
        per_model.join(", "),
        cluster.gpu_count(),
        workload.mapping,
        workload.whole_gpus,
        args.drain_secs,
        args.reconfig_secs,
        args.plugin_restart_secs,
        args.batch_idle_secs,
        args.batch_max_secs,
        args.stabilisation_secs,
        forecast as f64 / 1000.0,
    )
}

fn write_outputs(
    dir: &Path,
    markdown: &str,
    summaries: &[Summary],
    workload: &Workload,
    buckets: usize,
    title: &str,
    setup: &str,
) -> Result<(), Failure> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create -o {}", dir.display()))
        .map_err(Failure::internal)?;
    let files = [
        ("summary.md", markdown.to_string()),
        ("summary.csv", report::summary_csv(summaries)),
        ("timeseries.csv", report::timeseries_csv(summaries, buckets)),
        ("pods.csv", report::pods_csv(summaries, workload)),
        ("layout.csv", report::layout_csv(summaries)),
        ("chart.svg", report::chart(summaries, title, setup)),
    ];
    for (file, text) in files {
        let path = dir.join(file);
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(Failure::internal)?;
    }
    Ok(())
}

/// `geometer simulate --dynamic-mig`: first-fit alone and with compaction, as a table.
fn dynamic_mig_table(cluster: &Cluster, workload: &Workload, move_delay: u64) -> String {
    use geometer_sim::dynamic_mig::{run, Policy};
    let mut out = String::from(
        "DynamicMIG GPUs: NVIDIA's DRA driver makes each instance as a claim is allocated, kube-scheduler takes the first free device.\n\n\
         | policy | pods | served | p95 wait (s) | pods moved | moved per hour | compactions |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let mut left_out = 0;
    for policy in [Policy::FirstFit, Policy::Compaction] {
        let o = run(cluster, workload, policy, move_delay);
        left_out = workload.pods.len() - o.pods;
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {} | {:.2} | {} |\n",
            policy.name(),
            o.pods,
            o.served,
            o.p95_wait_s,
            o.moved,
            o.moved_per_hour(),
            o.compactions
        ));
    }
    out.push_str(&format!(
        "\n{left_out} pods asking for whole GPUs left out (the driver's whole-GPU device is not modelled); a moved pod keeps the run time it had left and starts again {} s later.\n",
        move_delay / 1000
    ));
    out
}
