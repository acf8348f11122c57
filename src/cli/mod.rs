//! Command-line interface. One file per subcommand; this module only dispatches.
//!
//! Exit codes: 0 success, 1 the answer is "no" (e.g. an invalid geometry), 2 bad input.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod agent;
pub mod agent_run;
#[cfg(feature = "demo")]
pub mod apiserver;
pub mod approve;
mod bounds;
pub mod catalog;
mod cluster;
pub mod controller;
pub mod crds;
#[cfg(feature = "demo")]
pub mod demo;
pub mod geometry;
pub mod migparted;
pub mod output;
pub mod plan;
pub mod policy_mode;
pub mod recommend;
#[cfg(feature = "demo")]
pub mod simulate;

#[derive(Debug, Parser)]
#[command(
    name = "geometer",
    version,
    about = "Plans and applies NVIDIA MIG geometry from live Kubernetes demand"
)]
pub struct Cli {
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true, env = "GEOMETER_LOG_JSON")]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// GPU models Geometer knows: list them or show one with its MIG profiles.
    Catalog(catalog::CatalogArgs),
    /// Check, place and enumerate MIG geometries of a GPU model.
    Geometry(geometry::GeometryArgs),
    /// Plan MIG geometry for pending demand from a cluster snapshot (read-only).
    Plan(plan::PlanArgs),
    /// Print Geometer's CustomResourceDefinitions as YAML (`geometer crds | kubectl apply -f -`).
    Crds(crds::CrdsArgs),
    /// The controller: plans MIG geometry from pending demand, publishes MigPlans, rolls them
    /// out node by node (leader-elected; serves /metrics, /healthz, /readyz).
    Controller(controller::ControllerArgs),
    /// The node agent; `probe` prints what NVML reports on this machine.
    Agent(agent::AgentArgs),
    /// Approve a MigPlan of a policy in Approve mode (sets spec.approved: true).
    Approve(approve::ApproveArgs),
    /// Right-sizing: workloads holding whole GPUs for a slice's work, the slice that holds what
    /// they use, and the patch to apply (read-only).
    Recommend(recommend::RecommendArgs),
    /// Run the in-memory Kubernetes API server on 127.0.0.1 and write a kubeconfig for kubectl.
    #[cfg(feature = "demo")]
    Apiserver(apiserver::ApiserverArgs),
    /// Convert between NVIDIA mig-parted configs and Geometer's MigNodes, MigPlans and MigPolicies.
    Migparted(migparted::MigpartedArgs),
    /// Replay a workload trace on a simulated cluster and compare allocation strategies.
    #[cfg(feature = "demo")]
    Simulate(Box<simulate::SimulateArgs>),
    /// Run Geometer end to end on a simulated GPU cluster with a shifting workload.
    #[cfg(feature = "demo")]
    Demo(demo::DemoArgs),
}

impl Command {
    /// The `-o` format the command was asked for, so that its errors come out in it too.
    fn output_format(&self) -> output::OutputFormat {
        use output::OutputFormat;
        match self {
            Command::Catalog(a) => match &a.command {
                catalog::CatalogCommand::List { output } | catalog::CatalogCommand::Show { output, .. } => {
                    *output
                }
            },
            Command::Geometry(a) => a.command.output_format(),
            Command::Plan(a) => a.output,
            Command::Recommend(a) => a.output,
            Command::Agent(a) => a.output_format(),
            _ => OutputFormat::Table,
        }
    }

    /// The demo prints its own progress, so the operator's logs only show when something goes
    /// wrong.
    fn prints_its_own_progress(&self) -> bool {
        #[cfg(feature = "demo")]
        if matches!(self, Command::Demo(_)) {
            return true;
        }
        false
    }
}

/// When installed as `kubectl-geometer`, kubectl runs us as `kubectl-geometer plan ...`;
/// argv[0] differs but clap only needs a program name, so nothing to rewrite beyond that.
pub fn plugin_args(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.collect();
    if let Some(first) = args.first_mut() {
        *first = OsString::from("geometer");
    }
    args
}

/// Reads the command line. A usage error (an unknown flag, a value out of range) is printed
/// as clap words it and exits 2, except that under `-o json` it is the JSON error object every
/// other failure is (see [`output::finish`]), so a script reading errors as JSON reads these too.
pub fn parse(args: Vec<OsString>) -> Result<Cli, ExitCode> {
    use clap::error::ErrorKind;
    match Cli::try_parse_from(&args) {
        Ok(cli) => Ok(cli),
        Err(e) if !e.use_stderr() || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            e.exit()
        }
        Err(e) if asks_for_json(&args) => Err(output::finish(
            Err(output::Failure::bad_input(anyhow::anyhow!(usage_error_words(&e.to_string())))),
            output::OutputFormat::Json,
        )),
        Err(e) => e.exit(),
    }
}

/// clap's error on one line (the arguments it lists, its tips), without the `error: ` prefix
/// and the usage lines that follow.
fn usage_error_words(rendered: &str) -> String {
    let lines = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"));
    let mut words = String::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let line = line.strip_prefix("error: ").unwrap_or(line);
        let joint = if words.is_empty() {
            ""
        } else if line.starts_with("tip: ") {
            "; "
        } else {
            " "
        };
        words.push_str(joint);
        words.push_str(line);
    }
    words
}

/// Whether the command line asks for `-o json` in any of the forms clap takes.
fn asks_for_json(args: &[OsString]) -> bool {
    let args: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    args.iter().enumerate().any(|(i, arg)| {
        matches!(*arg, "-ojson" | "-o=json" | "--output=json")
            || (matches!(*arg, "-o" | "--output") && args.get(i + 1) == Some(&"json"))
    })
}

/// Turns a command's result into an exit code, printing errors the way a user reads them.
pub fn run(cli: Cli) -> ExitCode {
    // The demo prints its own progress; the operator's logs only when something goes wrong.
    init_logging(cli.log_json, if cli.command.prints_its_own_progress() { "warn" } else { "info" });
    let format = cli.command.output_format();
    let result = match cli.command {
        Command::Catalog(args) => catalog::run(args),
        Command::Geometry(args) => geometry::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Crds(args) => crds::run(args),
        Command::Controller(args) => controller::run(args),
        Command::Agent(args) => agent::run(args),
        Command::Approve(args) => approve::run(args),
        Command::Recommend(args) => recommend::run(args),
        #[cfg(feature = "demo")]
        Command::Apiserver(args) => return apiserver::run(args),
        Command::Migparted(args) => migparted::run(args),
        #[cfg(feature = "demo")]
        Command::Simulate(args) => simulate::run(*args),
        #[cfg(feature = "demo")]
        Command::Demo(args) => demo::run(args),
    };
    output::finish(result, format)
}

fn init_logging(json: bool, default_level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("GEOMETER_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
