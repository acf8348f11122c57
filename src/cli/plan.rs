//! `geometer plan`: plan MIG geometry offline from a cluster snapshot, read-only.
//!
//! `kubectl get nodes,pods -A -o yaml | geometer plan --snapshot -` plans against a real
//! cluster without touching it.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::{Args, ValueEnum};
use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanError, PlanOptions};
use geometer_solver::snapshot::Snapshot;

use super::catalog::CatalogSource;
use super::output::{self, Failure, OutputFormat};
use geometer_controller::adapter;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum SolverChoice {
    /// The ILP planner (falls back to greedy when the solver fails).
    #[default]
    Ilp,
    /// The greedy baseline that existing dynamic-MIG tools use, for comparison.
    Greedy,
}

impl SolverChoice {
    pub fn plan(self, snapshot: &Snapshot, catalog: &Catalog, options: &PlanOptions) -> Result<Plan, PlanError> {
        match self {
            SolverChoice::Ilp => geometer_solver::plan(snapshot, catalog, options),
            SolverChoice::Greedy => geometer_solver::greedy::plan(snapshot, catalog, options),
        }
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Cluster snapshot: a Kubernetes List in YAML or JSON as `kubectl get nodes,pods -A -o yaml`
    /// prints it (optionally with MigNode/MigPolicy objects), or a planner snapshot
    /// (`nodes`/`pending`/`running`/`policy`). `-` reads standard input. Without it, the
    /// cluster of the current kubeconfig is read (read-only) and each MigPolicy is planned as
    /// the controller would plan it now (`kubectl geometer plan`).
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<String>,
    /// Policy file: a MigPolicy object, or the fields allowedProfiles, headroom,
    /// evictionAllowed, maxGpusChanged, maxNodesChanged, timeLimitMs. Wins over a MigPolicy in
    /// the snapshot. Without any policy nothing is evicted.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    #[command(flatten)]
    pub catalog: CatalogSource,
    /// Output format: a human review (table), or the plan as JSON or YAML.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Planner to use.
    #[arg(long, value_enum, default_value_t = SolverChoice::Ilp)]
    pub solver: SolverChoice,
    /// Solver time limit in milliseconds (overrides the policy's); the best plan found by then
    /// is used.
    #[arg(long, value_name = "MS")]
    pub time_limit_ms: Option<u64>,
}

fn read_input(path: &str) -> Result<String, Failure> {
    let mut text = String::new();
    if path == "-" {
        std::io::stdin().read_to_string(&mut text).context("cannot read the snapshot from standard input").map_err(Failure::bad_input)?;
    } else {
        text = std::fs::read_to_string(path).with_context(|| format!("cannot read --snapshot {path}")).map_err(Failure::bad_input)?;
    }
    Ok(text)
}

/// A planner snapshot has `nodes` and no `kind`; anything else goes through the adapter.
fn is_planner_snapshot(value: &serde_json::Value) -> bool {
    value.get("kind").is_none() && value.get("nodes").is_some()
}

pub fn run(args: PlanArgs) -> Result<(), Failure> {
    let catalog = args.catalog.load()?;
    if args.time_limit_ms == Some(0) {
        return Err(Failure::bad_input(anyhow!("--time-limit-ms 0: give a positive number of milliseconds")));
    }
    let Some(snapshot) = &args.snapshot else {
        return super::plan_live::run(&args, catalog);
    };
    let text = read_input(snapshot)?;
    let bad = |e: anyhow::Error| Failure::bad_input(e);
    let policy = match &args.policy {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read --policy {}", path.display())).map_err(bad)?;
            Some(adapter::parse_policy(&text).with_context(|| format!("invalid --policy {}", path.display())).map_err(bad)?)
        }
        None => None,
    };
    let value = adapter::parse_value(&text).context("invalid --snapshot").map_err(bad)?;
    let (snapshot, warnings) = if is_planner_snapshot(&value) {
        let mut snapshot: Snapshot =
            serde_json::from_value(value).context("invalid --snapshot (planner snapshot format)").map_err(bad)?;
        if let Some(p) = policy {
            snapshot.policy = Some(p.policy);
        }
        (snapshot, Vec::new())
    } else {
        let objects = adapter::parse_objects(&text).context("invalid --snapshot").map_err(bad)?;
        let built = adapter::build_snapshot(&objects, &catalog, policy, jiff::Timestamp::now()).context("invalid --snapshot").map_err(bad)?;
        (built.snapshot, built.warnings)
    };
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    if snapshot.nodes.is_empty() {
        eprintln!("warning: no managed MIG nodes in the snapshot (GPU Operator labels, MIG capacity or MigNode objects)");
    }
    let options = PlanOptions { time_limit: args.time_limit_ms.map(Duration::from_millis) };
    let mut plan = args.solver.plan(&snapshot, &catalog, &options).context("the snapshot does not fit the catalog").map_err(bad)?;
    plan.notes.extend(warnings);
    output::print(args.output, &plan, || plan.render_table())
}
