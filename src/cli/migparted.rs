//! `geometer migparted export|import`: NVIDIA mig-parted configs (the GPU Operator's
//! mig-manager format) from and to Geometer's objects.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

use super::catalog::CatalogSource;
use super::output::Failure;
use super::policy_mode::ModeArg;
use geometer_api::limits::quoted;
use geometer_api::migparted::export::{self, Which};
use geometer_api::migparted::{import, MigPartedConfig};
use geometer_api::names;

#[derive(Debug, Args)]
pub struct MigpartedArgs {
    #[command(subcommand)]
    pub command: MigpartedCommand,
}

#[derive(Debug, Subcommand)]
pub enum MigpartedCommand {
    /// Write the current or planned geometry as a mig-parted config (version v1, mig-configs),
    /// one config per node named after the node, GPUs listed by index. Placements are not part
    /// of the format: mig-parted chooses them itself.
    Export(ExportArgs),
    /// Read a mig-parted config into a MigPolicy (YAML on stdout). A MigPolicy has no field
    /// for whole layouts, so the configs' profiles become spec.allowedProfiles and Geometer
    /// chooses the layouts from demand.
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// YAML with MigNodes or MigPlans (`kubectl get mignodes -o yaml` works), a planning
    /// snapshot, or a plan from `geometer plan -o yaml`; `-` reads stdin.
    #[arg(value_name = "FILE")]
    pub input: PathBuf,
    /// current: what the GPUs have now; planned: the MigNode's desired geometry or the
    /// plan's target.
    #[arg(long, value_enum, default_value_t = GeometryArg::Planned)]
    pub geometry: GeometryArg,
    /// Export only this node (repeat for several).
    #[arg(long = "node", value_name = "NAME")]
    pub nodes: Vec<String>,
    /// Name of the config when exactly one node is exported [default: the node's name].
    #[arg(long, value_name = "NAME")]
    pub config: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GeometryArg {
    /// What the GPUs have now.
    Current,
    /// What Geometer is moving them to.
    Planned,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// mig-parted config file (e.g. the GPU Operator's default-mig-parted-config data); `-`
    /// reads stdin.
    #[arg(value_name = "FILE")]
    pub input: PathBuf,
    /// Read only this config (e.g. all-balanced) [default: every config in the file].
    #[arg(long, value_name = "NAME")]
    pub config: Option<String>,
    /// Name of the MigPolicy [default: the --config name, or mig-parted].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Mode of the MigPolicy.
    #[arg(long, value_enum, default_value_t = ModeArg::DryRun)]
    pub mode: ModeArg,
    /// Node label the policy selects, e.g. nvidia.com/mig.config=all-balanced (repeat for
    /// several; all must match) [default: every node].
    #[arg(long = "node-selector", value_name = "KEY=VALUE")]
    pub node_selector: Vec<String>,
    #[command(flatten)]
    pub catalog: CatalogSource,
}

pub fn run(args: MigpartedArgs) -> Result<(), Failure> {
    match args.command {
        MigpartedCommand::Export(a) => run_export(a),
        MigpartedCommand::Import(a) => run_import(a),
    }
}

fn read_input(path: &Path) -> Result<String, Failure> {
    let mut text = String::new();
    let result = if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    result.with_context(|| format!("cannot read {}", path.display())).map_err(Failure::bad_input)?;
    Ok(text)
}

fn run_export(args: ExportArgs) -> Result<(), Failure> {
    let text = read_input(&args.input)?;
    let docs: Vec<Value> = geometer_solver::yaml::from_multiple(&text)
        .with_context(|| format!("{} is not YAML", args.input.display()))
        .map_err(Failure::bad_input)?;
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    let which = match args.geometry {
        GeometryArg::Current => Which::Current,
        GeometryArg::Planned => Which::Planned,
    };
    let found = export::layouts(&docs, which)
        .with_context(|| format!("cannot export {}", args.input.display()))
        .map_err(Failure::bad_input)?;
    let mut layouts = found.layouts;
    if !args.nodes.is_empty() {
        let missing: Vec<&String> =
            args.nodes.iter().filter(|n| !layouts.iter().any(|l| &l.node == *n)).collect();
        if !missing.is_empty() {
            let present: Vec<&str> = layouts.iter().map(|l| l.node.as_str()).collect();
            return Err(Failure::bad_input(anyhow!(
                "--node {}: not in {} (it has {})",
                missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                args.input.display(),
                present.join(", ")
            )));
        }
        layouts.retain(|l| args.nodes.contains(&l.node));
    }
    let config = match (&args.config, layouts.len()) {
        (Some(name), 1) => {
            let name = name.clone();
            export::to_config(&layouts, move |_| name.clone())
        }
        (Some(_), n) => {
            return Err(Failure::bad_input(anyhow!(
                "--config names one config, but {n} nodes are exported; pick one with --node or leave --config out to name each config after its node"
            )))
        }
        (None, _) => export::to_config(&layouts, str::to_string),
    };
    print!("{}", config.to_yaml());
    for why in &found.skipped {
        eprintln!("note: left out {why}");
    }
    eprintln!(
        "note: mig-parted configs hold instance counts, not placements; mig-parted (or mig-manager) chooses the placements when it applies a config"
    );
    Ok(())
}

fn run_import(args: ImportArgs) -> Result<(), Failure> {
    let catalog = args.catalog.load()?;
    let selector = parse_selector(&args.node_selector)?;
    let text = read_input(&args.input)?;
    let file = MigPartedConfig::parse(&text)
        .with_context(|| format!("{} is not a mig-parted config", args.input.display()))
        .map_err(Failure::bad_input)?;
    let imported = import::allowed_profiles(&file, args.config.as_deref(), &catalog)
        .with_context(|| format!("cannot import {}", args.input.display()))
        .map_err(Failure::bad_input)?;
    let name = match (&args.name, &args.config) {
        (Some(name), _) => name.clone(),
        (None, Some(config)) if names::object_name_problem(config).is_none() => config.clone(),
        (None, Some(config)) => {
            return Err(Failure::bad_input(anyhow!(
                "--config {config:?} is not a valid MigPolicy name (lowercase letters, digits, '-' and '.'); give one with --name"
            )))
        }
        (None, None) => "mig-parted".to_string(),
    };
    if let Some(problem) = names::object_name_problem(&name) {
        return Err(Failure::bad_input(anyhow!(
            "--name {}: not a valid MigPolicy name: {problem}",
            quoted(&name)
        )));
    }
    let policy = import::policy(&name, &imported, args.mode.into(), &selector);
    let yaml =
        serde_saphyr::to_string(&policy).context("cannot render the MigPolicy").map_err(Failure::internal)?;
    print!("{yaml}");
    eprintln!(
        "note: MigPolicy has no allowed-layouts field, so the profiles of {} became spec.allowedProfiles ({}); the instance counts are not kept, Geometer chooses each GPU's layout from demand",
        describe_configs(&imported.configs),
        imported.profiles.join(", ")
    );
    if selector.is_empty() {
        eprintln!("note: the policy selects every node; narrow it with --node-selector, e.g. --node-selector nvidia.com/mig.config=NAME");
    }
    for note in &imported.notes {
        eprintln!("note: {note}");
    }
    Ok(())
}

fn describe_configs(configs: &[String]) -> String {
    match configs {
        [one] => format!("config {one}"),
        many => format!("{} configs", many.len()),
    }
}

fn parse_selector(pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut out = BTreeMap::new();
    for pair in pairs {
        let (key, value) = pair.split_once('=').filter(|(k, _)| !k.is_empty()).ok_or_else(|| {
            Failure::bad_input(anyhow!(
                "--node-selector {}: expected KEY=VALUE, e.g. nvidia.com/mig.config=all-balanced",
                quoted(pair)
            ))
        })?;
        // The API server stores a MigPolicy whatever its selector holds, and a key or value no
        // node label can have would select nothing: refuse it here, as kubectl label would.
        let problem =
            names::label_key_problem(key).map(|p| format!("label key {}: {p}", quoted(key))).or_else(|| {
                names::label_value_problem(value).map(|p| format!("label value {}: {p}", quoted(value)))
            });
        if let Some(problem) = problem {
            return Err(Failure::bad_input(anyhow!("--node-selector {}: {problem}", quoted(pair))));
        }
        if out.insert(key.to_string(), value.to_string()).is_some() {
            return Err(Failure::bad_input(anyhow!(
                "--node-selector: label key {} given twice; a node has one value per label",
                quoted(key)
            )));
        }
    }
    Ok(out)
}
