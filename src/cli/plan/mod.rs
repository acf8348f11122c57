//! `geometer plan`: a plan for a snapshot file ([`offline`]), or for the cluster of the
//! current kubeconfig as the controller would make it now ([`live`]). Read-only either way.

mod args;
mod live;
mod offline;

use anyhow::anyhow;

pub use args::{PlanArgs, SolverChoice};

use crate::cli::output::Failure;

pub fn run(args: PlanArgs) -> Result<(), Failure> {
    let catalog = args.catalog.load()?;
    if args.time_limit_ms == Some(0) {
        return Err(Failure::bad_input(anyhow!("--time-limit-ms 0: give a positive number of milliseconds")));
    }
    match &args.snapshot {
        Some(snapshot) => offline::run(&args, catalog, snapshot),
        None => live::run(&args, catalog),
    }
}
