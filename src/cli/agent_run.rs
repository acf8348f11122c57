//! `geometer agent run`: the node agent's daemon. Watches its MigNode and Node, and carries
//! out the MigNode's desired geometry on this node's GPUs (see `geometer_agent::Agent`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::Args;
use geometer_solver::words::quoted;

use super::catalog::CatalogSource;
use super::output::Failure;
use geometer_agent::nvml::real::{RealNvml, NVML_LIBRARY};
use geometer_agent::nvml::reset::{GpuReset, NvidiaSmiReset};
use geometer_agent::nvml::NvmlBackend;
use geometer_agent::pod_resources::DEFAULT_SOCKET;
use geometer_agent::DEFAULT_DEVICE_PLUGIN_SELECTOR;
use geometer_agent::{
    Agent, AgentConfig, AgentMetrics, DeviceAssignments, KubeletPodResources, OperandMode, SharedAssignments,
};
use geometer_api::do_not_disrupt::parse_go_duration;
use geometer_api::DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS as DEFAULT_KEYS;
use geometer_controller::{serve_health, Health, MetricsText};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Node this agent manages; its MigNode has the same name. In the DaemonSet this comes from
    /// the downward API (`spec.nodeName`).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node: String,
    #[command(flatten)]
    pub catalog: CatalogSource,
    /// Use simulated GPUs instead of NVML, e.g. `H100-80GB:8` (repeatable; any catalog key, PCI
    /// id or NVML name). Without `--pod-resources-socket` no device counts as in use.
    #[arg(long, value_name = "MODEL:COUNT")]
    pub simulate: Vec<String>,
    /// With --simulate: keep the simulated GPUs in this file, so that they outlive the agent
    /// (as real GPUs outlive an agent restart) and a simulated kubelet shares them.
    #[arg(long, value_name = "PATH", requires = "simulate")]
    pub simulate_state: Option<PathBuf>,
    /// NVML library to load (real backend only).
    #[arg(long, value_name = "PATH", default_value = NVML_LIBRARY)]
    pub nvml_library: String,
    /// The kubelet's PodResources socket, which says which pod holds which device [default:
    /// /var/lib/kubelet/pod-resources/kubelet.sock, none with --simulate].
    #[arg(long, value_name = "PATH")]
    pub pod_resources_socket: Option<PathBuf>,
    /// Label selector of the NVIDIA device plugin pods, restarted after a change so that they
    /// advertise the new slices.
    #[arg(long, value_name = "SELECTOR", default_value = DEFAULT_DEVICE_PLUGIN_SELECTOR)]
    pub device_plugin_selector: String,
    /// Namespace of the device plugin pods [default: any].
    #[arg(long, value_name = "NAMESPACE")]
    pub device_plugin_namespace: Option<String>,
    /// Label selector of the kubelet plugin pods of NVIDIA's DRA driver, restarted after a
    /// change on a static-MIG DRA node so that they publish the new devices.
    #[arg(long, value_name = "SELECTOR", default_value = geometer_agent::DEFAULT_DRA_PLUGIN_SELECTOR)]
    pub dra_plugin_selector: String,
    /// Namespace of the DRA driver's kubelet plugin pods [default: any].
    #[arg(long, value_name = "NAMESPACE")]
    pub dra_plugin_namespace: Option<String>,
    /// Longest wait for pods to leave before a change fails (Go duration: 30s, 10m, 1h).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = duration)]
    pub drain_timeout: Duration,
    /// Pod annotation that forbids evicting the pod (value "true", or a duration since the pod
    /// started). Repeat for several; replaces the defaults.
    #[arg(long = "do-not-disrupt-annotation", value_name = "KEY", default_values_t = DEFAULT_KEYS.map(String::from))]
    pub do_not_disrupt_annotations: Vec<String>,
    /// Longest wait for the node's allocatable to show new slices after the device plugin
    /// restart before it is restarted again.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    pub advertise_timeout: Duration,
    /// How often the GPUs and the kubelet are read again when nothing watched changes.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub poll_interval: Duration,
    /// Longest time between two writes of unchanged right-sizing measurements
    /// (`MigNode.status.usage`); a measurement that changes is written at once.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    pub usage_publish_interval: Duration,
    /// Pause the NVIDIA GPU Operator's operands (device plugin, GPU feature discovery, DCGM,
    /// dcgm-exporter, nvsm, GPU clients) around a change, as its mig-manager does: `auto` on
    /// nodes carrying its `nvidia.com/gpu.deploy.*` labels, `on`, or `off`.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["auto", "on", "off"])]
    pub gpu_operator: String,
    /// Longest wait for the paused operands' pods to leave the node before the change fails
    /// (their labels restored) and is retried later.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    pub operand_timeout: Duration,
    /// Longest time the operands stay paused; a change still running then is stopped between
    /// two steps, the labels restored, and the change retried later.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = duration)]
    pub max_pause: Duration,
    /// Let the agent reset a GPU whose MIG mode changes only through a reset (Ampere: A100,
    /// A30), with `nvidia-smi -r -i <uuid>`, idle and alone, where the MigPolicy allows it too
    /// (`spec.disruption.allowGpuReset`). Off: such a change stops with what to do by hand.
    #[arg(long)]
    pub allow_gpu_reset: bool,
    /// The nvidia-smi used for `--allow-gpu-reset`.
    #[arg(long, value_name = "PATH", default_value = "nvidia-smi")]
    pub nvidia_smi: PathBuf,
    /// Serve `/metrics` and `/healthz` on this address (the DaemonSet gives 0.0.0.0:8080)
    /// [default: not served].
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

/// The agent's NVML and how it resets a GPU (`--allow-gpu-reset`).
type Gpus = (Arc<dyn NvmlBackend>, Arc<dyn GpuReset>);

/// A Go duration from 10 milliseconds to 24 hours.
fn duration(text: &str) -> Result<Duration, String> {
    let d = parse_go_duration(text)
        .ok_or_else(|| format!("{} is not a duration; write it like 30s, 10m or 1h30m", quoted(text)))?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(24 * 3600) {
        return Err(format!("{text} is out of range: give 10ms to 24h"));
    }
    Ok(d)
}

/// Simulated GPUs for `--simulate` (developer builds only: the operator's image has none).
#[cfg(feature = "demo")]
fn simulated_nvml(
    node: &str,
    catalog: &geometer_solver::catalog::Catalog,
    sims: &[(String, u32)],
    state: Option<&std::path::Path>,
) -> Result<Gpus, Failure> {
    let sim = geometer_agent::nvml::sim::SimNvml::with_catalog(node.to_string(), catalog.clone());
    for (model, count) in sims {
        for _ in 0..*count {
            sim.add_gpu(model).map_err(|e| Failure::bad_input(anyhow!("--simulate {model}:{count}: {e}")))?;
        }
    }
    let sim = match state {
        Some(path) => {
            sim.with_state_file(path).map_err(|e| Failure::bad_input(anyhow!("--simulate-state: {e}")))?
        }
        None => sim,
    };
    let reset = Arc::new(geometer_agent::nvml::sim::SimReset::new(sim.clone()));
    Ok((Arc::new(sim), reset))
}

#[cfg(not(feature = "demo"))]
fn simulated_nvml(
    _node: &str,
    _catalog: &geometer_solver::catalog::Catalog,
    _sims: &[(String, u32)],
    _state: Option<&std::path::Path>,
) -> Result<Gpus, Failure> {
    Err(Failure::bad_input(anyhow!(
        "--simulate: this geometer was built without the `demo` feature, so it has no simulated GPUs; \
         use a developer build (cargo build -p geometer) or drop --simulate to use NVML"
    )))
}

/// The agent's API client, without kube's default retry of 429 answers. The agent retries a
/// refused eviction itself, with its own backoff, events, status and drain timeout; kube-rs'
/// retry layer (kube-client `client/retry.rs`: up to 15 tries, honouring Retry-After) would hold
/// a PodDisruptionBudget refusal, which kube-apiserver sends as 429 with Retry-After, inside one
/// call for minutes, so the drain could neither report it nor time out.
async fn agent_client() -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::infer()
        .await
        .context("cannot reach the Kubernetes API (in-cluster config or KUBECONFIG)")?;
    config.default_retry = false;
    kube::Client::try_from(config).context("cannot build the Kubernetes client")
}

/// `MODEL:COUNT` from `--simulate`.
fn simulated_gpus(specs: &[String]) -> Result<Vec<(String, u32)>, Failure> {
    specs
        .iter()
        .map(|spec| {
            let (model, count) = spec.rsplit_once(':').ok_or_else(|| {
                Failure::bad_input(anyhow!(
                    "--simulate {}: expected MODEL:COUNT, e.g. H100-80GB:8",
                    quoted(spec)
                ))
            })?;
            let count: u32 = count.parse().ok().filter(|&c| c > 0).ok_or_else(|| {
                Failure::bad_input(anyhow!(
                    "--simulate {spec:?}: the count {count:?} must be a whole number above 0"
                ))
            })?;
            Ok((model.to_string(), count))
        })
        .collect()
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    let catalog = args.catalog.load()?;
    let sims = simulated_gpus(&args.simulate)?;
    // With --allow-gpu-reset: `nvidia-smi -r` and NVML opened again, or the simulated GPUs' reset.
    let (nvml, reset): Gpus = if sims.is_empty() {
        let nvml =
            RealNvml::init_with_library(&args.nvml_library).map_err(|e| Failure::internal(anyhow!(e)))?;
        let reset =
            NvidiaSmiReset { nvidia_smi: args.nvidia_smi.clone(), library: args.nvml_library.clone() };
        (Arc::new(nvml), Arc::new(reset))
    } else {
        simulated_nvml(&args.node, &catalog, &sims, args.simulate_state.as_deref())?
    };
    let devices: Arc<dyn DeviceAssignments> = match (&args.pod_resources_socket, sims.is_empty()) {
        (Some(path), _) => Arc::new(KubeletPodResources::new(path)),
        (None, true) => Arc::new(KubeletPodResources::new(DEFAULT_SOCKET)),
        (None, false) => Arc::new(SharedAssignments::default()),
    };
    let mut cfg = AgentConfig::new(args.node.clone());
    cfg.catalog = Arc::new(catalog);
    cfg.drain.timeout = args.drain_timeout;
    cfg.drain.do_not_disrupt_keys = args.do_not_disrupt_annotations;
    cfg.device_plugin_selector = args.device_plugin_selector;
    cfg.device_plugin_namespace = args.device_plugin_namespace;
    cfg.dra_plugin_selector = args.dra_plugin_selector;
    cfg.dra_plugin_namespace = args.dra_plugin_namespace;
    cfg.advertise_timeout = args.advertise_timeout;
    cfg.poll_interval = args.poll_interval;
    cfg.usage_publish_interval = args.usage_publish_interval;
    cfg.operands = match args.gpu_operator.as_str() {
        "on" => OperandMode::On,
        "off" => OperandMode::Off,
        _ => OperandMode::Auto,
    };
    cfg.operand_timeout = args.operand_timeout;
    cfg.max_pause = args.max_pause;
    cfg.gpu_reset = args.allow_gpu_reset.then_some(reset);

    let runtime = tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")
        .map_err(Failure::internal)?;
    runtime.block_on(async move {
        let client = agent_client().await.map_err(Failure::internal)?;
        tracing::info!(node = %cfg.node, simulated = !sims.is_empty(), "geometer agent starting");
        let metrics = Arc::new(AgentMetrics::new());
        if let Some(addr) = args.metrics_addr {
            serve_metrics(addr, metrics.clone()).await?;
        }
        let agent = Agent::new(cfg, client, nvml, devices).with_metrics(metrics);
        // Stops between two rounds, restoring any paused GPU Operator operands first.
        agent.run_until(shutdown()).await;
        tracing::info!("shut down; the next agent resumes from MigNode status");
        Ok(())
    })
}

/// Serves the agent's `/metrics` and `/healthz` until the process ends.
async fn serve_metrics(addr: SocketAddr, metrics: Arc<AgentMetrics>) -> Result<(), Failure> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::bad_input(anyhow!("--metrics-addr {addr}: cannot listen: {e}")))?;
    let health = Arc::new(Health::default());
    health.set_ready(true);
    let text: MetricsText = Arc::new(move || metrics.encode());
    tokio::spawn(serve_health(listener, text, health, std::future::pending()));
    Ok(())
}

/// SIGTERM (the kubelet stopping the pod) or Ctrl-C. Stopping between awaits is safe: every
/// step was recorded before it was taken.
pub(crate) async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulate_specs_parse_and_bad_ones_name_the_flag() {
        assert_eq!(simulated_gpus(&["H100-80GB:8".into()]).unwrap(), vec![("H100-80GB".to_string(), 8)]);
        assert_eq!(simulated_gpus(&["10de:2330:2".into()]).unwrap(), vec![("10de:2330".to_string(), 2)]);
        for bad in ["H100-80GB", "H100-80GB:0", "H100-80GB:x"] {
            let err = simulated_gpus(&[bad.into()]).unwrap_err();
            assert_eq!(err.code, 2);
            assert!(err.error.unwrap().to_string().contains("--simulate"), "{bad}");
        }
    }

    #[test]
    fn durations_use_go_syntax() {
        assert_eq!(duration("10m"), Ok(Duration::from_secs(600)));
        assert!(duration("ten minutes").unwrap_err().contains("30s"));
        assert!(duration("1000000h").unwrap_err().contains("10ms to 24h"));
    }
}
