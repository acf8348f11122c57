//! The rules a geometry must satisfy, in two forms: `check` explains the first violation of a
//! whole geometry; `Rules`/`State` answer "can this instance be added?" in a few bit operations
//! for the search.

use crate::catalog::{GpuModel, ProfileId};

use super::{GeometryError, Placed};

/// A catalog model compiled for fast incremental checks. Profile and group sets are `u64`
/// bitsets (the catalog rejects models with more than 64 profiles).
pub(crate) struct Rules {
    pub compute_total: u32,
    pub engine_totals: Option<[u32; 4]>,
    pub profiles: Vec<ProfileRule>,
    pub groups: Vec<GroupRule>,
}

pub(crate) struct ProfileRule {
    pub size: u8,
    pub starts: Vec<u8>,
    pub compute: u32,
    pub engines: [u32; 4],
    pub max: u8,
}

pub(crate) struct GroupRule {
    pub members: u64,
    pub max_total: Option<u8>,
    /// `Some(allowed)` for an only-coexists-with rule.
    pub coexists: Option<u64>,
}

impl Rules {
    pub(super) fn new(model: &GpuModel) -> Rules {
        let engines = |e: &crate::catalog::Engines| [e.dec, e.enc, e.jpeg, e.ofa].map(u32::from);
        let bits = |ids: &[ProfileId]| ids.iter().fold(0u64, |b, &id| b | (1u64 << id));
        Rules {
            compute_total: model.compute_slices as u32,
            engine_totals: model.engine_totals.as_ref().map(engines),
            profiles: model
                .profiles
                .iter()
                .map(|p| ProfileRule {
                    size: p.size,
                    starts: p.starts.clone(),
                    compute: p.compute_slices as u32,
                    engines: engines(&p.engines),
                    max: p.max_instances,
                })
                .collect(),
            groups: model
                .exclusive_groups
                .iter()
                .map(|g| {
                    let (members, allowed) = model.group_ids(g);
                    GroupRule {
                        members: bits(&members[..]),
                        max_total: g.max_total,
                        coexists: (!g.only_coexists_with.is_empty()).then(|| bits(&allowed[..])),
                    }
                })
                .collect(),
        }
    }

    pub(super) fn mask(&self, profile: ProfileId, start: u8) -> u32 {
        let size = self.profiles[profile].size as u32;
        let ones = if size >= 32 { u32::MAX } else { (1u32 << size) - 1 };
        ones.checked_shl(start as u32).unwrap_or(0)
    }
}

/// Running totals of a partial geometry; `add`/`remove` keep them in step with the search.
#[derive(Clone)]
pub(crate) struct State {
    pub used: u32,
    pub compute: u32,
    pub engines: [u32; 4],
    pub counts: Vec<u8>,
    /// Per group: instances of member profiles.
    pub in_group: Vec<u32>,
    /// Per group: instances of profiles outside the group's coexistence list.
    pub outside_allowed: Vec<u32>,
}

impl State {
    pub(super) fn new(rules: &Rules) -> State {
        State {
            used: 0,
            compute: 0,
            engines: [0; 4],
            counts: vec![0; rules.profiles.len()],
            in_group: vec![0; rules.groups.len()],
            outside_allowed: vec![0; rules.groups.len()],
        }
    }

    /// Whether `profile@start` (a legal start, checked by the caller) can join.
    pub(super) fn can_add(&self, rules: &Rules, profile: ProfileId, mask: u32) -> bool {
        let p = &rules.profiles[profile];
        if self.used & mask != 0 || self.counts[profile] >= p.max {
            return false;
        }
        if self.compute + p.compute > rules.compute_total {
            return false;
        }
        if let Some(totals) = &rules.engine_totals {
            if (0..4).any(|e| self.engines[e] + p.engines[e] > totals[e]) {
                return false;
            }
        }
        let bit = 1u64 << profile;
        for (g, group) in rules.groups.iter().enumerate() {
            let member = group.members & bit != 0;
            if member {
                if let Some(max) = group.max_total {
                    if self.in_group[g] + 1 > max as u32 {
                        return false;
                    }
                }
            }
            if let Some(allowed) = group.coexists {
                // Pairwise rule: a member may only sit next to allowed profiles, both ways.
                if member && self.outside_allowed[g] > 0 {
                    return false;
                }
                if self.in_group[g] > 0 && allowed & bit == 0 {
                    return false;
                }
            }
        }
        true
    }

    pub(super) fn add(&mut self, rules: &Rules, profile: ProfileId, mask: u32) {
        self.apply(rules, profile, mask, true);
    }

    pub(super) fn remove(&mut self, rules: &Rules, profile: ProfileId, mask: u32) {
        self.apply(rules, profile, mask, false);
    }

    fn apply(&mut self, rules: &Rules, profile: ProfileId, mask: u32, add: bool) {
        let p = &rules.profiles[profile];
        let bit = 1u64 << profile;
        let step = |v: &mut u32, by: u32| if add { *v += by } else { *v -= by };
        if add {
            self.used |= mask;
            self.counts[profile] += 1;
        } else {
            self.used &= !mask;
            self.counts[profile] -= 1;
        }
        step(&mut self.compute, p.compute);
        for e in 0..4 {
            step(&mut self.engines[e], p.engines[e]);
        }
        for (g, group) in rules.groups.iter().enumerate() {
            if group.members & bit != 0 {
                step(&mut self.in_group[g], 1);
            }
            if let Some(allowed) = group.coexists {
                if allowed & bit == 0 {
                    step(&mut self.outside_allowed[g], 1);
                }
            }
        }
    }
}

/// Validates a whole geometry and explains the first rule it breaks.
pub(crate) fn check(model: &GpuModel, instances: &[Placed]) -> Result<(), GeometryError> {
    let model_name = || model.key.clone();
    for p in instances {
        let Some(profile) = model.profiles.get(p.profile) else {
            return Err(GeometryError::UnknownProfileId {
                model: model_name(),
                id: p.profile,
                count: model.profiles.len(),
            });
        };
        if !profile.is_legal_start(p.start) {
            return Err(GeometryError::IllegalStart {
                model: model_name(),
                profile: profile.name.clone(),
                start: p.start,
                legal: profile.starts.clone(),
            });
        }
    }
    for (i, a) in instances.iter().enumerate() {
        for b in &instances[i + 1..] {
            let overlap =
                model.profiles[a.profile].mask_at(a.start) & model.profiles[b.profile].mask_at(b.start);
            if overlap != 0 {
                return Err(GeometryError::Overlap {
                    first: model.profiles[a.profile].name.clone(),
                    first_start: a.start,
                    second: model.profiles[b.profile].name.clone(),
                    second_start: b.start,
                    units: (0..32u8).filter(|u| overlap & (1 << u) != 0).collect(),
                });
            }
        }
    }
    check_counting(model, instances)
}

/// The rules that do not depend on where instances sit: caps, groups, engines, compute.
/// Profile ids must exist (`check` verifies that first).
pub(crate) fn check_counting(model: &GpuModel, instances: &[Placed]) -> Result<(), GeometryError> {
    let model_name = || model.key.clone();
    let mut counts = vec![0usize; model.profiles.len()];
    for p in instances {
        counts[p.profile] += 1;
    }
    for (id, &count) in counts.iter().enumerate() {
        let profile = &model.profiles[id];
        if count > profile.max_instances as usize {
            return Err(GeometryError::TooManyInstances {
                model: model_name(),
                profile: profile.name.clone(),
                count,
                max: profile.max_instances,
            });
        }
    }
    for group in &model.exclusive_groups {
        let (members, allowed) = model.group_ids(group);
        if let Some(max) = group.max_total {
            let count = instances.iter().filter(|p| members.contains(&p.profile)).count();
            if count > max as usize {
                return Err(GeometryError::GroupLimit {
                    model: model_name(),
                    profiles: group.profiles.join(", "),
                    count,
                    max,
                });
            }
        }
        if group.only_coexists_with.is_empty() {
            continue;
        }
        for (i, a) in instances.iter().enumerate() {
            if !members.contains(&a.profile) {
                continue;
            }
            for (j, b) in instances.iter().enumerate() {
                if i != j && !allowed.contains(&b.profile) {
                    return Err(GeometryError::Incompatible {
                        profile: model.profiles[a.profile].name.clone(),
                        start: a.start,
                        other: model.profiles[b.profile].name.clone(),
                        other_start: b.start,
                        allowed: group.only_coexists_with.join(", "),
                    });
                }
            }
        }
    }
    if let Some(totals) = &model.engine_totals {
        for (e, (engine, total)) in totals.fields().into_iter().enumerate() {
            let used: u32 =
                instances.iter().map(|p| model.profiles[p.profile].engines.fields()[e].1 as u32).sum();
            if used > total as u32 {
                return Err(GeometryError::EngineTotals {
                    model: model_name(),
                    engine: engine.to_string(),
                    used,
                    total,
                });
            }
        }
    }
    let compute: u32 = instances.iter().map(|p| model.profiles[p.profile].compute_slices as u32).sum();
    if compute > model.compute_slices as u32 {
        return Err(GeometryError::ComputeSlices {
            model: model_name(),
            used: compute,
            total: model.compute_slices,
        });
    }
    Ok(())
}
