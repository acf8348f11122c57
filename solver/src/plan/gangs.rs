//! Gangs, all or nothing: a gang's pending members get slices only when enough of them do, in
//! the same plan, to reach its minimum; otherwise none of them causes a GPU change or an
//! eviction, and the plan says why.
//!
//! The ILP holds this as a constraint (a binary per gang: its classes meet at least `need` pods
//! or none). Every plan, from either planner, is then checked against the pods it actually
//! placed: a gang left short (the greedy baseline, a fallback, pods placed node by node falling
//! short of the model) has its pending members taken out and the cluster planned again, until
//! no gang is short. Each round takes out at least one gang, so it ends.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::snapshot::{PodKey, Snapshot};

use super::assign::Slot;
use super::prepare::{PodStatus, Problem};
use super::{Plan, PlanError, PodOutcome, SliceSource, UnmetReason};

/// A gang's fate in a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangOutcome {
    /// `namespace/name` of the group.
    pub name: String,
    pub min_members: u32,
    /// Members that count without slices from this plan (running, or asking for none).
    pub counted: u32,
    /// Pending members asking for slices.
    pub pending: u32,
    /// Pending members the plan places.
    pub placed: u32,
    /// Why it is left out; absent when it reaches its minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl GangOutcome {
    pub fn complete(&self) -> bool {
        self.counted + self.placed >= self.min_members
    }
}

/// Per gang of `problem`: whether the pods `placed` reach its need.
pub(crate) fn complete(problem: &Problem, placed: &[Option<Slot>]) -> Vec<bool> {
    let mut count = vec![0u32; problem.gangs.len()];
    for (i, p) in problem.pending.iter().enumerate() {
        if let (Some(g), PodStatus::Plannable, Some(_)) = (p.gang, &p.status, &placed[i]) {
            count[g] += 1;
        }
    }
    count.iter().zip(&problem.gangs).map(|(c, g)| *c >= g.need).collect()
}

/// Plans `snapshot` with `planner` so that no gang is left short, and says what became of each.
pub(crate) fn all_or_nothing(
    snapshot: &Snapshot,
    catalog: &Catalog,
    ignore_gangs: bool,
    planner: impl Fn(&Snapshot) -> Result<Plan, PlanError>,
) -> Result<Plan, PlanError> {
    if snapshot.gangs.is_empty() {
        return planner(snapshot);
    }
    if ignore_gangs {
        return planner(&without_gangs(snapshot));
    }
    let mut current = snapshot.clone();
    let mut short: BTreeMap<String, u32> = BTreeMap::new();
    let mut plan = planner(&current)?;
    loop {
        let placed = placed_per_gang(&plan, &current);
        let left_short: Vec<(String, u32)> = needs(&current)
            .into_iter()
            .filter(|(g, need)| placed.get(g).copied().unwrap_or(0) < *need && placed.contains_key(g))
            .map(|(g, _)| (g.clone(), placed[&g]))
            .collect();
        if left_short.is_empty() {
            break;
        }
        let out: BTreeSet<&str> = left_short.iter().map(|(g, _)| g.as_str()).collect();
        let keep = |p: &crate::snapshot::Pod| p.gang.as_deref().is_none_or(|g| !out.contains(g));
        let next = Snapshot {
            pending: current.pending.iter().filter(|p| keep(p)).cloned().collect(),
            ..current.clone()
        };
        for (g, n) in &left_short {
            let best = short.entry(g.clone()).or_default();
            *best = (*best).max(*n);
        }
        current = next;
        plan = planner(&current)?;
    }
    let outcomes = outcomes(snapshot, catalog, &plan, &short, &planner)?;
    put_back(&mut plan, snapshot, &current, &outcomes);
    plan.gangs = outcomes;
    Ok(plan)
}

/// `snapshot` planned as if no pod were in a gang.
pub(crate) fn without_gangs(snapshot: &Snapshot) -> Snapshot {
    let mut plain = snapshot.clone();
    plain.gangs.clear();
    for pod in &mut plain.pending {
        pod.gang = None;
    }
    plain
}

/// Per gang that still needs members: how many.
fn needs(snapshot: &Snapshot) -> Vec<(String, u32)> {
    snapshot
        .gangs
        .iter()
        .map(|g| (g.name.clone(), g.min_members.saturating_sub(g.members_counted)))
        .filter(|(_, need)| *need > 0)
        .collect()
}

/// Per gang with a member placed: its pending members the plan places.
fn placed_per_gang(plan: &Plan, snapshot: &Snapshot) -> BTreeMap<String, u32> {
    let gang_of: BTreeMap<PodKey, &str> =
        snapshot.pending.iter().filter_map(|p| Some((p.key(), p.gang.as_deref()?))).collect();
    let mut placed = BTreeMap::new();
    for outcome in plan.pods.iter().filter(|o| o.node.is_some()) {
        if let Some(g) = gang_of.get(&outcome.pod) {
            *placed.entry(g.to_string()).or_insert(0) += 1;
        }
    }
    placed
}

/// What became of every gang with pending members. For a gang left out, how many of its members
/// could be placed at all is found by planning the cluster as if no pod were in a gang (only
/// when some gang is left out).
fn outcomes(
    snapshot: &Snapshot,
    catalog: &Catalog,
    plan: &Plan,
    short: &BTreeMap<String, u32>,
    planner: &impl Fn(&Snapshot) -> Result<Plan, PlanError>,
) -> Result<Vec<GangOutcome>, PlanError> {
    let placed = placed_per_gang(plan, snapshot);
    let mut pending: BTreeMap<&str, u32> = BTreeMap::new();
    for p in &snapshot.pending {
        if let Some(g) = &p.gang {
            *pending.entry(g).or_default() += 1;
        }
    }
    let mut out: Vec<GangOutcome> = snapshot
        .gangs
        .iter()
        .filter(|g| pending.contains_key(g.name.as_str()))
        .map(|g| GangOutcome {
            name: g.name.clone(),
            min_members: g.min_members,
            counted: g.members_counted,
            pending: pending[g.name.as_str()],
            placed: placed.get(&g.name).copied().unwrap_or(0),
            reason: None,
        })
        .collect();
    if out.iter().all(GangOutcome::complete) {
        return Ok(out);
    }
    let alone = placed_per_gang(&planner(&without_gangs(snapshot))?, snapshot);
    let never = super::gang_capacity::never_fits(snapshot, catalog);
    for gang in out.iter_mut().filter(|g| !g.complete()) {
        let placeable =
            alone.get(&gang.name).copied().unwrap_or(0).max(short.get(&gang.name).copied().unwrap_or(0));
        let min = gang.min_members;
        gang.reason = Some(match never.get(&gang.name) {
            Some(why) => format!("no geometry of the eligible GPUs could ever hold it: {why}"),
            None if gang.counted + placeable < min => {
                format!("{} of {min} placeable on eligible nodes; needs {min}", gang.counted + placeable)
            }
            None => format!(
                "{min} placeable on their own, but not together with the demand planned ahead of it; needs {min}"
            ),
        });
    }
    Ok(out)
}

/// Puts the pending members the rounds took out back into the plan's pod list, unmet with
/// their gang's reason; members of a gang left out that are still in the plan get it too.
fn put_back(plan: &mut Plan, snapshot: &Snapshot, planned: &Snapshot, outcomes: &[GangOutcome]) {
    let left_out: BTreeMap<&str, &str> =
        outcomes.iter().filter_map(|g| Some((g.name.as_str(), g.reason.as_deref()?))).collect();
    let reason = |gang: &str| UnmetReason::Gang { detail: format!("gang {gang}: {}", left_out[gang]) };
    let still: BTreeSet<PodKey> = planned.pending.iter().map(|p| p.key()).collect();
    for pod in &snapshot.pending {
        let Some(gang) = pod.gang.as_deref().filter(|g| left_out.contains_key(g)) else { continue };
        if still.contains(&pod.key()) {
            if let Some(o) = plan.pods.iter_mut().find(|o| o.pod == pod.key() && o.node.is_none()) {
                o.reason = Some(reason(gang));
            }
            continue;
        }
        plan.pods.push(PodOutcome {
            pod: pod.key(),
            priority: pod.priority,
            requests: pod.requests.clone(),
            node: None,
            placement: SliceSource::Unmet,
            reason: Some(reason(gang)),
        });
    }
    plan.pods.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.pod.cmp(&b.pod)));
}
