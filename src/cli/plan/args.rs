//! The arguments of `geometer plan`, shared by the offline and the live planner.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanError, PlanOptions};
use geometer_solver::snapshot::Snapshot;

use crate::cli::catalog::CatalogSource;
use crate::cli::output::OutputFormat;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum SolverChoice {
    /// The ILP planner (falls back to greedy when the solver fails).
    #[default]
    Ilp,
    /// The greedy baseline that existing dynamic-MIG tools use, for comparison.
    Greedy,
}

impl SolverChoice {
    pub fn plan(
        self,
        snapshot: &Snapshot,
        catalog: &Catalog,
        options: &PlanOptions,
    ) -> Result<Plan, PlanError> {
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
    #[arg(long, value_name = "MS", value_parser = crate::cli::bounds::time_limit_ms)]
    pub time_limit_ms: Option<u64>,
}
