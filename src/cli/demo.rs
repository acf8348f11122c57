//! `geometer demo`: the whole operator on a simulated cluster in one process (see
//! `geometer_simcluster::demo`). No arguments needed; flags change the mode, size, speed and seed.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::Args;

use super::output::Failure;
pub use super::policy_mode::ModeArg;

use geometer_simcluster::demo::{self, Console, DemoOptions};

#[derive(Debug, Args)]
#[command(
    about = "Run Geometer end to end on a simulated GPU cluster: API server (kubectl-ready), scheduler, kubelets, device plugins, the controller and one agent per node, with a shifting workload"
)]
pub struct DemoArgs {
    /// What the policy does with plans.
    #[arg(long, value_enum, default_value = "Auto")]
    pub policy_mode: ModeArg,
    /// Seed of the workload; the same seed plays the same pods.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Scenario seconds per wall-clock second (pod run times and arrivals are compressed; the
    /// controller's and agents' own timing is not).
    #[arg(long, default_value_t = 3.0, value_parser = crate::cli::bounds::speed)]
    pub speed: f64,
    /// Simulated nodes: odd ones with 8 A100-80GB, even ones with 8 H100-80GB.
    #[arg(long, default_value_t = 4, value_parser = crate::cli::bounds::demo_nodes)]
    pub nodes: usize,
    /// Length of the workload in scenario seconds (at the default speed, 120 takes 40 s).
    #[arg(long, default_value_t = 120.0, value_parser = crate::cli::bounds::scenario_seconds)]
    pub duration: f64,
    /// In Approve mode, wait for you to approve each plan with kubectl instead of approving it
    /// after printing the command.
    #[arg(long)]
    pub wait_for_approval: bool,
    /// Milliseconds each NVML call that changes a GPU takes (real GPUs take a while to create
    /// an instance).
    #[arg(long, default_value_t = 40, value_name = "MS", value_parser = crate::cli::bounds::nvml_latency_ms)]
    pub nvml_latency_ms: u64,
    /// Where to write the kubeconfig for kubectl [default: a new temporary directory].
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Keep serving the API after the summary until Ctrl-C, to look around with kubectl.
    #[arg(long)]
    pub keep_serving: bool,
    /// Seconds between progress lines.
    #[arg(long, default_value_t = 3.0, value_name = "SECONDS", value_parser = crate::cli::bounds::interval_seconds)]
    pub tick: f64,
    /// Run on the cluster of KUBECONFIG instead of an in-memory API server (a real control
    /// plane with `deploy/base` applied: `make demo-k8s` starts one): the simulated nodes join
    /// it and keep their GPUs in this folder.
    #[arg(long, value_name = "STATE_DIR", conflicts_with_all = ["kubeconfig", "keep_serving"])]
    pub join: Option<PathBuf>,
    /// Serve the controller's and the agents' metrics on `/metrics` here (each agent's samples
    /// labelled with its node), e.g. for scripts/render-dashboard.py.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The simulated nodes' GPUs are advertised by NVIDIA's DRA driver in static MIG mode (its
    /// ResourceSlices), not by the device plugin; the workload's `nvidia.com/mig-*` and
    /// `nvidia.com/gpu` requests are served through DeviceClasses naming them. Needs --join.
    #[arg(long, requires = "join")]
    pub dra: bool,
}

pub fn run(args: DemoArgs) -> Result<(), Failure> {
    if !(args.tick > 0.0 && args.tick.is_finite()) {
        return Err(Failure::bad_input(anyhow!("--tick {} must be above 0 seconds", args.tick)));
    }
    let options = DemoOptions {
        mode: args.policy_mode.into(),
        seed: args.seed,
        speed: args.speed,
        nodes: args.nodes,
        duration_s: args.duration,
        wait_for_approval: args.wait_for_approval,
        nvml_latency: Duration::from_millis(args.nvml_latency_ms),
        serve_http: true,
        kubeconfig: args.kubeconfig,
        keep_serving: args.keep_serving,
        tick: Duration::from_secs_f64(args.tick),
        metrics_addr: args.metrics_addr,
        dra: args.dra,
    };
    options.validate().map_err(|e| Failure::bad_input(e.into()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(Failure::internal)?;
    runtime.block_on(async move {
        let played = async {
            match &args.join {
                None => demo::run(options, Console::stdout()).await.map_err(anyhow::Error::from),
                Some(state_dir) => {
                    let client = kube::Client::try_default()
                        .await
                        .context("--join: cannot reach the Kubernetes API (KUBECONFIG)")?;
                    demo::run_joined(client, state_dir, options, Console::stdout())
                        .await
                        .map_err(anyhow::Error::from)
                }
            }
        };
        tokio::select! {
            result = played => result.map(|_| ()).map_err(Failure::internal),
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted");
                Err(Failure { code: 130, error: None })
            }
        }
    })
}
