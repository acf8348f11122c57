//! `geometer plan`: a plan for a snapshot file ([`offline`]), or for the cluster of the
//! current kubeconfig as the controller would make it now ([`live`]). Read-only either way.

mod args;
mod live;
mod offline;

pub use args::{PlanArgs, SolverChoice};

use crate::cli::output::Failure;

pub fn run(args: PlanArgs) -> Result<(), Failure> {
    let catalog = args.catalog.load()?;
    match &args.snapshot {
        Some(snapshot) => offline::run(&args, catalog, snapshot),
        None => live::run(&args, catalog),
    }
}
