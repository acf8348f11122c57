//! A trace made ready for simulation on one cluster: requests mapped to profiles, profile names
//! interned, constraints turned into node and model indices. Shared by every strategy of a run,
//! so that all of them see exactly the same pods.

use std::collections::HashMap;

use geometer_solver::catalog::WHOLE;
use geometer_solver::words::quoted;

use crate::cluster::{Cluster, ModelInfo};
use crate::mapping::{Mapping, MappingSummary, WholeGpus};
use crate::trace::{GpuRequest, Millis, Trace};

/// Index into [`Workload::profiles`]. [`WHOLE_GPU`] is `whole` (the solver's
/// `geometer_solver::catalog::WHOLE`): a GPU with MIG mode off, one unit that a pod takes all of.
pub type ProfileKey = usize;
pub const WHOLE_GPU: ProfileKey = 0;

#[derive(Debug, Clone, PartialEq)]
pub struct SimPod {
    pub name: String,
    pub arrival: Millis,
    pub duration: Option<Millis>,
    /// Instances asked for, by profile (sorted by key): MIG profiles, and [`WHOLE_GPU`] for
    /// whole GPUs under [`WholeGpus::Whole`].
    pub mig: Vec<(ProfileKey, u32)>,
    /// GPUs asked for when GPUs are not partitioned: one per MIG instance, or `num_gpu`.
    pub whole_gpus: u32,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub priority: i32,
    /// Allowed cluster models (indices); `None`: any.
    pub models: Option<Vec<usize>>,
    /// Allowed nodes (indices); `None`: any.
    pub nodes: Option<Vec<usize>>,
    pub do_not_disrupt: bool,
    /// Memory slices the pod's instances take on the reference model (a whole GPU: all of
    /// them): what it needs.
    pub need_memory_slices: u32,
    /// Its gang (index into [`Workload::gangs`]), if it is a member of one.
    pub gang: Option<GangIdx>,
}

impl SimPod {
    /// Whether some node of the cluster could hold it at all: a trace's model or node list
    /// may name only what the cluster lacks, and such a pod is never planned for.
    pub fn may_run_somewhere(&self) -> bool {
        !self.models.as_ref().is_some_and(Vec::is_empty) && !self.nodes.as_ref().is_some_and(Vec::is_empty)
    }

    /// Whether its model constraint allows cluster model `m`.
    pub fn may_use(&self, m: usize) -> bool {
        self.models.as_ref().is_none_or(|list| list.contains(&m))
    }

    /// The memory and compute slices its instances take on `model` (a whole GPU: all of its
    /// GPU's); `None` when it asks for none or the model lacks one of its profiles.
    /// `profiles`: [`Workload::profiles`].
    pub fn slices_on(&self, model: &ModelInfo, profiles: &[String]) -> Option<(u64, u64)> {
        if self.mig.is_empty() {
            return None;
        }
        self.mig.iter().try_fold((0, 0), |(memory, compute), &(key, count)| {
            let (m, c) = if key == WHOLE_GPU {
                (model.memory_slices, model.compute_slices)
            } else {
                let p = model.profile(&profiles[key])?;
                (p.memory_slices, p.compute_slices)
            };
            let count = u64::from(count);
            Some((memory + u64::from(m) * count, compute + u64::from(c) * count))
        })
    }
}

/// Index into [`Workload::gangs`].
pub type GangIdx = usize;

/// A job's worker pods that run only together: none runs until `min_members` of them hold
/// their slices at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimGang {
    pub name: String,
    pub min_members: u32,
    /// Member pods, in workload order.
    pub members: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub pods: Vec<SimPod>,
    /// Profile names by key; key 0 is `whole` (a GPU with MIG mode off).
    pub profiles: Vec<String>,
    pub mapping: Mapping,
    /// What the trace's whole-GPU requests became.
    pub whole_gpus: WholeGpus,
    pub summary: MappingSummary,
    pub notes: Vec<String>,
    /// Gangs, in order of their first member.
    pub gangs: Vec<SimGang>,
}

impl Workload {
    pub fn new(trace: &Trace, cluster: &Cluster, mapping: Mapping, whole_gpus: WholeGpus) -> Self {
        let reference = cluster.reference_model();
        let full = reference.full_profile().map(|p| p.name.clone()).unwrap_or_default();
        let mut profiles = vec![WHOLE.to_string()];
        let mut keys: HashMap<String, ProfileKey> = HashMap::from([(WHOLE.to_string(), WHOLE_GPU)]);
        let mut intern = |name: &str, profiles: &mut Vec<String>| -> ProfileKey {
            *keys.entry(name.to_string()).or_insert_with(|| {
                profiles.push(name.to_string());
                profiles.len() - 1
            })
        };
        for model in &cluster.models {
            for p in &model.profiles {
                intern(&p.name, &mut profiles);
            }
        }
        let node_index: HashMap<&str, usize> =
            cluster.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let mut summary = MappingSummary::default();
        // Pods naming what the cluster lacks, by class, with the first such pod and value.
        let mut unknown_profile = Unknown::default();
        let mut unknown_model = Unknown::default();
        let mut unknown_node = Unknown::default();
        let mut pods = Vec::with_capacity(trace.pods.len());
        let mut gangs: Vec<SimGang> = Vec::new();
        let mut gang_index: HashMap<&str, GangIdx> = HashMap::new();
        for pod in &trace.pods {
            let mapped = mapping.map(&pod.request, reference, whole_gpus);
            summary.record(&pod.request, &mapped, &full);
            let mut need = 0u32;
            let mut known = true;
            let mut mig: Vec<(ProfileKey, u32)> = Vec::new();
            for (name, count) in &mapped {
                let whole = name.eq_ignore_ascii_case(WHOLE);
                let before = known;
                let slices = if whole {
                    Some(reference.memory_slices)
                } else {
                    cluster.models.iter().find_map(|m| m.profile(name)).map(|p| p.memory_slices)
                };
                known &= slices.is_some();
                if before && !known {
                    unknown_profile.saw(&pod.name, name);
                }
                need = need.saturating_add(u32::from(slices.unwrap_or(0)).saturating_mul(*count));
                let key = if whole { WHOLE_GPU } else { intern(name, &mut profiles) };
                mig.push((key, *count));
            }
            mig.sort();
            let whole_gpus = match &pod.request {
                GpuRequest::Share { num_gpu, .. } => *num_gpu,
                GpuRequest::Mig(items) => items.iter().map(|(_, c)| c).sum(),
            };
            let models = (!pod.gpu_models.is_empty()).then(|| {
                let found: Vec<usize> =
                    pod.gpu_models.iter().filter_map(|m| cluster.model_index(m)).collect();
                if let Some(missing) = pod.gpu_models.iter().find(|m| cluster.model_index(m).is_none()) {
                    unknown_model.saw(&pod.name, missing);
                }
                found
            });
            let nodes = (!pod.nodes.is_empty()).then(|| {
                let mut found: Vec<usize> =
                    pod.nodes.iter().filter_map(|n| node_index.get(n.as_str()).copied()).collect();
                found.sort_unstable();
                if let Some(missing) = pod.nodes.iter().find(|n| !node_index.contains_key(n.as_str())) {
                    unknown_node.saw(&pod.name, missing);
                }
                found
            });
            let gang = pod.gang.as_ref().map(|g| {
                let index = *gang_index.entry(&g.name).or_insert_with(|| {
                    gangs.push(SimGang { name: g.name.clone(), min_members: 0, members: Vec::new() });
                    gangs.len() - 1
                });
                let gang = &mut gangs[index];
                gang.members.push(pods.len());
                gang.min_members = gang.min_members.max(g.min_members.unwrap_or(0));
                index
            });
            pods.push(SimPod {
                name: pod.name.clone(),
                arrival: pod.arrival,
                duration: pod.duration,
                mig,
                whole_gpus,
                cpu_milli: pod.cpu_milli,
                memory_mib: pod.memory_mib,
                priority: pod.priority,
                models,
                nodes,
                do_not_disrupt: pod.do_not_disrupt,
                need_memory_slices: need,
                gang,
            });
        }
        // A gang without a minimum needs every member; a trace's readers keep it reachable.
        for gang in &mut gangs {
            let members = gang.members.len() as u32;
            gang.min_members = if gang.min_members == 0 { members } else { gang.min_members.min(members) };
        }
        let mut notes = trace.notes.clone();
        if summary.shares.values().sum::<usize>() + summary.whole_gpu_pods > 0 {
            notes.push(summary.describe(&mapping, whole_gpus, &reference.name));
        }
        let catalog = geometer_solver::catalog::Catalog::builtin();
        for (unknown, what, value) in [
            (unknown_profile, "ask for a profile no simulated GPU model has", "profile"),
            (unknown_model, "name GPU models outside the cluster", "model"),
            (unknown_node, "name nodes outside the cluster", "node"),
        ] {
            if let Some((pod, name)) = &unknown.first {
                let why = if value == "model" && catalog.find(name).is_none() {
                    " (not in the catalog: see `geometer catalog list`)"
                } else {
                    ""
                };
                notes.push(format!(
                    "{} pods {what}, e.g. pod {}: {value} {}{why}; such a pod can never run in this cluster",
                    unknown.pods,
                    quoted(pod),
                    quoted(name)
                ));
            }
        }
        if !gangs.is_empty() {
            let members: usize = gangs.iter().map(|g| g.members.len()).sum();
            notes.push(format!(
                "{} gangs ({members} member pods): a gang's members run only once enough of them hold their slices at once",
                gangs.len()
            ));
        }
        Workload { pods, profiles, mapping, whole_gpus, summary, notes, gangs }
    }
}

/// Pods of a trace that name something the cluster lacks (a profile, model or node), and the
/// first of them with what it named: what a note tells the user.
#[derive(Default)]
struct Unknown {
    pods: usize,
    first: Option<(String, String)>,
}

impl Unknown {
    fn saw(&mut self, pod: &str, value: &str) {
        self.pods += 1;
        self.first.get_or_insert_with(|| (pod.to_string(), value.to_string()));
    }
}
