//! The catalog file format: the serde form of models as users write them (`--catalog FILE`)
//! and as `geometer catalog show -o yaml` prints them. Validation lives in `schema`.
//!
//! ```yaml
//! models:
//! - key: A100-40GB
//!   nvml_names: [NVIDIA A100-SXM4-40GB]
//!   device_ids: ['0x20B010DE']
//!   placement_units: 8
//!   compute_slices: 7
//!   profiles:
//!   - {name: 1g.5gb, device_plugin_name: 1g.5gb, compute_slices: 1, memory_mib: 4864,
//!      starts: [0,1,2,3,4,5,6], size: 1, max_instances: 7, nvml_profile_index: 0}
//! unplaceable:
//! - {key: RTX-PRO-5000, reason: placements unknown}
//! ```
//! Numbers are read wide (`i64`) so that validation can name the model, profile, field and
//! value of an out-of-range number instead of only a line number.

use serde::{Deserialize, Serialize};

use super::lookup::{format_device_id, product_label};
use super::{Engines, GpuModel, UnplaceableModel, Verification};

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogFile {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) models: Vec<RawModel>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) unplaceable: Vec<RawUnplaceable>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub(super) key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) nvml_names: Vec<String>,
    /// Extra `gpu.product` labels; the ones derived from `nvml_names` are always added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) product_labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) device_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) architecture: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) memory_mib: Option<i64>,
    #[serde(default = "unverified")]
    pub(super) memory_status: Verification,
    pub(super) placement_units: i64,
    pub(super) compute_slices: i64,
    pub(super) profiles: Vec<RawProfile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) engine_totals: Option<RawEngines>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) exclusive_groups: Vec<RawGroup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) notes: Vec<String>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    pub(super) name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) aliases: Vec<String>,
    /// What NVIDIA's device plugin advertises (`nvidia.com/mig-<this>`); computed when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) device_plugin_name: Option<String>,
    pub(super) compute_slices: i64,
    /// Defaults to `size`; NVML calls placement units memory slices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) memory_slices: Option<i64>,
    pub(super) memory_mib: i64,
    #[serde(default = "unverified")]
    pub(super) memory_status: Verification,
    pub(super) starts: Vec<i64>,
    pub(super) size: i64,
    pub(super) max_instances: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) engines: Option<RawEngines>,
    pub(super) nvml_profile_index: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) nvidia_smi_profile_id: Option<i64>,
    #[serde(default = "unverified")]
    pub(super) placements_status: Verification,
}

#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEngines {
    #[serde(default)]
    pub(super) dec: i64,
    #[serde(default)]
    pub(super) enc: i64,
    #[serde(default)]
    pub(super) jpeg: i64,
    #[serde(default)]
    pub(super) ofa: i64,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    pub(super) profiles: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) max_total: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) only_coexists_with: Vec<String>,
    #[serde(default = "unverified")]
    pub(super) status: Verification,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUnplaceable {
    pub(super) key: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) nvml_names: Vec<String>,
    pub(super) reason: String,
}

pub(super) fn unverified() -> Verification {
    Verification::Unverified
}

impl CatalogFile {
    /// The catalog file form of these models: what `--catalog FILE` reads back.
    pub fn from_models(models: &[&GpuModel], unplaceable: &[&UnplaceableModel]) -> CatalogFile {
        CatalogFile {
            models: models.iter().map(|m| raw_model(m)).collect(),
            unplaceable: unplaceable
                .iter()
                .map(|u| RawUnplaceable {
                    key: u.key.clone(),
                    nvml_names: u.nvml_names.clone(),
                    reason: u.reason.clone(),
                })
                .collect(),
        }
    }

    /// As YAML text in the catalog file format.
    pub fn to_yaml(&self) -> String {
        // Plain data of strings, numbers and lists: serializing it cannot fail.
        serde_saphyr::to_string(self).unwrap_or_default()
    }
}

fn raw_engines(e: &Engines) -> RawEngines {
    RawEngines { dec: e.dec.into(), enc: e.enc.into(), jpeg: e.jpeg.into(), ofa: e.ofa.into() }
}

fn raw_model(m: &GpuModel) -> RawModel {
    let derived: Vec<String> = m.nvml_names.iter().map(|n| product_label(n)).collect();
    RawModel {
        key: m.key.clone(),
        description: m.description.clone(),
        nvml_names: m.nvml_names.clone(),
        product_labels: m.product_labels.iter().filter(|l| !derived.contains(l)).cloned().collect(),
        device_ids: m.device_ids.iter().map(|&id| format_device_id(id)).collect(),
        architecture: m.architecture.clone(),
        memory_mib: m.memory_mib.map(|v| v as i64),
        memory_status: m.memory_status,
        placement_units: m.placement_units.into(),
        compute_slices: m.compute_slices.into(),
        profiles: m
            .mig_profiles()
            .map(|id| &m.profiles[id])
            .map(|p| RawProfile {
                name: p.name.clone(),
                aliases: p.aliases.clone(),
                device_plugin_name: Some(p.device_plugin_name.clone()),
                compute_slices: p.compute_slices.into(),
                memory_slices: None,
                memory_mib: p.memory_mib as i64,
                memory_status: p.memory_status,
                starts: p.starts.iter().map(|&s| s.into()).collect(),
                size: p.size.into(),
                max_instances: p.max_instances.into(),
                engines: p.engines_known.then(|| raw_engines(&p.engines)),
                nvml_profile_index: p.nvml_profile_index.into(),
                nvidia_smi_profile_id: p.nvidia_smi_profile_id.map(i64::from),
                placements_status: p.placements_status,
            })
            .collect(),
        engine_totals: m.engine_totals.as_ref().map(raw_engines),
        exclusive_groups: m
            .exclusive_groups
            .iter()
            .map(|g| RawGroup {
                profiles: g.profiles.clone(),
                max_total: g.max_total.map(i64::from),
                only_coexists_with: g.only_coexists_with.clone(),
                status: g.status,
            })
            .collect(),
        notes: m.notes.clone(),
    }
}
