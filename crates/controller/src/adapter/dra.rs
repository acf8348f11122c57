//! NVIDIA's DRA driver in the snapshot. A static-MIG node with a Geometer agent is planned like
//! a device-plugin node: its instances come from the agent's inventory, held by the pods (or
//! claims) whose allocated claims name them; its demand is the pending pods' unallocated claims,
//! read as MIG profiles ([`crate::dra::demand`]) and counted as `nvidia.com/mig-<profile>`
//! requests. Since a claim can only be met by the DRA driver and a device-plugin resource only
//! by the device plugin (unless a DeviceClass's `extendedResourceName` maps it), every snapshot
//! node is labelled with its stack ([`STACK_LABEL`]) and each pending pod that can use only one
//! stack selects it: the solver's node selection keeps them apart.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use geometer_solver::catalog::Catalog;
use geometer_solver::snapshot::{Node as PlannerNode, Pod};
use geometer_solver::PodKey;

use super::{pods, Objects, PodView};
use crate::dra::demand::{resource_of, Asked, Demand};
use crate::dra::holders::{self, Holders};
use crate::dra::objects::DraObjects;
use crate::dra::offers;
use crate::dra::stack::DraMode;
use geometer_api::DeviceStack;

/// Snapshot node label naming how its GPUs are advertised: [`DRA_STACK`] or [`PLUGIN_STACK`].
/// Set on snapshot nodes only (never on a Node) where the input has static-MIG DRA nodes.
pub const STACK_LABEL: &str = "geometer.io/device-stack";
pub const DRA_STACK: &str = "dra";
pub const PLUGIN_STACK: &str = "device-plugin";

/// Where an instance with a UUID is: node, GPU index, start, profile (from MigNode status).
/// A cluster has hundreds of thousands: the node's name and the profile are shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceAt {
    pub node: Arc<str>,
    pub gpu: u32,
    pub start: u8,
    pub profile: Arc<str>,
}

/// The round's DRA reading.
pub(super) struct DraPlanning<'o> {
    objects: &'o Objects,
    holders: Holders,
    /// Per node: (GPU, start) of each instance an allocated claim holds, and its holder.
    held_on: HashMap<String, Vec<(u32, u8, PodKey)>>,
    demand: Demand<'o>,
    /// Pending pods whose claims were read as profiles.
    pub(super) asked: HashMap<PodKey, Asked>,
    /// Pending pods whose claims cannot be planned, with why.
    pub(super) unplanned: Vec<(PodKey, String)>,
    /// Static-MIG DRA nodes in the snapshot.
    planned_nodes: Vec<String>,
}

impl<'o> DraPlanning<'o> {
    pub(super) fn new(objects: &'o Objects, catalog: &Catalog) -> DraPlanning<'o> {
        let dra = &objects.dra;
        let mut gpus = DraGpus::default();
        for (node, inventory) in objects.inventories.iter().filter(|(n, _)| dra.nodes.contains_key(*n)) {
            for gpu in inventory.iter() {
                gpus.add(node, &gpu.model, gpu.instances.iter().map(|i| i.profile.clone()), catalog);
            }
        }
        let holders = holders::holders(dra);
        let mut held_on: HashMap<String, Vec<(u32, u8, PodKey)>> = HashMap::new();
        for (uuid, holder) in &holders.by_uuid {
            if let Some(at) = objects.instance_uuids.get(uuid.as_str()) {
                held_on.entry(at.node.to_string()).or_default().push((at.gpu, at.start, holder.clone()));
            }
        }
        DraPlanning {
            objects,
            holders,
            held_on,
            demand: gpus.demand(dra, catalog),
            asked: HashMap::new(),
            unplanned: Vec::new(),
            planned_nodes: Vec::new(),
        }
    }

    /// Whether there is anything of DRA to read.
    pub(super) fn active(&self) -> bool {
        !self.objects.dra.is_empty()
    }

    /// Adds what `pod` asks of or holds through the DRA driver to its requests: the devices
    /// its allocated claims hold (a bound pod), or the profiles its unallocated claims need
    /// (a pending one).
    pub(super) fn add_requests(&mut self, pod: &PodView, requests: &mut Cow<'_, BTreeMap<String, u64>>) {
        let key = pods::key(pod);
        if pods::bound_node(pod).is_some() {
            if !pods::gpu_requests(requests).is_empty() {
                return; // a DRA extended resource: its claim's device is that request
            }
            for uuid in self.holders.of_pod.get(&key).into_iter().flatten() {
                if let Some(at) = self.objects.instance_uuids.get(uuid.as_str()) {
                    *requests.to_mut().entry(resource_of(&at.profile)).or_default() += 1000;
                }
            }
            return;
        }
        if pods::demand_check(pod).is_err() {
            return;
        }
        match self.demand.of_pod(pod, requests) {
            Ok(Some(asked)) => {
                for (profile, count) in &asked.profiles {
                    *requests.to_mut().entry(resource_of(profile)).or_default() += count * 1000;
                }
                if !asked.profiles.is_empty() {
                    self.asked.insert(key, asked);
                }
            }
            Ok(None) => {}
            Err(why) => {
                // Not demand: an extended resource a class serves under its own name goes too.
                if requests.keys().any(|r| self.demand.serves(r)) {
                    requests.to_mut().retain(|r, _| !self.demand.serves(r));
                }
                self.unplanned.push((key, why))
            }
        }
    }

    /// How NVIDIA's DRA driver advertises `node`, from its slices or, where it publishes none
    /// (MIG mode on and no instance yet), from what the node's agent found (its plugin pod).
    pub(super) fn mode_of(&self, node: &str) -> Option<DraMode> {
        let reported = match self.objects.device_stacks.get(node) {
            Some(DeviceStack::DraStaticMig) => Some(DraMode::StaticMig),
            Some(DeviceStack::DraDynamicMig | DeviceStack::Both) => Some(DraMode::DynamicMig),
            _ => None,
        };
        self.objects.dra.nodes.get(node).copied().max(reported)
    }

    /// Why a node the DRA driver advertises is not planned, if it is not.
    pub(super) fn refusal(&self, node: &str, mode: DraMode) -> Option<String> {
        let dra = &self.objects.dra;
        let reported = self.objects.device_stacks.get(node);
        if reported == Some(&DeviceStack::Both) {
            return Some(
                "its agent finds both NVIDIA's device plugin and its DRA driver on it, so each GPU is given out \
                 twice; run one of them on a node"
                    .into(),
            );
        }
        if mode == DraMode::DynamicMig {
            return Some(
                "NVIDIA's DRA driver makes its MIG devices as claims need them (DynamicMIG); Geometer never \
                 changes such a node's instances"
                    .into(),
            );
        }
        if !self.objects.inventories.contains_key(node) {
            return Some(
                "NVIDIA's DRA driver advertises its GPUs (static MIG) and no Geometer agent has reported them \
                 (no MigNode inventory): the driver's devices are matched to the agent's by UUID"
                    .into(),
            );
        }
        if reported != Some(&DeviceStack::DraStaticMig) {
            return Some(
                "NVIDIA's DRA driver advertises its GPUs (static MIG) and its Geometer agent does not report the DRA \
                 stack (MigNode status.deviceStack); an agent that predates DRA support cannot republish the \
                 driver's devices, so upgrade it"
                    .into(),
            );
        }
        if dra.unsettled.contains(node) {
            return Some(
                "its DRA driver is publishing a new pool generation; planned once it is complete".into(),
            );
        }
        self.holders
            .orphans
            .get(node)
            .map(|why| format!("{why}; no instance is made there while a claim names a device that is gone"))
    }

    /// Marks each instance of `node` an allocated claim holds (the agent may not have seen its
    /// pod yet: a claim holds its device from allocation on).
    pub(super) fn hold(&self, node: &mut PlannerNode) {
        for (gpu, start, holder) in self.held_on.get(&node.name).into_iter().flatten() {
            let gpu = node.gpus.iter_mut().find(|g| g.index == *gpu);
            let instance = gpu.and_then(|g| g.instances.iter_mut().find(|i| i.start == *start));
            if let Some(instance) = instance.filter(|i| i.pod.is_none()) {
                instance.pod = Some(holder.clone());
            }
        }
    }

    /// Labels every node with its stack, and has each pending pod that only one stack can
    /// serve select it (a claim pod with the GPU spread its claims ask); nothing where no
    /// static-MIG DRA node is planned.
    pub(super) fn separate_stacks(&mut self, nodes: &mut [PlannerNode], pending: &mut [Pod]) {
        self.planned_nodes =
            nodes.iter().filter(|n| self.mode_of(&n.name).is_some()).map(|n| n.name.clone()).collect();
        if self.planned_nodes.is_empty() {
            return;
        }
        for node in nodes.iter_mut() {
            let stack = if self.mode_of(&node.name).is_some() { DRA_STACK } else { PLUGIN_STACK };
            node.labels.insert(STACK_LABEL.into(), stack.into());
        }
        for pod in pending {
            let stack = if let Some(asked) = self.asked.get(&pod.key()) {
                pod.gpu_spread = asked.spread;
                DRA_STACK
            } else if pod.requests.keys().any(|p| !self.demand.serves(&resource_of(p))) {
                PLUGIN_STACK
            } else {
                continue;
            };
            pod.node_selector.insert(STACK_LABEL.into(), stack.into());
        }
    }

    /// What blocks pending claims on DynamicMIG nodes: notes, and each blocked pod.
    pub(super) fn dynamic_mig(&self) -> (Vec<String>, Vec<super::dynamic_mig::Blocked>) {
        super::dynamic_mig::report(&self.objects.dra, &self.holders, &self.asked)
    }

    /// The plan's notes: each request planned (the first few), and each left unplanned.
    pub(super) fn notes(&self, warnings: &mut Vec<String>) {
        const SHOWN: usize = 20;
        if let Some(first) = self.planned_nodes.first() {
            warnings.push(format!(
                "DRA: {} node(s) whose GPUs NVIDIA's DRA driver advertises (static MIG) are planned for claims (e.g. {first})",
                self.planned_nodes.len()
            ));
        }
        let mut asked: Vec<(&PodKey, &Asked)> = self.asked.iter().collect();
        asked.sort_by(|a, b| a.0.cmp(b.0));
        let lines: Vec<String> = asked
            .iter()
            .flat_map(|(pod, a)| a.named.iter().map(move |n| format!("DRA: pod {pod}: {n}")))
            .collect();
        warnings.extend(lines.iter().take(SHOWN).cloned());
        if lines.len() > SHOWN {
            warnings.push(format!("DRA: {} more claim requests planned", lines.len() - SHOWN));
        }
        let mut unplanned = self.unplanned.clone();
        unplanned.sort();
        for (pod, why) in unplanned.iter().take(SHOWN) {
            warnings.push(format!("DRA: pod {pod} not planned: {why}"));
        }
        if unplanned.len() > SHOWN {
            warnings.push(format!("DRA: {} more pods not planned", unplanned.len() - SHOWN));
        }
    }
}

/// The GPU models of the static-MIG DRA nodes and the kinds of device they publish now: what
/// their claims' demand is read against.
#[derive(Default)]
struct DraGpus {
    /// Node -> catalog keys of its GPUs.
    models: BTreeMap<String, BTreeSet<String>>,
    /// (catalog model, profile) of every device published now.
    published: BTreeSet<(String, String)>,
}

impl DraGpus {
    /// A GPU of `node` of `model` (a GPU model the catalog does not know is left out), with
    /// the profiles of its instances (`whole` with MIG mode off).
    fn add(&mut self, node: &str, model: &str, profiles: impl Iterator<Item = String>, catalog: &Catalog) {
        let Some(model) = catalog.find(model) else { return };
        self.models.entry(node.to_string()).or_default().insert(model.key.clone());
        self.published.extend(profiles.map(|p| (model.key.clone(), p)));
    }

    fn demand<'d>(self, dra: &'d DraObjects, catalog: &Catalog) -> Demand<'d> {
        Demand::new(dra, offers::offers(dra, &self.models, catalog), self.published)
    }
}

/// The MIG profiles pending pods' DRA claims need, read before any round (to tell the batcher
/// there is demand), from the claims and the GPU models of the nodes' MigNodes.
pub struct ClaimDemand<'d> {
    demand: Option<Demand<'d>>,
}

impl<'d> ClaimDemand<'d> {
    pub fn new(
        dra: &'d DraObjects,
        mignodes: &BTreeMap<String, std::sync::Arc<geometer_api::MigNode>>,
        catalog: &Catalog,
    ) -> ClaimDemand<'d> {
        if dra.is_empty() {
            return ClaimDemand { demand: None };
        }
        let mut gpus = DraGpus::default();
        for (node, mignode) in mignodes.iter().filter(|(n, _)| dra.nodes.contains_key(*n)) {
            for gpu in mignode.status.iter().flat_map(|s| &s.gpus) {
                let profiles = gpu.placed_instances().into_iter().map(|(placed, _)| placed.profile);
                gpus.add(node, &gpu.model, profiles, catalog);
            }
        }
        ClaimDemand { demand: Some(gpus.demand(dra, catalog)) }
    }

    /// Profile -> devices `pod`'s unallocated claims need, empty when they cannot be planned
    /// (a round says why); `None` when it asks nothing of DRA.
    pub fn profiles(
        &mut self,
        pod: &PodView,
        requests: &BTreeMap<String, u64>,
    ) -> Option<BTreeMap<String, u32>> {
        let demand = self.demand.as_mut()?;
        match demand.of_pod(pod, requests) {
            Ok(asked) => {
                let asked = asked?;
                Some(
                    asked.profiles.into_iter().map(|(p, n)| (p, n.min(u64::from(u32::MAX)) as u32)).collect(),
                )
            }
            Err(_) => Some(BTreeMap::new()),
        }
    }
}
