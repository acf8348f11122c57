//! The `geometer` binary: a thin shell over the library (also usable as `kubectl-geometer`).
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = geometer::cli::Cli::parse_from(geometer::cli::plugin_args(std::env::args_os()));
    geometer::cli::run(cli)
}
