//! Validation of a catalog file: turns the serde form (`file`) into models, checking every
//! value, so that errors name the model, profile, field and value.

use std::collections::{HashMap, HashSet};

use thiserror::Error;

use crate::words::quote;

use super::file::{CatalogFile, RawEngines, RawModel, RawProfile};
use super::lookup::{format_device_id, parse_device_id, product_label};
use super::{
    device_plugin_name, nvlib_gpu_instance_profile, Engines, ExclusiveGroup, GpuModel, Profile, ProfileKind,
    UnplaceableModel,
};

/// Most profiles a model's file may list: profile sets are 64-bit masks in the geometry
/// search, and each model gets one more, the whole GPU.
pub(super) const MAX_PROFILES: usize = 63;
/// Widest placement grid: occupied units are a 32-bit mask.
pub(super) const MAX_PLACEMENT_UNITS: i64 = 32;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CatalogError {
    #[error("catalog is not valid YAML for the catalog format: {message}")]
    Parse { message: String },

    #[error("catalog defines no models; add entries under `models:`")]
    Empty,

    #[error("{}field `{field}` = {value}: {problem}", location(.model, .profile))]
    Invalid { model: String, profile: Option<String>, field: String, value: String, problem: String },
}

fn location(model: &str, profile: &Option<String>) -> String {
    match profile {
        Some(p) => format!("model {}, profile {}: ", quote(model), quote(p)),
        None => format!("model {}: ", quote(model)),
    }
}

/// Builds errors that carry where in the catalog they happened.
struct At<'a> {
    model: &'a str,
    profile: Option<&'a str>,
}

impl At<'_> {
    fn err(&self, field: &str, value: impl std::fmt::Display, problem: impl Into<String>) -> CatalogError {
        CatalogError::Invalid {
            model: self.model.to_string(),
            profile: self.profile.map(str::to_string),
            field: field.to_string(),
            value: quote(&value.to_string()),
            problem: problem.into(),
        }
    }

    fn int<T: TryFrom<i64>>(&self, field: &str, value: i64, min: i64, max: i64) -> Result<T, CatalogError> {
        if value < min || value > max {
            return Err(self.err(field, value, format!("must be between {min} and {max}")));
        }
        T::try_from(value).map_err(|_| self.err(field, value, "out of range"))
    }
}

pub(super) fn parse(text: &str) -> Result<(Vec<GpuModel>, Vec<UnplaceableModel>), CatalogError> {
    let raw: CatalogFile =
        crate::yaml::from_str(text).map_err(|e| CatalogError::Parse { message: e.to_string() })?;
    if raw.models.is_empty() && raw.unplaceable.is_empty() {
        return Err(CatalogError::Empty);
    }
    let mut models = Vec::with_capacity(raw.models.len());
    let mut keys = HashSet::new();
    let mut device_owner: HashMap<u32, String> = HashMap::new();
    for raw_model in raw.models {
        let model = convert_model(raw_model)?;
        let at = At { model: &model.key, profile: None };
        if !keys.insert(model.key.to_ascii_lowercase()) {
            return Err(at.err("key", &model.key, "defined twice in this file; keys are case-insensitive"));
        }
        for &id in &model.device_ids {
            if let Some(owner) = device_owner.insert(id, model.key.clone()) {
                return Err(at.err(
                    "device_ids",
                    format_device_id(id),
                    format!("already claimed by model {owner}"),
                ));
            }
        }
        models.push(model);
    }
    let mut unplaceable = Vec::new();
    for u in raw.unplaceable {
        let at = At { model: &u.key, profile: None };
        check_key(&at, &u.key)?;
        if u.reason.trim().is_empty() {
            return Err(at.err("reason", "\"\"", "say why no geometry can be planned for this GPU"));
        }
        if !keys.insert(u.key.to_ascii_lowercase()) {
            return Err(at.err("key", &u.key, "defined twice in this file; keys are case-insensitive"));
        }
        unplaceable.push(UnplaceableModel { key: u.key, nvml_names: u.nvml_names, reason: u.reason });
    }
    Ok((models, unplaceable))
}

fn check_key(at: &At, key: &str) -> Result<(), CatalogError> {
    let ok = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(at.err("key", format!("{key:?}"), "use letters, digits, '-', '_' or '.' (e.g. A100-40GB)"))
    }
}

fn convert_model(raw: RawModel) -> Result<GpuModel, CatalogError> {
    let key = raw.key.trim().to_string();
    let at = At { model: &key, profile: None };
    check_key(&at, &key)?;
    let placement_units: u8 = at.int("placement_units", raw.placement_units, 1, MAX_PLACEMENT_UNITS)?;
    let compute_slices: u8 = at.int("compute_slices", raw.compute_slices, 1, 255)?;
    let memory_mib = match raw.memory_mib {
        Some(m) => Some(at.int::<u64>("memory_mib", m, 1, i64::MAX)?),
        None => None,
    };
    let mut device_ids = Vec::new();
    for text in &raw.device_ids {
        let id = parse_device_id(text)
            .ok_or_else(|| at.err("device_ids", format!("{text:?}"), "expected a PCI id like 0x20B010DE"))?;
        if device_ids.contains(&id) {
            return Err(at.err("device_ids", text, "listed twice"));
        }
        device_ids.push(id);
    }
    let engine_totals = match &raw.engine_totals {
        Some(e) => Some(engines(&at, "engine_totals", e)?),
        None => None,
    };
    if raw.profiles.is_empty() {
        return Err(at.err(
            "profiles",
            "[]",
            "a model needs profiles; list GPUs without known placements under `unplaceable:`",
        ));
    }
    if raw.profiles.len() > MAX_PROFILES {
        return Err(at.err(
            "profiles",
            raw.profiles.len(),
            format!("at most {MAX_PROFILES} profiles per model"),
        ));
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut profiles = Vec::with_capacity(raw.profiles.len());
    for (id, rp) in raw.profiles.into_iter().enumerate() {
        let profile =
            convert_profile(&key, placement_units, compute_slices, memory_mib, engine_totals.as_ref(), rp)?;
        for name in std::iter::once(&profile.name).chain(&profile.aliases) {
            let at = At { model: &key, profile: Some(&profile.name) };
            if names.insert(name.to_ascii_lowercase(), id).is_some() {
                return Err(at.err(
                    "name",
                    name,
                    "this name or alias is used by another profile of the model",
                ));
            }
            names.insert(name.clone(), id);
        }
        profiles.push(profile);
    }
    let canonical = |field: &str, name: &str| -> Result<String, CatalogError> {
        let id = names.get(name).or_else(|| names.get(&name.to_ascii_lowercase()));
        id.map(|&i| profiles[i].name.clone())
            .ok_or_else(|| at.err(field, name, "not a profile of this model"))
    };
    let mut exclusive_groups = Vec::new();
    for g in &raw.exclusive_groups {
        if g.profiles.is_empty() {
            return Err(at.err("exclusive_groups.profiles", "[]", "a group needs at least one profile"));
        }
        let max_total = match g.max_total {
            Some(m) => Some(at.int::<u8>("exclusive_groups.max_total", m, 1, 255)?),
            None => None,
        };
        if max_total.is_none() && g.only_coexists_with.is_empty() {
            return Err(at.err(
                "exclusive_groups",
                format!("{:?}", g.profiles),
                "a group needs max_total or only_coexists_with, otherwise it constrains nothing",
            ));
        }
        exclusive_groups.push(ExclusiveGroup {
            profiles: g
                .profiles
                .iter()
                .map(|n| canonical("exclusive_groups.profiles", n))
                .collect::<Result<_, _>>()?,
            max_total,
            only_coexists_with: g
                .only_coexists_with
                .iter()
                .map(|n| canonical("exclusive_groups.only_coexists_with", n))
                .collect::<Result<_, _>>()?,
            status: g.status,
        });
    }
    let mut product_labels: Vec<String> = raw.nvml_names.iter().map(|n| product_label(n)).collect();
    for label in raw.product_labels {
        if !product_labels.contains(&label) {
            product_labels.push(label);
        }
    }
    check_layouts(&at, placement_units, &profiles)?;
    if let Some(&id) = names.get(super::WHOLE) {
        let at = At { model: &key, profile: Some(&profiles[id].name) };
        return Err(at.err("aliases", super::WHOLE, "reserved for the whole GPU (MIG mode off)"));
    }
    names.insert(super::WHOLE.to_string(), profiles.len());
    profiles.push(whole_profile(placement_units, compute_slices, memory_mib, engine_totals));
    Ok(GpuModel {
        key: key.clone(),
        description: raw.description,
        nvml_names: raw.nvml_names,
        product_labels,
        device_ids,
        architecture: raw.architecture,
        memory_mib,
        memory_status: raw.memory_status,
        placement_units,
        compute_slices,
        profiles,
        engine_totals,
        exclusive_groups,
        notes: raw.notes,
        names,
    })
}

/// The GPU with MIG mode off, as the one instance that covers every placement unit. It has
/// no NVML profile (`nvml_profile_index` is `u32::MAX`) and is never written to a catalog file.
fn whole_profile(units: u8, compute: u8, memory_mib: Option<u64>, totals: Option<Engines>) -> Profile {
    Profile {
        name: super::WHOLE.to_string(),
        aliases: Vec::new(),
        device_plugin_name: super::WHOLE_DEVICE_PLUGIN_NAME.to_string(),
        kind: ProfileKind::Whole,
        compute_slices: compute,
        memory_slices: units,
        memory_mib: memory_mib.unwrap_or(0),
        starts: vec![0],
        size: units,
        max_instances: 1,
        engines: totals.unwrap_or_default(),
        engines_known: false,
        nvml_profile_index: u32::MAX,
        nvidia_smi_profile_id: None,
        placements_status: super::Verification::Verified,
        memory_status: super::Verification::Verified,
    }
}

/// Most ways a model's profiles may be laid out on one GPU. Geometer searches layouts
/// exhaustively (`geometry::search`), which is exact and fast for real MIG GPUs (an H100 has
/// a few thousand layouts, the 12-unit model of the built-in catalog tens of thousands) but
/// exponential in the grid: a catalog model with 32 one-unit profiles would take longer than
/// any time limit. Such a model is refused when the catalog is read.
pub(super) const MAX_LAYOUTS: u64 = 5_000_000;

/// Refuses a model whose non-overlapping placements (an upper bound on its geometries: the
/// caps and exclusive groups only remove some) exceed [`MAX_LAYOUTS`]. Counted by dynamic
/// programming over the units: the layouts from unit `u` on are those leaving `u` empty plus,
/// for each placement starting at `u`, those from its end on.
fn check_layouts(at: &At, units: u8, profiles: &[Profile]) -> Result<(), CatalogError> {
    let units = usize::from(units);
    let mut from = vec![0u64; units + 2];
    from[units] = 1;
    for u in (0..units).rev() {
        let mut n = from[u + 1];
        for p in profiles {
            if p.starts.contains(&(u as u8)) {
                n = n.saturating_add(from[(u + usize::from(p.size)).min(units)]);
            }
        }
        from[u] = n;
    }
    if from[0] > MAX_LAYOUTS {
        return Err(at.err(
            "profiles",
            format!("{} profiles on {units} placement units", profiles.len()),
            format!(
                "they can be laid out in more than {MAX_LAYOUTS} ways, too many to search (a real MIG GPU has thousands); use fewer units, profiles or starts"
            ),
        ));
    }
    Ok(())
}

fn engines(at: &At, field: &str, e: &RawEngines) -> Result<Engines, CatalogError> {
    Ok(Engines {
        dec: at.int(&format!("{field}.dec"), e.dec, 0, 255)?,
        enc: at.int(&format!("{field}.enc"), e.enc, 0, 255)?,
        jpeg: at.int(&format!("{field}.jpeg"), e.jpeg, 0, 255)?,
        ofa: at.int(&format!("{field}.ofa"), e.ofa, 0, 255)?,
    })
}

fn convert_profile(
    model: &str,
    units: u8,
    compute_total: u8,
    gpu_memory_mib: Option<u64>,
    engine_totals: Option<&Engines>,
    raw: RawProfile,
) -> Result<Profile, CatalogError> {
    let name = raw.name.trim().to_string();
    let at = At { model, profile: Some(&name) };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || ".+-_".contains(c)) {
        return Err(at.err(
            "name",
            format!("{name:?}"),
            "use letters, digits, '.', '+', '-' (e.g. 1g.10gb+me)",
        ));
    }
    let kind = ProfileKind::from_name(&name).ok_or_else(|| {
        at.err("name", &name, "expected <N>g.<M>gb with an optional +me, +me.all, -me or +gfx suffix")
    })?;
    let size: u8 = at.int("size", raw.size, 1, units as i64)?;
    let memory_slices = match raw.memory_slices {
        Some(m) if m != size as i64 => {
            return Err(at.err(
                "memory_slices",
                m,
                format!("must equal size ({size}): both count placement units"),
            ))
        }
        _ => size,
    };
    if raw.starts.is_empty() {
        return Err(at.err("starts", "[]", "a profile needs at least one legal start"));
    }
    let mut starts: Vec<u8> = Vec::with_capacity(raw.starts.len());
    for &s in &raw.starts {
        let start: u8 = at.int("starts", s, 0, units as i64 - 1)?;
        if start as u16 + size as u16 > units as u16 {
            return Err(at.err(
                "starts",
                s,
                format!("start + size {size} runs past the {units} placement units"),
            ));
        }
        if starts.last().is_some_and(|&last| last >= start) {
            return Err(at.err(
                "starts",
                format!("{:?}", raw.starts),
                "list each start once, in increasing order",
            ));
        }
        starts.push(start);
    }
    let engines_known = raw.engines.is_some();
    let engines = match &raw.engines {
        Some(e) => engines(&at, "engines", e)?,
        None => Engines::default(),
    };
    if let Some(totals) = engine_totals {
        for ((engine, need), (_, have)) in engines.fields().into_iter().zip(totals.fields()) {
            if need > have {
                return Err(at.err(
                    &format!("engines.{engine}"),
                    need,
                    format!("more than the GPU's engine_totals.{engine} ({have}); the profile could never be created"),
                ));
            }
        }
    }
    let mut aliases = Vec::new();
    for alias in raw.aliases {
        let alias = alias.trim().to_string();
        if alias.is_empty() || alias.contains([',', '@', ' ']) {
            return Err(at.err(
                "aliases",
                format!("{alias:?}"),
                "an alias must be a non-empty name without ',', '@' or spaces",
            ));
        }
        aliases.push(alias);
    }
    let memory_mib: u64 = at.int("memory_mib", raw.memory_mib, 1, i64::MAX)?;
    let nvml_profile_index: u32 = at.int("nvml_profile_index", raw.nvml_profile_index, 0, u32::MAX as i64)?;
    let device_plugin_name = match raw.device_plugin_name {
        Some(recorded) => {
            let recorded = recorded.trim().to_string();
            let ok = !recorded.is_empty()
                && recorded.chars().all(|c| c.is_ascii_alphanumeric() || ".+-_,".contains(c));
            if !ok {
                return Err(at.err(
                    "device_plugin_name",
                    format!("{recorded:?}"),
                    "use the name the device plugin advertises without nvidia.com/mig- (e.g. 1g.10gb+me)",
                ));
            }
            recorded
        }
        None => match (gpu_memory_mib, nvlib_gpu_instance_profile(nvml_profile_index)) {
            (Some(gpu), Some((gi_slices, kind))) => {
                device_plugin_name(gpu, memory_mib, gi_slices, gi_slices, kind)
            }
            // Nothing to compute from: the catalog's own name is the best guess.
            _ => name.clone(),
        },
    };
    Ok(Profile {
        aliases,
        device_plugin_name,
        kind,
        compute_slices: at.int("compute_slices", raw.compute_slices, 1, compute_total as i64)?,
        memory_slices,
        memory_mib,
        starts,
        size,
        max_instances: at.int("max_instances", raw.max_instances, 1, 255)?,
        engines,
        engines_known,
        nvml_profile_index,
        nvidia_smi_profile_id: match raw.nvidia_smi_profile_id {
            Some(id) => Some(at.int("nvidia_smi_profile_id", id, 0, u32::MAX as i64)?),
            None => None,
        },
        placements_status: raw.placements_status,
        memory_status: raw.memory_status,
        name,
    })
}
