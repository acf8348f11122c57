//! `geometer geometry`: check and enumerate MIG geometries of one GPU model.

use anyhow::anyhow;
use clap::{Args, Subcommand};
use geometer_solver::catalog::{GpuModel, ProfileId};
use geometer_solver::geometry::{self, Geometry, GeometryError};
use serde::Serialize;

use super::catalog::CatalogSource;
use super::output::{self, Failure, OutputFormat};

#[derive(Debug, Args)]
pub struct GeometryArgs {
    #[command(subcommand)]
    pub command: GeometryCommand,
    #[command(flatten)]
    pub source: CatalogSource,
}

#[derive(Debug, Subcommand)]
pub enum GeometryCommand {
    /// Check a geometry, or find a placement for profiles given without a start.
    ///
    /// Exit 0 and print the placement when it is valid, 1 and print why when it is not, 2 when
    /// the model, a profile or a token is unknown or malformed.
    Check {
        /// GPU model: catalog key, PCI id (0x20B010DE), NVML name or gpu.product label.
        #[arg(long, short = 'm')]
        model: String,
        /// Instances as PROFILE[@START], comma-separated, e.g. 3g.20gb@4,2g.10gb@0,1g.5gb@2.
        /// Without @START Geometer picks the start; 3x1g.5gb means three 1g.5gb.
        spec: String,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
    /// List every valid geometry of a model (or only the maximal ones, to which no profile can
    /// be added), in a fixed order.
    Enumerate {
        /// GPU model: catalog key, PCI id (0x20B010DE), NVML name or gpu.product label.
        #[arg(long, short = 'm')]
        model: String,
        /// Profiles to build from, comma-separated; `all` for every profile. Default: the
        /// standard profiles (no +me, +me.all, -me or +gfx).
        #[arg(long, value_delimiter = ',')]
        profiles: Vec<String>,
        /// Only geometries to which no listed profile can be added.
        #[arg(long)]
        maximal: bool,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
}

impl GeometryCommand {
    pub(super) fn output_format(&self) -> OutputFormat {
        match self {
            GeometryCommand::Check { output, .. } | GeometryCommand::Enumerate { output, .. } => *output,
        }
    }
}

pub fn run(args: GeometryArgs) -> Result<(), Failure> {
    let catalog = args.source.load()?;
    match args.command {
        GeometryCommand::Check { model, spec, output } => {
            let model = CatalogSource::find(&catalog, &model)?;
            check(model, &spec, output)
        }
        GeometryCommand::Enumerate { model, profiles, maximal, output } => {
            let model = CatalogSource::find(&catalog, &model)?;
            enumerate(model, &profiles, maximal, output)
        }
    }
}

#[derive(Serialize)]
struct InstanceOut {
    profile: String,
    start: u8,
    size: u8,
    compute_slices: u8,
    memory_mib: u64,
}

fn instances_out(model: &GpuModel, g: &Geometry) -> Vec<InstanceOut> {
    let mut order = g.instances().to_vec();
    geometry::sort_largest_first(&mut order, model);
    order
        .iter()
        .map(|p| {
            let profile = model.profile_info(p.profile);
            InstanceOut {
                profile: profile.name.clone(),
                start: p.start,
                size: profile.size,
                compute_slices: profile.compute_slices,
                memory_mib: profile.memory_mib,
            }
        })
        .collect()
}

#[derive(Serialize)]
struct CheckOut {
    model: String,
    valid: bool,
    /// True when Geometer chose some of the starts.
    placed: bool,
    geometry: Option<Vec<InstanceOut>>,
    spec: Option<String>,
    reason: Option<String>,
    compute_slices_used: Option<u32>,
    compute_slices_total: u8,
}

fn check(model: &GpuModel, spec: &str, format: OutputFormat) -> Result<(), Failure> {
    let parsed = geometry::parse_spec(model, spec).map_err(|e| Failure::bad_input(e.into()))?;
    let placed = !parsed.unplaced().is_empty();
    let result = parsed.resolve(model);
    let out = match &result {
        Ok(g) => CheckOut {
            model: model.key.clone(),
            valid: true,
            placed,
            geometry: Some(instances_out(model, g)),
            spec: Some(g.display(model)),
            reason: None,
            compute_slices_used: Some(g.compute_slices(model)),
            compute_slices_total: model.compute_slices,
        },
        Err(e) => CheckOut {
            model: model.key.clone(),
            valid: false,
            placed,
            geometry: None,
            spec: None,
            reason: Some(e.to_string()),
            compute_slices_used: None,
            compute_slices_total: model.compute_slices,
        },
    };
    output::print(format, &out, || match &result {
        Ok(g) => check_table(model, g, placed),
        Err(e) => format!("invalid on {}: {e}\n", model.key),
    })?;
    match result {
        Ok(_) => Ok(()),
        // An id the model lacks cannot come from a parsed spec; anything else is a "no".
        Err(GeometryError::UnknownProfileId { .. }) => {
            Err(Failure::internal(anyhow!("profile id out of range")))
        }
        Err(_) => Err(Failure::answered_no()),
    }
}

/// The geometry with a line per instance and per free run of units, in unit order.
fn check_table(model: &GpuModel, g: &Geometry, placed: bool) -> String {
    let verdict = if placed { "placed" } else { "valid" };
    let mut out = format!("{verdict} on {}: {}\n", model.key, g.display(model));
    let mut rows = Vec::new();
    let used = g.used_units(model);
    let mut unit = 0u8;
    let mut by_start: Vec<_> = g.instances().to_vec();
    by_start.sort();
    let mut next = by_start.iter().peekable();
    let range = |a: u8, b: u8| {
        if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        }
    };
    while unit < model.placement_units {
        if let Some(p) = next.next_if(|p| p.start == unit) {
            let profile = model.profile_info(p.profile);
            rows.push(vec![range(unit, unit + profile.size - 1), profile.name.clone()]);
            unit += profile.size;
        } else if used & (1 << unit) != 0 {
            // Only reachable for overlapping instances, which a valid geometry never has.
            rows.push(vec![range(unit, unit), "(overlap)".to_string()]);
            unit += 1;
        } else {
            let from = unit;
            while unit < model.placement_units && used & (1 << unit) == 0 {
                unit += 1;
            }
            rows.push(vec![range(from, unit - 1), "(free)".to_string()]);
        }
    }
    out.push_str(&output::table(&["UNITS", "INSTANCE"], &rows));
    out.push_str(&format!("compute slices used: {} of {}\n", g.compute_slices(model), model.compute_slices));
    out
}

/// Profile ids from `--profiles`; bad input names the unknown profile and the known ones.
pub fn profile_ids(model: &GpuModel, names: &[String]) -> Result<Vec<ProfileId>, Failure> {
    let names: Vec<&str> = names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()).collect();
    if names.is_empty() {
        return Ok(model.standard_profiles());
    }
    if names.len() == 1 && names[0].eq_ignore_ascii_case("all") {
        return Ok(model.all_profiles());
    }
    let mut ids = Vec::new();
    for name in names {
        let id = model.profile(name).ok_or_else(|| {
            let known: Vec<&str> = model.mig_profiles().map(|id| model.profiles[id].name.as_str()).collect();
            Failure::bad_input(anyhow!(
                "--profiles: {name:?} is not a profile of {}; known profiles: {}",
                model.key,
                known.join(", ")
            ))
        })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

#[derive(Serialize)]
struct EnumerateOut {
    model: String,
    profiles: Vec<String>,
    maximal: bool,
    count: usize,
    geometries: Vec<Vec<InstanceOut>>,
}

fn enumerate(
    model: &GpuModel,
    profiles: &[String],
    maximal: bool,
    format: OutputFormat,
) -> Result<(), Failure> {
    let ids = profile_ids(model, profiles)?;
    let found = geometry::enumerate(model, &ids, maximal);
    let names: Vec<String> = ids.iter().map(|&id| model.profile_info(id).name.clone()).collect();
    let out = EnumerateOut {
        model: model.key.clone(),
        profiles: names.clone(),
        maximal,
        count: found.len(),
        geometries: found.iter().map(|g| instances_out(model, g)).collect(),
    };
    output::print(format, &out, || {
        let mut text = String::new();
        for g in &found {
            text.push_str(&g.display(model));
            text.push('\n');
        }
        let kind = if maximal { "maximal geometries" } else { "valid geometries (the empty one included)" };
        text.push_str(&format!("{} {kind} of {} from {}\n", found.len(), model.key, names.join(", ")));
        text
    })
}
