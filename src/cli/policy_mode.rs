//! `--mode` / `--policy-mode`: a MigPolicy's `spec.mode`, as `geometer demo` and
//! `geometer migparted import` take it.

use clap::ValueEnum;
use geometer_api::PolicyMode;

/// The policy mode, as in `MigPolicy.spec.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Publish plans only; GPUs are never changed.
    #[value(name = "DryRun")]
    DryRun,
    /// Publish plans and apply each one once it is approved.
    #[value(name = "Approve")]
    Approve,
    /// Apply plans as soon as they are published.
    #[value(name = "Auto")]
    Auto,
}

impl From<ModeArg> for PolicyMode {
    fn from(m: ModeArg) -> PolicyMode {
        match m {
            ModeArg::DryRun => PolicyMode::DryRun,
            ModeArg::Approve => PolicyMode::Approve,
            ModeArg::Auto => PolicyMode::Auto,
        }
    }
}
