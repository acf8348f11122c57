//! The dynamic strategies: the solver's greedy baseline and its ILP planner (with and without
//! eviction, with and without gangs), fed a snapshot of the simulated cluster at the end of
//! every batch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanOptions, SliceSource};
use geometer_solver::snapshot::{
    Gang, Gpu, Instance, Node, NodeSelectorTerm, Operator, Pod, Policy, Requirement, Snapshot,
};
use geometer_solver::PodKey;

use super::{PlanView, Replan, Slot, Strategy, StrategyError, StrategyKind};
use crate::cluster::Cluster;
use crate::trace::Millis;
use crate::workload::{ProfileKey, SimPod, Workload};

/// Nodes carry their GPU model under this label, so that a pod's model constraint becomes a
/// required node affinity the planner understands.
pub const MODEL_LABEL: &str = "geometer.dev/gpu-model";
const NAMESPACE: &str = "sim";

pub struct PlannerStrategy {
    kind: StrategyKind,
    catalog: Catalog,
    time_limit: Duration,
    /// Catalog key per cluster model.
    model_keys: Vec<String>,
    node_names: Vec<String>,
    node_index: HashMap<String, usize>,
    pod_index: HashMap<String, usize>,
    profile_names: Vec<String>,
    profile_keys: HashMap<String, ProfileKey>,
    /// Forecast window in milliseconds (0: plan for pending pods only; always 0 for greedy).
    forecast_window: Millis,
    /// The stabilisation window the plans are made under (0: none; always 0 for greedy), which
    /// lets the planner shape the empty GPUs of the nodes it changes.
    stabilisation: Millis,
    /// `(arrival, pod index)`, sorted.
    arrivals: Vec<(Millis, usize)>,
}

impl PlannerStrategy {
    pub fn new(
        kind: StrategyKind,
        catalog: &Catalog,
        cluster: &Cluster,
        workload: &Workload,
        time_limit_ms: u64,
        forecast_window: Millis,
    ) -> Result<Self, String> {
        if !kind.is_dynamic() {
            return Err(format!("{kind} does not plan"));
        }
        let mut model_keys = Vec::new();
        for model in &cluster.models {
            let found = catalog
                .find(&model.name)
                .ok_or_else(|| format!("GPU model {} is not in the catalog", model.name))?;
            model_keys.push(found.key.clone());
        }
        Ok(PlannerStrategy {
            kind,
            catalog: catalog.clone(),
            time_limit: Duration::from_millis(time_limit_ms.max(1)),
            model_keys,
            node_names: cluster.nodes.iter().map(|n| n.name.clone()).collect(),
            node_index: cluster.nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect(),
            pod_index: workload.pods.iter().enumerate().map(|(i, p)| (p.name.clone(), i)).collect(),
            profile_names: workload.profiles.clone(),
            profile_keys: workload.profiles.iter().enumerate().map(|(i, p)| (p.clone(), i)).collect(),
            // The greedy baseline plans for pending pods only, as the tools it stands for do.
            forecast_window: if kind == StrategyKind::Greedy { 0 } else { forecast_window },
            stabilisation: 0,
            arrivals: {
                let mut a: Vec<(Millis, usize)> =
                    workload.pods.iter().enumerate().map(|(i, p)| (p.arrival, i)).collect();
                a.sort_unstable();
                a
            },
        })
    }

    /// Plans under a stabilisation window of `window` (the engine's), as a MigPolicy's
    /// `stabilisationSeconds` tells the planner. Not for the greedy baseline: the tools it stands
    /// for leave the GPUs no pending pod needs as they are.
    pub fn with_stabilisation(mut self, window: Millis) -> Self {
        if self.kind != StrategyKind::Greedy {
            self.stabilisation = window;
        }
        self
    }

    fn pod(&self, pod: &SimPod, node: Option<usize>) -> Pod {
        let requests: BTreeMap<String, u32> =
            pod.mig.iter().map(|&(k, c)| (self.profile_names[k].clone(), c)).collect();
        let mut term = NodeSelectorTerm::default();
        if let Some(models) = &pod.models {
            term.match_expressions.push(Requirement {
                key: MODEL_LABEL.into(),
                operator: Operator::In,
                values: models.iter().map(|&m| self.model_keys[m].clone()).collect(),
            });
        }
        if let Some(nodes) = &pod.nodes {
            term.match_fields.push(Requirement {
                key: "metadata.name".into(),
                operator: Operator::In,
                values: nodes.iter().map(|&n| self.node_names[n].clone()).collect(),
            });
        }
        let constrained = !term.match_expressions.is_empty() || !term.match_fields.is_empty();
        Pod {
            namespace: NAMESPACE.into(),
            name: pod.name.clone(),
            priority: pod.priority,
            requests,
            cpu_millis: pod.cpu_milli,
            memory_bytes: pod.memory_mib.saturating_mul(1 << 20),
            affinity: if constrained { vec![term] } else { Vec::new() },
            node: node.map(|n| self.node_names[n].clone()),
            do_not_disrupt: pod.do_not_disrupt,
            ..Pod::default()
        }
    }

    /// The simulated cluster as the planner's input: plannable nodes, their GPUs and running
    /// pods, and the demand. A GPU with MIG off is the instance `whole` at 0 (held by its
    /// pod, if any), and a pod asking for whole GPUs requests `whole: N`, as the controller
    /// reads `nvidia.com/gpu: N`.
    pub fn snapshot(&self, view: &PlanView<'_>) -> Snapshot {
        let pods = &view.workload.pods;
        let mut nodes: BTreeMap<usize, Node> = BTreeMap::new();
        let mut running = Vec::new();
        let mut listed = HashSet::new();
        for gpu in &view.gpus {
            let node = nodes.entry(gpu.node).or_insert_with(|| {
                let facts = &view.nodes[gpu.node];
                Node {
                    name: self.node_names[gpu.node].clone(),
                    labels: BTreeMap::from([(MODEL_LABEL.to_string(), self.model_keys[gpu.model].clone())]),
                    free_cpu_millis: facts.cpu_free,
                    free_memory_bytes: facts.memory_free.map(|m| m.saturating_mul(1 << 20)),
                    ..Node::default()
                }
            });
            let mut instances = Vec::with_capacity(gpu.slots.len());
            for &(slot, holder) in &gpu.slots {
                instances.push(Instance {
                    profile: self.profile_names[slot.profile].clone(),
                    start: slot.start,
                    pod: holder.map(|p| PodKey::new(NAMESPACE, &pods[p].name)),
                });
                // A pod holding several instances is listed once.
                if let Some(p) = holder.filter(|&p| listed.insert(p)) {
                    running.push(self.pod(&pods[p], Some(gpu.node)));
                }
            }
            node.gpus.push(Gpu {
                index: gpu.index_on_node,
                model: self.model_keys[gpu.model].clone(),
                instances,
            });
        }
        let gangs = self.gangs(view);
        // A pod that may run on no node of the cluster is not demand the planner can meet.
        let demand: Vec<usize> =
            view.demand.iter().copied().filter(|&p| pods[p].may_run_somewhere()).collect();
        let mut pending: Vec<Pod> = demand.iter().map(|&p| self.pod(&pods[p], None)).collect();
        for (pod, &p) in pending.iter_mut().zip(&demand) {
            pod.gang = pods[p]
                .gang
                .map(|g| gang_name(view.workload, g))
                .filter(|name| gangs.iter().any(|gang| &gang.name == name));
        }
        Snapshot {
            nodes: nodes.into_values().collect(),
            pending,
            running,
            policy: Some(Policy {
                eviction_allowed: self.kind == StrategyKind::GeometerEvict,
                time_limit_ms: Some(self.time_limit.as_millis() as u64),
                stabilisation_seconds: u32::try_from(self.stabilisation.div_ceil(1000)).unwrap_or(u32::MAX),
                ..Policy::default()
            }),
            placements_inferred: false,
            expected: self.forecast(view),
            gangs,
        }
    }

    /// The view's gangs for a gang-aware strategy; none for the others.
    fn gangs(&self, view: &PlanView<'_>) -> Vec<Gang> {
        if !self.kind.gang_aware() {
            return Vec::new();
        }
        view.gangs
            .iter()
            .map(|g| Gang {
                name: gang_name(view.workload, g.gang),
                min_members: view.workload.gangs[g.gang].min_members,
                members_counted: g.members_counted,
            })
            .collect()
    }

    /// The pods that arrived within the forecast window, as the pods the next window is
    /// expected to bring (`MigPolicy.spec.forecastWindowSeconds`).
    fn forecast(&self, view: &PlanView<'_>) -> Vec<Pod> {
        if self.forecast_window == 0 {
            return Vec::new();
        }
        // Arrivals in (now - window, now]; all of them while the run is younger than the window.
        let first = view
            .now
            .checked_sub(self.forecast_window)
            .map_or(0, |since| self.arrivals.partition_point(|&(t, _)| t <= since));
        let last = self.arrivals.partition_point(|&(t, _)| t <= view.now);
        let pods = &view.workload.pods;
        let arrived = self.arrivals[first..last].iter().filter(|&&(_, p)| pods[p].may_run_somewhere());
        arrived.map(|&(_, p)| self.pod(&pods[p], None)).collect()
    }

    fn replan(&self, view: &PlanView<'_>, plan: &Plan) -> Result<Replan, String> {
        let gpu_ids: HashMap<(usize, u32), usize> =
            view.gpus.iter().map(|g| ((g.node, g.index_on_node), g.id)).collect();
        let node = |name: &str| {
            self.node_index.get(name).copied().ok_or_else(|| format!("plan names unknown node {name:?}"))
        };
        let pod = |key: &PodKey| {
            self.pod_index.get(key.name()).copied().ok_or_else(|| format!("plan names unknown pod {key}"))
        };
        let mut replan = Replan::default();
        for gpu in plan.changed_gpus() {
            let n = node(&gpu.node)?;
            let id = *gpu_ids
                .get(&(n, gpu.index))
                .ok_or_else(|| format!("plan changes unknown GPU {}/{}", gpu.node, gpu.index))?;
            let mut target = Vec::with_capacity(gpu.to.len());
            for placed in &gpu.to {
                let profile = *self.profile_keys.get(&placed.profile).ok_or_else(|| {
                    format!("plan creates profile {} the simulator does not know", placed.profile)
                })?;
                target.push(Slot { profile, start: placed.start });
            }
            replan.targets.push((id, target));
        }
        for eviction in &plan.evictions {
            let p = pod(&eviction.pod)?;
            replan.evictions.push(p);
            replan.placements.push((p, node(&eviction.rescheduled_to)?));
        }
        for outcome in &plan.pods {
            let Some(n) = &outcome.node else { continue };
            match outcome.placement {
                SliceSource::NewSlices => replan.placements.push((pod(&outcome.pod)?, node(n)?)),
                // A gang-aware plan keeps those slices for the gang's members; a gang-unaware
                // one (the comparison) does not know the pods belong together.
                SliceSource::ExistingSlices if self.kind.gang_aware() => {
                    replan.reservations.push((pod(&outcome.pod)?, node(n)?))
                }
                SliceSource::ExistingSlices => {}
                SliceSource::Unmet => {}
            }
        }
        Ok(replan)
    }
}

impl Strategy for PlannerStrategy {
    fn kind(&self) -> StrategyKind {
        self.kind
    }

    /// Dynamic strategies start from MIG enabled and no instances: the planner creates them,
    /// or turns MIG off (the geometry `[whole@0]`) for whole-GPU demand.
    fn initial_geometry(&self, _model: usize) -> Vec<Slot> {
        Vec::new()
    }

    fn plan(&mut self, view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError> {
        let snapshot = self.snapshot(view);
        let options =
            PlanOptions { time_limit: Some(self.time_limit), ignore_gangs: !self.kind.gang_aware() };
        let fail = |reason: String| StrategyError::Plan {
            strategy: self.kind.to_string(),
            time_s: view.now as f64 / 1000.0,
            reason,
        };
        let started = Instant::now();
        let plan = match self.kind {
            StrategyKind::Greedy => geometer_solver::greedy::plan(&snapshot, &self.catalog, &options),
            _ => geometer_solver::plan(&snapshot, &self.catalog, &options),
        }
        .map_err(|e| fail(e.to_string()))?;
        let planner_time = started.elapsed();
        let mut replan = self.replan(view, &plan).map_err(fail)?;
        replan.planner_time = planner_time;
        Ok(Some(replan))
    }
}

/// A gang's name as the planner reads it (`namespace/name`).
fn gang_name(workload: &Workload, gang: usize) -> String {
    format!("{NAMESPACE}/{}", workload.gangs[gang].name)
}
