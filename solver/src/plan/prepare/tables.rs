//! The problem's lookup tables: GPU models in key order, the profile keys (every profile that
//! demand, headroom or an evictable pod names, by canonical name), the maps between keys and
//! each model's profile ids, the profiles each model may create, and headroom per key.

use std::collections::BTreeSet;

use crate::catalog::{Catalog, GpuModel, ProfileId};
use crate::snapshot::{GpuMode, Node, Policy, Snapshot};

/// The models of the snapshot's GPUs, in key order (find() never fails after validation), and
/// the index of each GPU model name the snapshot uses. A cluster names a few models on many
/// GPUs: each name is looked up in the catalog once.
pub(super) fn models_of<'a, 'n>(
    nodes: &[&'n Node],
    catalog: &'a Catalog,
) -> (Vec<&'a GpuModel>, ModelNames<'n>) {
    let mut names: Vec<(&str, &GpuModel)> = Vec::new();
    for gpu in nodes.iter().flat_map(|n| &n.gpus) {
        if !names.iter().any(|(name, _)| *name == gpu.model) {
            names.push((&gpu.model, catalog.find(&gpu.model).expect("validated")));
        }
    }
    let mut models: Vec<&GpuModel> = Vec::new();
    for (_, model) in &names {
        if !models.iter().any(|m| m.key == model.key) {
            models.push(model);
        }
    }
    models.sort_by(|a, b| a.key.cmp(&b.key));
    let index = |model: &GpuModel| models.iter().position(|m| m.key == model.key).expect("listed above");
    let names = names.iter().map(|&(name, model)| (name, index(model))).collect();
    (models, ModelNames(names))
}

/// Each GPU model name of the snapshot, with the index of its model in [`models_of`]'s list.
pub(super) struct ModelNames<'n>(Vec<(&'n str, usize)>);

impl ModelNames<'_> {
    /// The index of the model a GPU names (every name of the snapshot is there).
    pub(super) fn index(&self, name: &str) -> usize {
        self.0.iter().find(|(n, _)| *n == name).map(|&(_, i)| i).expect("models_of saw every GPU")
    }
}

/// A profile's canonical name: the first model that knows it names it.
pub(super) fn canonical_name(models: &[&GpuModel], name: &str) -> Option<String> {
    models.iter().find_map(|m| m.profile(name).map(|id| m.profile_info(id).name.clone()))
}

/// Sorted canonical names of the profiles of demand, headroom, expected pods and (when
/// evictions are allowed) instances held by pods.
pub(super) fn profile_keys(
    snapshot: &Snapshot,
    policy: &Policy,
    nodes: &[&Node],
    canonical: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut names = BTreeSet::new();
    for pod in snapshot.pending.iter().chain(&snapshot.expected) {
        names.extend(pod.requests.keys().filter_map(|n| canonical(n)));
    }
    names.extend(policy.headroom.keys().filter_map(|n| canonical(n)));
    if policy.eviction_allowed {
        for gpu in nodes.iter().flat_map(|n| &n.gpus) {
            for inst in gpu.instances.iter().filter(|i| i.pod.is_some()) {
                names.extend(canonical(&inst.profile));
            }
        }
    }
    names.into_iter().collect()
}

/// Per model, profile key -> profile id; and per model, profile id -> profile key.
pub(super) type KeyMaps = (Vec<Vec<Option<ProfileId>>>, Vec<Vec<Option<usize>>>);

pub(super) fn key_maps(models: &[&GpuModel], profiles: &[String]) -> KeyMaps {
    let key_to_pid: Vec<Vec<Option<ProfileId>>> =
        models.iter().map(|m| profiles.iter().map(|p| m.profile(p)).collect()).collect();
    let pid_to_key = models
        .iter()
        .zip(&key_to_pid)
        .map(|(m, k2p)| {
            let mut back = vec![None; m.profiles.len()];
            for (key, pid) in k2p.iter().enumerate() {
                if let Some(pid) = pid {
                    back[*pid] = Some(key);
                }
            }
            back
        })
        .collect();
    (key_to_pid, pid_to_key)
}

/// Per model, the profiles the planner may create: the policy's list, or the standard ones,
/// where the policy allows MIG; and the whole GPU where it allows that.
pub(super) fn allowed_profiles(models: &[&GpuModel], policy: &Policy) -> Vec<Vec<ProfileId>> {
    models
        .iter()
        .map(|m| {
            let mut ids: Vec<ProfileId> = if !policy.allows_mode(GpuMode::Mig) {
                Vec::new()
            } else if policy.allowed_profiles.is_empty() {
                m.standard_profiles()
            } else {
                policy
                    .allowed_profiles
                    .iter()
                    .filter_map(|n| m.profile(n))
                    .filter(|&p| !m.is_whole(p))
                    .collect()
            };
            if policy.allows_mode(GpuMode::Whole) {
                ids.push(m.whole());
            }
            ids.sort_unstable();
            ids.dedup();
            ids
        })
        .collect()
}

/// Free instances the policy keeps ready, per profile key.
pub(super) fn headroom(policy: &Policy, keys: usize, key_index: &dyn Fn(&str) -> Option<usize>) -> Vec<u32> {
    let mut headroom = vec![0u32; keys];
    for (name, &count) in &policy.headroom {
        if let Some(k) = key_index(name) {
            headroom[k] += count;
        }
    }
    headroom
}

/// Per node and profile key, whether a GPU of the node offers the profile, and whether one
/// may create it under the policy: checked for every template of pods against every node, so
/// worked out once per model and node rather than once per GPU and template.
pub(super) struct Offers {
    keys: usize,
    /// Per node, per key: [`Offers::ANY`] and [`Offers::ALLOWED`] bits.
    bits: Vec<u8>,
}

impl Offers {
    const ANY: u8 = 1;
    const ALLOWED: u8 = 2;

    /// `node_models`: per node, the model index of each of its GPUs.
    pub(super) fn new<M: Iterator<Item = usize>>(
        node_models: impl Iterator<Item = M>,
        key_to_pid: &[Vec<Option<ProfileId>>],
        allowed: &[Vec<ProfileId>],
        keys: usize,
    ) -> Offers {
        let per_model: Vec<Vec<u8>> = key_to_pid
            .iter()
            .zip(allowed)
            .map(|(pids, allowed)| {
                pids.iter()
                    .map(|pid| match pid {
                        Some(pid) if allowed.contains(pid) => Self::ANY | Self::ALLOWED,
                        Some(_) => Self::ANY,
                        None => 0,
                    })
                    .collect()
            })
            .collect();
        let mut bits = Vec::new();
        for models in node_models {
            let at = bits.len();
            bits.resize(at + keys, 0);
            for m in models {
                for (bit, model_bit) in bits[at..].iter_mut().zip(&per_model[m]) {
                    *bit |= model_bit;
                }
            }
        }
        Offers { keys, bits }
    }

    /// Whether a GPU of node `n` offers profile key `k` (and, `allowed_only`, may create it).
    pub(super) fn offers(&self, n: usize, k: usize, allowed_only: bool) -> bool {
        let want = if allowed_only { Self::ALLOWED } else { Self::ANY };
        self.bits[n * self.keys + k] & want != 0
    }
}
