//! Workload traces: the model every reader produces, and the readers.
//!
//! Times are whole milliseconds so that event order and the accounting are exact.

pub mod alibaba;
pub mod gangs;
pub mod geometer;
pub mod load;
mod records;
pub mod synthetic;

use geometer_solver::words::quoted;
use thiserror::Error;

/// Milliseconds since the start of the trace.
pub type Millis = u64;

/// What a pod asks of GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuRequest {
    /// MIG instances by profile name (`nvidia.com/mig-<profile>`), each with a count.
    Mig(Vec<(String, u32)>),
    /// `num_gpu` GPUs with `gpu_milli` thousandths of each (the Alibaba encoding). A share below
    /// 1000 is only valid with `num_gpu == 1`; the simulator maps it to a MIG profile.
    Share { num_gpu: u32, gpu_milli: u32 },
}

/// One pod of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracePod {
    pub name: String,
    pub arrival: Millis,
    /// How long the pod runs once started; `None`: until the end of the simulation.
    pub duration: Option<Millis>,
    pub request: GpuRequest,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub priority: i32,
    /// GPU models the pod may run on (catalog names); empty: any.
    pub gpu_models: Vec<String>,
    /// Nodes the pod may run on; empty: any.
    pub nodes: Vec<String>,
    /// The pod carries `geometer.dev/do-not-disrupt`: never evicted.
    pub do_not_disrupt: bool,
    /// The gang (a job's worker pods that start together) the pod belongs to; `None`: a pod on
    /// its own.
    pub gang: Option<GangRef>,
}

/// A pod's gang: its name, shared by every member, and how many members must hold their
/// slices at once before any of them runs (`None`: every member of the gang in the trace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangRef {
    pub name: String,
    pub min_members: Option<u32>,
}

/// A trace, with what the reader noticed and the user should know (dropped rows, defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub pods: Vec<TracePod>,
    pub notes: Vec<String>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TraceError {
    #[error("{file}: line {line}: field {} has value {}: {reason}", quoted(field), quoted(value))]
    Field { file: String, line: usize, field: String, value: String, reason: String },
    #[error("{file}: line {line}: {found} fields, but the header has {expected}")]
    Width { file: String, line: usize, expected: usize, found: usize },
    #[error("{file}: missing column {} (header: {})", quoted(column), quoted(header))]
    MissingColumn { file: String, column: String, header: String },
    #[error("{file}: {reason}")]
    Invalid { file: String, reason: String },
    #[error("{file}: not a valid Geometer YAML trace: {reason}")]
    Yaml { file: String, reason: String },
}

/// Parses a time in seconds (decimals allowed) into milliseconds.
pub(crate) fn seconds_to_millis(text: &str) -> Result<Millis, String> {
    let seconds: f64 = text.trim().parse().map_err(|_| "not a number of seconds".to_string())?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err("must be a non-negative number of seconds".into());
    }
    // A bound keeps every later sum of times far from overflow (about 31,700 years).
    if seconds > 1e12 {
        return Err("is more than 10^12 seconds".into());
    }
    Ok((seconds * 1000.0).round() as Millis)
}
