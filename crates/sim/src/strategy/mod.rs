//! Allocation strategies the simulator compares. Each decides the geometry GPUs start with and,
//! for the dynamic ones, how to repartition at the end of a batch of demand.

mod planned;
mod static_layout;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use geometer_solver::words::quoted;
use thiserror::Error;

use crate::cluster::Cluster;
use crate::trace::Millis;
use crate::workload::{GangIdx, ProfileKey, Workload, WHOLE_GPU};

pub use planned::{PlannerStrategy, MODEL_LABEL};
pub use static_layout::{StaticLayout, StaticStrategy};

/// One MIG instance (or, with [`WHOLE_GPU`], the GPU with MIG mode off, always at 0) at its
/// placement start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    pub profile: ProfileKey,
    pub start: u8,
}

/// The strategies `--strategy` accepts.
///
/// A GPU is in one of two modes: MIG (a geometry of slices, possibly none) or whole (MIG mode
/// off: the one instance [`WHOLE_GPU`], which a whole-GPU pod takes all of). What each strategy
/// does with the mode is said on its variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyKind {
    /// No MIG: every GPU is whole from start to end; a pod gets whole GPUs, one per instance
    /// it asks for.
    WholeGpu,
    /// A fixed NVIDIA mig-parted layout on every GPU: MIG stays on, so pods asking for whole
    /// GPUs (`--whole-gpus whole`) are never served.
    Static(StaticLayout),
    /// The solver's greedy baseline: repartitions only free slices, nodes in name order. Its
    /// candidate geometries include the whole GPU, so it turns an idle GPU's MIG off for a
    /// waiting whole-GPU pod (and an idle whole GPU back to MIG for slices) like any change.
    Greedy,
    /// The ILP planner, no eviction. The whole GPU is one of every GPU's geometries; a GPU a
    /// whole-GPU pod runs on keeps its mode until the pod ends.
    Geometer,
    /// The ILP planner with eviction allowed (never a do-not-disrupt pod): it may also evict
    /// a whole-GPU pod to change its GPU's mode.
    GeometerEvict,
    /// [`StrategyKind::Geometer`] without gang awareness: every pod planned on its own
    /// (`PlanOptions::ignore_gangs`), so a plan may give slices to part of a gang.
    GeometerNoGangs,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 6] = [
        StrategyKind::WholeGpu,
        StrategyKind::Static(StaticLayout::AllBalanced),
        StrategyKind::Static(StaticLayout::All1g),
        StrategyKind::Greedy,
        StrategyKind::Geometer,
        StrategyKind::GeometerEvict,
    ];

    /// Every strategy `--strategy` accepts: [`StrategyKind::ALL`] and `geometer-no-gangs`.
    pub fn accepted() -> impl Iterator<Item = StrategyKind> {
        StrategyKind::ALL.into_iter().chain([StrategyKind::GeometerNoGangs])
    }

    /// The strategies run when none is named: [`StrategyKind::ALL`], and for a workload with
    /// gangs also `geometer-no-gangs` (without gangs it is `geometer`).
    pub fn defaults(gangs: bool) -> Vec<StrategyKind> {
        let mut kinds = StrategyKind::ALL.to_vec();
        if gangs {
            kinds.push(StrategyKind::GeometerNoGangs);
        }
        kinds
    }

    pub fn is_dynamic(&self) -> bool {
        matches!(
            self,
            StrategyKind::Greedy
                | StrategyKind::Geometer
                | StrategyKind::GeometerEvict
                | StrategyKind::GeometerNoGangs
        )
    }

    /// Plans a gang's members together (all or nothing). The greedy baseline does not: the
    /// scripts it stands for know no gangs.
    pub fn gang_aware(&self) -> bool {
        matches!(self, StrategyKind::Geometer | StrategyKind::GeometerEvict)
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrategyKind::WholeGpu => write!(f, "whole-gpu"),
            StrategyKind::Static(layout) => write!(f, "static:{layout}"),
            StrategyKind::Greedy => write!(f, "greedy"),
            StrategyKind::Geometer => write!(f, "geometer"),
            StrategyKind::GeometerEvict => write!(f, "geometer-evict"),
            StrategyKind::GeometerNoGangs => write!(f, "geometer-no-gangs"),
        }
    }
}

impl FromStr for StrategyKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        StrategyKind::accepted().find(|k| k.to_string() == text).ok_or_else(|| {
            let known: Vec<String> = StrategyKind::accepted().map(|k| k.to_string()).collect();
            format!("--strategy {} is not known; use one of: {}", quoted(text), known.join(", "))
        })
    }
}

/// What a dynamic strategy sees at the end of a batch.
#[derive(Debug)]
pub struct PlanView<'a> {
    pub now: Millis,
    pub cluster: &'a Cluster,
    pub workload: &'a Workload,
    pub nodes: Vec<NodeView>,
    /// Every GPU of a node that is not already reconfiguring, in node order.
    pub gpus: Vec<GpuView>,
    /// Pending pods no earlier plan is already making room for, by pod index.
    pub demand: Vec<usize>,
    /// Every gang that has not started and has a member in `demand`.
    pub gangs: Vec<GangView>,
}

/// A gang that has not started, as a plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangView {
    pub gang: GangIdx,
    /// Members that count towards its minimum without slices from this plan: those holding
    /// slices (waiting for the rest) and those an earlier plan is already making room for.
    pub members_counted: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub index: usize,
    /// False while a reconfiguration is under way or the node's stabilisation window lasts: the
    /// planner must leave the node alone.
    pub plannable: bool,
    pub cpu_free: Option<u64>,
    pub memory_free: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuView {
    /// Engine-wide GPU id, used in [`Replan::targets`].
    pub id: usize,
    pub node: usize,
    pub index_on_node: u32,
    pub model: usize,
    /// Instances with the pod holding each.
    pub slots: Vec<(Slot, Option<usize>)>,
}

/// A dynamic strategy's decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replan {
    /// New geometry for the GPUs that change (by [`GpuView::id`]).
    pub targets: Vec<(usize, Vec<Slot>)>,
    /// Running pods to evict.
    pub evictions: Vec<usize>,
    /// Pending (or evicted) pods the plan makes room for, and on which node.
    pub placements: Vec<(usize, usize)>,
    /// Pending pods the plan puts on free slices that already exist, and on which node. The
    /// engine keeps those slices for a gang member until its gang starts (or the Permit
    /// timeout after the plan's last node is ready), like a pod's `nominatedNodeName`.
    pub reservations: Vec<(usize, usize)>,
    pub planner_time: Duration,
}

#[derive(Debug, Error)]
pub enum StrategyError {
    #[error("strategy {strategy}: {reason}")]
    Setup { strategy: String, reason: String },
    #[error("strategy {strategy}: planning failed at t={time_s}s: {reason}")]
    Plan { strategy: String, time_s: f64, reason: String },
}

/// A strategy the engine can run.
pub trait Strategy {
    fn kind(&self) -> StrategyKind;

    /// The geometry every GPU of cluster model `model` starts with.
    fn initial_geometry(&self, model: usize) -> Vec<Slot>;

    /// Called at the end of a batch with unmet demand; static strategies return `None`.
    fn plan(&mut self, view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError>;
}

/// No MIG: every GPU is one allocatable unit (whole) for the whole run.
pub struct WholeGpu;

impl Strategy for WholeGpu {
    fn kind(&self) -> StrategyKind {
        StrategyKind::WholeGpu
    }

    fn initial_geometry(&self, _model: usize) -> Vec<Slot> {
        vec![Slot { profile: WHOLE_GPU, start: 0 }]
    }

    fn plan(&mut self, _view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError> {
        Ok(None)
    }
}
