//! `geometer recommend` (as a kubectl plugin: `kubectl geometer recommend`): which workloads
//! hold whole GPUs for a slice's work, the slice that holds what they use, what that gives back
//! and the patch that makes them ask for it. Read-only.
//!
//! What pods use comes from the agents' measurements in `MigNode.status.usage` (the cluster, or
//! a List given with `--snapshot`), or from dcgm-exporter's metrics through Prometheus
//! (`--prometheus URL`).

use geometer_controller::adapter::PodView;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use clap::Args;
use kube::Client;
use serde::Serialize;

use crate::cli::catalog::CatalogSource;
use crate::cli::cluster::{list, read_input};
use crate::cli::output::{self, Failure, OutputFormat};
use geometer_api::{MigNode, PodGpuUsage};
use geometer_controller::adapter;
use geometer_controller::rightsizing::prometheus;
use geometer_controller::rightsizing::recommend::{recommend, Recommendation, Settings, Verdict};

#[derive(Debug, Args)]
pub struct RecommendArgs {
    /// A Kubernetes List (YAML or JSON, `-` for standard input) holding the MigNodes and Pods,
    /// as `kubectl get mignodes,pods -A -o yaml` prints it. Without it the cluster of the
    /// current kubeconfig is read.
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<String>,
    /// Read what pods use from dcgm-exporter's metrics (`DCGM_FI_DEV_FB_USED`,
    /// `DCGM_FI_DEV_GPU_UTIL`) through this Prometheus (`http://HOST:PORT`) instead of from the
    /// MigNodes. Pods still come from the cluster or `--snapshot`.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Range the Prometheus queries look back over (a PromQL duration).
    #[arg(long, value_name = "DURATION", default_value = "7d", requires = "prometheus")]
    pub window: String,
    /// Room on top of the measured memory and utilisation, percent.
    #[arg(long, value_name = "PERCENT", default_value_t = Settings::default().headroom_percent,
          value_parser = clap::value_parser!(u32).range(0..=400))]
    pub headroom: u32,
    /// Samples each pod needs before its workload is judged.
    #[arg(long, value_name = "N", default_value_t = Settings::default().min_samples)]
    pub min_samples: u32,
    /// Size memory from the 95th percentile instead of the peak (less safe).
    #[arg(long)]
    pub percentile: bool,
    #[command(flatten)]
    pub catalog: CatalogSource,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// Whole GPUs the slice recommendations give back together.
    gpus_given_back: u32,
    recommendations: Vec<Recommendation>,
}

pub fn run(args: RecommendArgs) -> Result<(), Failure> {
    let catalog = args.catalog.load()?;
    let settings = Settings {
        headroom_percent: args.headroom,
        min_samples: args.min_samples,
        percentile: args.percentile,
    };
    let runtime = tokio::runtime::Runtime::new().map_err(|e| Failure::internal(e.into()))?;
    let (pods, mut usage) = match &args.snapshot {
        Some(path) => from_snapshot(path)?,
        None => runtime.block_on(from_cluster())?,
    };
    if let Some(url) = &args.prometheus {
        usage = runtime
            .block_on(prometheus::usage(url, &args.window, &catalog, jiff::Timestamp::now()))
            .map_err(|e| Failure::bad_input(anyhow!(e)))?;
    }
    let pods: Vec<&PodView> = pods.iter().map(|p| &**p).collect();
    let recommendations = recommend(&usage, &pods, &catalog, &settings);
    let report = Report {
        gpus_given_back: recommendations.iter().map(|r| r.verdict.gpus_given_back()).sum(),
        recommendations,
    };
    output::print(args.output, &report, || render(&report, usage.is_empty()))
}

fn from_snapshot(path: &str) -> Result<(Vec<Arc<PodView>>, Vec<PodGpuUsage>), Failure> {
    let text = read_input(path, "--snapshot")?;
    let objects = adapter::parse_objects(&text).context("invalid --snapshot").map_err(Failure::bad_input)?;
    for e in &objects.skipped {
        eprintln!("warning: skipped {e}");
    }
    Ok((objects.pods, objects.usage))
}

async fn from_cluster() -> Result<(Vec<Arc<PodView>>, Vec<PodGpuUsage>), Failure> {
    let client = Client::try_default().await.map_err(|e| {
        Failure::bad_input(anyhow!(
            "no --snapshot and no cluster to read ({e}); give --snapshot FILE or point KUBECONFIG at a cluster"
        ))
    })?;
    let pods = list::<PodView>(&client).await?;
    let mignodes = list::<MigNode>(&client).await?;
    let usage = mignodes.iter().flat_map(|m| m.usage().iter().cloned()).collect();
    Ok((pods, usage))
}

fn render(report: &Report, nothing_measured: bool) -> String {
    if report.recommendations.is_empty() {
        return if nothing_measured {
            "No pod holding a whole GPU alone has been measured yet (the agents measure each round; \
             see MigNode status.usage).\n"
                .to_string()
        } else {
            "No measured pod is in the cluster any more.\n".to_string()
        };
    }
    let rows: Vec<Vec<String>> = report
        .recommendations
        .iter()
        .map(|r| {
            vec![
                format!("{}/{}", r.owner.kind.to_lowercase(), r.owner.name),
                r.owner.namespace.clone(),
                r.model.clone(),
                r.pods.len().to_string(),
                r.samples.to_string(),
                format!("{} MiB", r.peak_memory_mib),
                format!("{}%", r.mean_utilization_percent),
                verdict(&r.verdict),
                r.verdict.gpus_given_back().to_string(),
            ]
        })
        .collect();
    let mut out = output::table(
        &[
            "WORKLOAD",
            "NAMESPACE",
            "MODEL",
            "PODS",
            "SAMPLES",
            "PEAK MEMORY",
            "MEAN UTIL",
            "RECOMMENDATION",
            "GPUS BACK",
        ],
        &rows,
    );
    out.push_str(&format!("\nWhole GPUs given back: {}\n", report.gpus_given_back));
    for r in &report.recommendations {
        if let Verdict::Slice { patch: Some(patch), .. } = &r.verdict {
            out.push_str(&format!("\n# {} {}: ask for a slice\n{patch}\n", r.owner, r.model));
        }
    }
    out
}

fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Slice { profile, resource, .. } => format!("{profile} ({resource})"),
        Verdict::WholeGpu { needed_memory_mib, needed_compute_slices } => format!(
            "keep the whole GPU (needs {needed_memory_mib} MiB, {needed_compute_slices} compute slices)"
        ),
        Verdict::TooFewSamples { samples, needed } => {
            format!("measured too little ({samples} of {needed} samples)")
        }
        Verdict::UnknownModel => "GPU model not in the catalog".to_string(),
    }
}
