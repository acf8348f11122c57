//! `geometer agent`: the node agent. `probe` prints what NVML reports (read-only).

use anyhow::anyhow;
use clap::{Args, Subcommand};

use super::catalog::CatalogSource;
use super::output::{self, Failure, OutputFormat};
use geometer_agent::catalog_check::placements_text;
use geometer_agent::nvml::real::{RealNvml, NVML_LIBRARY};
use geometer_agent::nvml::{format_pci_device_id, MigMode};
use geometer_agent::{probe, ProbeGpu, ProbeReport};

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    pub command: AgentCommand,
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Print what NVML reports on this machine (GPUs, MIG mode, every GPU-instance profile with
    /// its possible placements, existing instances) and where the catalog disagrees. Read-only:
    /// never changes MIG mode or geometry.
    Probe(ProbeArgs),
    /// Run the node agent: carry out this node's MigNode spec on its GPUs (cordon, drain,
    /// repartition, re-advertise, uncordon), resuming from MigNode status after a restart.
    Run(Box<super::agent_run::RunArgs>),
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub catalog: CatalogSource,
    /// NVML library to load.
    #[arg(long, value_name = "PATH", default_value = NVML_LIBRARY)]
    pub nvml_library: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

impl AgentArgs {
    pub(super) fn output_format(&self) -> OutputFormat {
        match &self.command {
            AgentCommand::Probe(probe) => probe.output,
            AgentCommand::Run(_) => OutputFormat::Table,
        }
    }
}

pub fn run(args: AgentArgs) -> Result<(), Failure> {
    match args.command {
        AgentCommand::Probe(args) => run_probe(args),
        AgentCommand::Run(args) => super::agent_run::run(*args),
    }
}

fn run_probe(args: ProbeArgs) -> Result<(), Failure> {
    let catalog = args.catalog.load()?;
    let nvml = RealNvml::init_with_library(&args.nvml_library).map_err(|e| Failure::internal(anyhow!(e)))?;
    let report = probe(&nvml, &catalog).map_err(|e| Failure::internal(anyhow!(e)))?;
    output::print(args.output, &report, || render(&report))
}

/// The report as text for a person comparing it with the catalog.
pub fn render(report: &ProbeReport) -> String {
    let mut out = format!("NVIDIA driver {}, {} GPU(s)\n", report.driver_version, report.gpus.len());
    for gpu in &report.gpus {
        out.push('\n');
        render_gpu(gpu, &mut out);
    }
    out
}

fn render_gpu(gpu: &ProbeGpu, out: &mut String) {
    let d = &gpu.device;
    out.push_str(&format!(
        "GPU {}: {} ({}) {}\n",
        d.index,
        d.name,
        format_pci_device_id(d.pci_device_id),
        d.uuid
    ));
    out.push_str(&format!("  catalog model: {}\n", gpu.model.as_deref().unwrap_or("unknown")));
    out.push_str(&format!("  MIG mode: {}\n", mig_text(d.mig_mode)));
    if !gpu.profiles.is_empty() {
        out.push_str("  GPU-instance profiles (NVML):\n");
        let rows: Vec<Vec<String>> = gpu
            .profiles
            .iter()
            .map(|p| {
                let i = &p.info;
                vec![
                    i.profile_index.to_string(),
                    i.id.to_string(),
                    i.name.clone().unwrap_or_else(|| "-".to_string()),
                    i.slice_count.to_string(),
                    i.instance_count.to_string(),
                    i.memory_mib.to_string(),
                    i.multiprocessor_count.to_string(),
                    format!(
                        "{}/{}/{}/{}/{}",
                        i.copy_engine_count, i.decoder_count, i.encoder_count, i.jpeg_count, i.ofa_count
                    ),
                    placements_text(&p.placements),
                ]
            })
            .collect();
        let headers = [
            "INDEX",
            "ID",
            "NAME",
            "SLICES",
            "MAX",
            "MEMORY-MIB",
            "SMS",
            "CE/DEC/ENC/JPEG/OFA",
            "PLACEMENTS",
        ];
        indent(&output::table(&headers, &rows), out);
    }
    if !gpu.advertised_names.is_empty() {
        out.push_str("  advertised by the device plugin as (go-nvlib's naming, from NVML's memory):\n");
        let rows: Vec<Vec<String>> =
            gpu.advertised_names.iter().map(|(p, r)| vec![p.clone(), r.clone()]).collect();
        indent(&output::table(&["PROFILE", "RESOURCE"], &rows), out);
    }
    if gpu.instances.is_empty() {
        if d.mig_mode.is_some_and(|m| m.current) {
            out.push_str("  instances: none\n");
        }
    } else {
        out.push_str("  instances:\n");
        let rows: Vec<Vec<String>> = gpu
            .instances
            .iter()
            .map(|i| {
                let gi = &i.gpu_instance;
                vec![
                    gi.id.to_string(),
                    gi.profile_id.to_string(),
                    gi.placement.to_string(),
                    i.compute_instances.iter().map(|c| c.id.to_string()).collect::<Vec<_>>().join(","),
                    i.mig_device.as_ref().map_or("-".to_string(), |m| m.uuid.clone()),
                    i.processes.map_or("?".to_string(), |n| n.to_string()),
                ]
            })
            .collect();
        indent(&output::table(&["GI", "PROFILE-ID", "PLACEMENT", "CI", "MIG-UUID", "PROCESSES"], &rows), out);
    }
    if gpu.model.is_some() && !gpu.profiles.is_empty() {
        if gpu.disagreements.is_empty() {
            out.push_str("  catalog: agrees with NVML on every profile\n");
        } else {
            out.push_str("  catalog disagreements (NVML wins):\n");
            let rows: Vec<Vec<String>> = gpu
                .disagreements
                .iter()
                .map(|x| {
                    vec![
                        x.profile.clone().unwrap_or_default(),
                        x.field.clone(),
                        x.catalog.clone(),
                        x.nvml.clone(),
                    ]
                })
                .collect();
            indent(&output::table(&["PROFILE", "FIELD", "CATALOG", "NVML"], &rows), out);
        }
    }
    for note in &gpu.notes {
        out.push_str(&format!("  note: {note}\n"));
    }
}

fn mig_text(mode: Option<MigMode>) -> String {
    match mode {
        None => "not supported".to_string(),
        Some(m) if m.current == m.pending => (if m.current { "enabled" } else { "disabled" }).to_string(),
        Some(m) => format!(
            "{} now, {} after the next GPU reset",
            if m.current { "enabled" } else { "disabled" },
            if m.pending { "enabled" } else { "disabled" }
        ),
    }
}

fn indent(text: &str, out: &mut String) {
    for line in text.lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
}
