//! `geometer catalog`: the GPU models Geometer knows and their MIG profiles.

use std::path::PathBuf;

use anyhow::{anyhow, Context};
use clap::{Args, Subcommand};
use geometer_solver::catalog::{format_device_id, Catalog, CatalogFile, GpuModel, Verification};

use super::output::{self, Failure, OutputFormat};

/// `--catalog FILE`: extra or replacement GPU models on top of the built-in catalog.
#[derive(Debug, Clone, Default, Args)]
pub struct CatalogSource {
    /// Catalog file (YAML, the format `geometer catalog show MODEL -o yaml` prints) whose
    /// models are added to the built-in ones; a model with a built-in key replaces it.
    #[arg(long = "catalog", value_name = "FILE", global = true)]
    pub file: Option<PathBuf>,
}

impl CatalogSource {
    /// The built-in catalog with the file laid over it. A missing or invalid file is bad input.
    pub fn load(&self) -> Result<Catalog, Failure> {
        let builtin = Catalog::builtin();
        let Some(path) = &self.file else {
            return Ok(builtin.clone());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --catalog {}", path.display()))
            .map_err(Failure::bad_input)?;
        let extra = Catalog::from_yaml(&text)
            .with_context(|| format!("invalid --catalog {}", path.display()))
            .map_err(Failure::bad_input)?;
        Ok(builtin.with_overrides(extra))
    }

    /// The model `query` names (key, PCI id, NVML name or gpu.product label), or bad input that
    /// says what is known.
    pub fn find<'c>(catalog: &'c Catalog, query: &str) -> Result<&'c GpuModel, Failure> {
        if let Some(model) = catalog.find(query) {
            return Ok(model);
        }
        if let Some(u) = catalog.find_unplaceable(query) {
            return Err(Failure::bad_input(anyhow!(
                "GPU {:?} is known but cannot be planned for: {} Add its placements with --catalog FILE.",
                u.key,
                u.reason
            )));
        }
        let keys: Vec<&str> = catalog.models().iter().map(|m| m.key.as_str()).collect();
        Err(Failure::bad_input(anyhow!(
            "unknown GPU model {query:?}; give a catalog key ({}), a PCI id like 0x20B010DE, an NVML name \
             or a nvidia.com/gpu.product label, or add the model with --catalog FILE",
            keys.join(", ")
        )))
    }
}

#[derive(Debug, Args)]
pub struct CatalogArgs {
    #[command(subcommand)]
    pub command: CatalogCommand,
    #[command(flatten)]
    pub source: CatalogSource,
}

#[derive(Debug, Subcommand)]
pub enum CatalogCommand {
    /// List the GPU models: key, architecture, memory, PCI ids, number of profiles.
    List {
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
    /// Show one model with its profiles (slices, memory, placements, caps, engines, evidence).
    Show {
        /// Catalog key (A100-40GB), PCI id (0x20B010DE or 20b0), NVML name
        /// ("NVIDIA A100-SXM4-40GB") or gpu.product label (NVIDIA-A100-SXM4-40GB).
        model: String,
        /// Output format; json and yaml print the catalog file form, usable with --catalog.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
}

pub fn run(args: CatalogArgs) -> Result<(), Failure> {
    let catalog = args.source.load()?;
    match args.command {
        CatalogCommand::List { output } => list(&catalog, output),
        CatalogCommand::Show { model, output } => {
            let model = CatalogSource::find(&catalog, &model)?;
            let file = CatalogFile::from_models(&[model], &[]);
            output::print(output, &file, || show_table(model))
        }
    }
}

fn list(catalog: &Catalog, format: OutputFormat) -> Result<(), Failure> {
    let models: Vec<&GpuModel> = catalog.models().iter().collect();
    let unplaceable: Vec<_> = catalog.unplaceable().iter().collect();
    let file = CatalogFile::from_models(&models, &unplaceable);
    output::print(format, &file, || {
        let rows: Vec<Vec<String>> = catalog
            .models()
            .iter()
            .map(|m| {
                vec![
                    m.key.clone(),
                    m.architecture.clone(),
                    memory(m.memory_mib, m.memory_status),
                    ids(m),
                    m.mig_profiles().count().to_string(),
                ]
            })
            .collect();
        let mut out = output::table(&["MODEL", "ARCHITECTURE", "MEMORY", "DEVICE IDS", "PROFILES"], &rows);
        if !catalog.unplaceable().is_empty() {
            out.push_str("\nKnown, but placements unknown (cannot be planned for):\n");
            for u in catalog.unplaceable() {
                out.push_str(&format!("  {}\n", u.key));
            }
        }
        out
    })
}

fn memory(mib: Option<u64>, status: Verification) -> String {
    match (mib, status) {
        (None, _) => "unknown".to_string(),
        (Some(m), Verification::Verified) => format!("{m} MiB"),
        (Some(m), s) => format!("{m} MiB ({})", s.as_str()),
    }
}

fn ids(m: &GpuModel) -> String {
    if m.device_ids.is_empty() {
        return "-".to_string();
    }
    m.device_ids.iter().map(|&id| format_device_id(id)).collect::<Vec<_>>().join(",")
}

fn list_or_dash(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_string()
    } else {
        items.join(", ")
    }
}

fn show_table(m: &GpuModel) -> String {
    let mut out = String::new();
    let line = |out: &mut String, label: &str, value: String| out.push_str(&format!("{label:<17}{value}\n"));
    line(&mut out, "Model:", m.key.clone());
    if !m.description.is_empty() {
        line(&mut out, "Description:", m.description.clone());
    }
    line(&mut out, "Architecture:", m.architecture.clone());
    line(&mut out, "Memory:", memory(m.memory_mib, m.memory_status));
    line(&mut out, "Device IDs:", ids(m));
    line(&mut out, "NVML names:", list_or_dash(&m.nvml_names));
    line(&mut out, "gpu.product:", list_or_dash(&m.product_labels));
    line(&mut out, "Placement units:", m.placement_units.to_string());
    line(&mut out, "Compute slices:", m.compute_slices.to_string());
    let totals = match &m.engine_totals {
        Some(e) => format!("dec {} enc {} jpeg {} ofa {}", e.dec, e.enc, e.jpeg, e.ofa),
        None => "unknown (not checked)".to_string(),
    };
    line(&mut out, "Media engines:", totals);
    out.push('\n');
    let rows: Vec<Vec<String>> = m
        .mig_profiles()
        .map(|id| &m.profiles[id])
        .map(|p| {
            let engines = if p.engines_known {
                let e = p.engines;
                format!("{}/{}/{}/{}", e.dec, e.enc, e.jpeg, e.ofa)
            } else {
                "?".to_string()
            };
            let starts = p.starts.iter().map(u8::to_string).collect::<Vec<_>>().join(",");
            vec![
                p.name.clone(),
                p.compute_slices.to_string(),
                p.memory_mib.to_string(),
                status_suffix(p.memory_status),
                starts,
                p.size.to_string(),
                p.max_instances.to_string(),
                engines,
                p.nvidia_smi_profile_id.map(|id| id.to_string()).unwrap_or_else(|| "-".to_string()),
                status_suffix(p.placements_status),
                if p.aliases.is_empty() { "-".to_string() } else { p.aliases.join(",") },
            ]
        })
        .collect();
    out.push_str(&output::table(
        &[
            "PROFILE",
            "COMPUTE",
            "MEMORY(MiB)",
            "MEMORY-STATUS",
            "STARTS",
            "SIZE",
            "MAX",
            "DEC/ENC/JPEG/OFA",
            "SMI-ID",
            "PLACEMENTS",
            "ALIASES",
        ],
        &rows,
    ));
    if !m.exclusive_groups.is_empty() {
        out.push_str("\nExclusive groups:\n");
        for g in &m.exclusive_groups {
            let mut rule = Vec::new();
            if let Some(max) = g.max_total {
                rule.push(format!("at most {max} of [{}]", g.profiles.join(", ")));
            }
            if !g.only_coexists_with.is_empty() {
                rule.push(format!(
                    "[{}] only next to [{}]",
                    g.profiles.join(", "),
                    g.only_coexists_with.join(", ")
                ));
            }
            out.push_str(&format!("  {} ({})\n", rule.join("; "), g.status.as_str()));
        }
    }
    if !m.notes.is_empty() {
        out.push_str("\nNotes:\n");
        for n in &m.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    out
}

fn status_suffix(s: Verification) -> String {
    s.as_str().to_string()
}
