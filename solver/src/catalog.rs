//! GPU models, their MIG profiles, legal placements, instance caps and engine counters.
//!
//! The built-in data lives in `solver/catalog/gpus.yaml` and is compiled in. Users can add or
//! override models with their own file in the same format ([`Catalog::from_yaml`] then
//! [`Catalog::with_overrides`]). Every value that was not seen on hardware is marked
//! `inferred` or `unverified` in the data, and the agent trusts NVML over the catalog.

mod device_plugin_name;
mod file;
mod lookup;
mod schema;

pub use device_plugin_name::{
    device_plugin_memory_gb, device_plugin_name, device_plugin_name_from_bytes, nvlib_gpu_instance_profile,
};
pub use lookup::{format_device_id, normalize_name, parse_device_id, product_label, NVIDIA_VENDOR};

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

pub use file::CatalogFile;
pub use schema::CatalogError;

/// Index into [`GpuModel::profiles`].
pub type ProfileId = usize;

/// How far a catalog value is backed by evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verification {
    /// Seen on hardware (`nvidia-smi mig -lgip/-lgipp`) or in NVIDIA's own documentation.
    Verified,
    /// Derived from related hardware or from engine counts; very likely but not observed.
    Inferred,
    /// Assumed (nominal values, layouts copied from a sibling GPU). Check on the device.
    Unverified,
}

impl Verification {
    pub fn as_str(self) -> &'static str {
        match self {
            Verification::Verified => "verified",
            Verification::Inferred => "inferred",
            Verification::Unverified => "unverified",
        }
    }
}

/// Media engines a GPU instance owns. Copy engines are left out: they never limit a geometry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Engines {
    #[serde(default)]
    pub dec: u8,
    #[serde(default)]
    pub enc: u8,
    #[serde(default)]
    pub jpeg: u8,
    #[serde(default)]
    pub ofa: u8,
}

impl Engines {
    /// (name, value) pairs, in a fixed order, for messages and checks.
    pub fn fields(&self) -> [(&'static str, u8); 4] {
        [("dec", self.dec), ("enc", self.enc), ("jpeg", self.jpeg), ("ofa", self.ofa)]
    }
}

/// The profile variant, from the name suffix NVML's tools use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileKind {
    /// No suffix, e.g. `1g.10gb`.
    Standard,
    /// `+me`: takes the media extensions (JPEG/OFA) that plain profiles lack.
    MediaExtensions,
    /// `+me.all`: takes every media engine; only `-me` profiles can coexist with it.
    AllMediaExtensions,
    /// `-me`: no media engines at all.
    NoMediaExtensions,
    /// `+gfx`: graphics-capable instance.
    Graphics,
    /// Not a MIG profile: the GPU with MIG mode off, advertised whole as `nvidia.com/gpu`.
    /// Every model has one ([`GpuModel::whole`]), so that "MIG off" is a geometry like any
    /// other in the planner: one instance covering every placement unit.
    Whole,
}

impl ProfileKind {
    /// Suffixes in the order they must be tried (`+me.all` before `+me`).
    pub(crate) const SUFFIXES: [(&'static str, ProfileKind); 4] = [
        ("+me.all", ProfileKind::AllMediaExtensions),
        ("+me", ProfileKind::MediaExtensions),
        ("-me", ProfileKind::NoMediaExtensions),
        ("+gfx", ProfileKind::Graphics),
    ];

    /// Kind from a profile name, or `None` when the name has a suffix nobody knows.
    pub fn from_name(name: &str) -> Option<ProfileKind> {
        for (suffix, kind) in Self::SUFFIXES {
            if name.ends_with(suffix) {
                return Some(kind);
            }
        }
        // A standard name ends in "gb"; anything else after it is an unknown suffix.
        name.ends_with("gb").then_some(ProfileKind::Standard)
    }
}

/// One GPU instance profile of a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    /// Canonical name, e.g. `3g.40gb`.
    pub name: String,
    /// Other names drivers have used for the same profile, e.g. `3g.39gb`.
    pub aliases: Vec<String>,
    /// The name NVIDIA's k8s-device-plugin advertises for an instance of this profile with one
    /// compute instance spanning it (the resource is `nvidia.com/mig-<this>`). It is computed
    /// by go-nvlib from the memory values, not taken from the driver, so it can differ from
    /// `name` and from every alias (see [`device_plugin_name`]). Recorded in the catalog; a
    /// catalog file that leaves it out gets it computed from the model's `memory_mib` and this
    /// profile's `memory_mib`, or, when the model has no `memory_mib`, the profile's `name`.
    pub device_plugin_name: String,
    pub kind: ProfileKind,
    pub compute_slices: u8,
    /// Placement units the instance occupies (NVML's "memory slices"); equals `size`.
    pub memory_slices: u8,
    pub memory_mib: u64,
    /// Every legal first placement unit.
    pub starts: Vec<u8>,
    /// Placement units covered from a start: `[start, start + size)`.
    pub size: u8,
    pub max_instances: u8,
    /// Media engines of one instance; all zero when unknown (see `engines_known`).
    pub engines: Engines,
    /// Whether the catalog gives this profile's engines (engine totals are only checked for
    /// models that give `engine_totals`).
    pub engines_known: bool,
    /// Value of the `NVML_GPU_INSTANCE_PROFILE_*` constant.
    pub nvml_profile_index: u32,
    /// Driver profile id as `nvidia-smi mig -lgip` shows it, where known.
    pub nvidia_smi_profile_id: Option<u32>,
    pub placements_status: Verification,
    pub memory_status: Verification,
}

impl Profile {
    /// Bitmask of the placement units an instance started at `start` covers.
    pub fn mask_at(&self, start: u8) -> u32 {
        let ones = if self.size >= 32 { u32::MAX } else { (1u32 << self.size) - 1 };
        ones.checked_shl(start as u32).unwrap_or(0)
    }

    pub fn is_legal_start(&self, start: u8) -> bool {
        self.starts.contains(&start)
    }

    /// The name the device plugin would advertise for this profile on a GPU with
    /// `gpu_memory_mib` of total memory (NVML's total), from this profile's `memory_mib` and
    /// `nvml_profile_index`; `None` where go-nvlib does not know the profile index. Use it when
    /// memory values are replaced by what NVML reports: `device_plugin_name` is not updated.
    pub fn computed_device_plugin_name(&self, gpu_memory_mib: u64) -> Option<String> {
        let (gi_slices, kind) = nvlib_gpu_instance_profile(self.nvml_profile_index)?;
        Some(device_plugin_name(gpu_memory_mib, self.memory_mib, gi_slices, gi_slices, kind))
    }
}

/// The name of the whole-GPU state in snapshots, plans and geometry specs, and the key of a
/// whole-GPU request (`nvidia.com/gpu`) in a pod's requests.
pub const WHOLE: &str = "whole";

/// What the device plugin advertises for a GPU with MIG mode off (without `nvidia.com/`).
pub const WHOLE_DEVICE_PLUGIN_NAME: &str = "gpu";

/// A rule over several profiles beyond per-profile caps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExclusiveGroup {
    /// Canonical profile names in the group.
    pub profiles: Vec<String>,
    /// At most this many instances of the group's profiles together.
    pub max_total: Option<u8>,
    /// When not empty: an instance of a group profile may only share the GPU with instances of
    /// these profiles (e.g. `+me.all` only with `-me`).
    pub only_coexists_with: Vec<String>,
    pub status: Verification,
}

/// A MIG-capable GPU model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuModel {
    /// Catalog key, e.g. `A100-40GB`.
    pub key: String,
    /// Human description (boards covered).
    pub description: String,
    /// Names NVML reports (`nvmlDeviceGetName`).
    pub nvml_names: Vec<String>,
    /// GPU Operator `nvidia.com/gpu.product` label values (NVML name, spaces -> '-').
    pub product_labels: Vec<String>,
    /// PCI device id with vendor in the low half: `0x20B010DE`.
    pub device_ids: Vec<u32>,
    pub architecture: String,
    pub memory_mib: Option<u64>,
    pub memory_status: Verification,
    /// Size of NVML's placement grid (8 on A100/H100/B200, 12 on RTX PRO 6000).
    pub placement_units: u8,
    pub compute_slices: u8,
    pub profiles: Vec<Profile>,
    /// Media engines of the whole GPU; `None` where unknown (then engines are not checked).
    pub engine_totals: Option<Engines>,
    pub exclusive_groups: Vec<ExclusiveGroup>,
    pub notes: Vec<String>,
    #[serde(skip)]
    pub(crate) names: HashMap<String, ProfileId>,
}

impl GpuModel {
    /// Profile by canonical name or alias (exact, then case-insensitive).
    pub fn profile(&self, name: &str) -> Option<ProfileId> {
        if let Some(&id) = self.names.get(name) {
            return Some(id);
        }
        self.names.get(&name.to_ascii_lowercase()).copied()
    }

    /// # Panics
    /// When `id` is not an index into `profiles` (a programming error: ids come from this model).
    pub fn profile_info(&self, id: ProfileId) -> &Profile {
        &self.profiles[id]
    }

    /// Profile by the name the device plugin advertises (`1g.10gb`, or `mig-1g.10gb` /
    /// `nvidia.com/mig-1g.10gb` as a pod requests it), exact then case-insensitive;
    /// `nvidia.com/gpu` (or `gpu`) is the whole GPU.
    pub fn profile_by_device_plugin_name(&self, name: &str) -> Option<ProfileId> {
        let name = name.strip_prefix("nvidia.com/").unwrap_or(name);
        if name == WHOLE_DEVICE_PLUGIN_NAME {
            return Some(self.whole());
        }
        let name = name.strip_prefix("mig-").unwrap_or(name);
        let mig = || self.mig_profiles();
        mig()
            .find(|&id| self.profiles[id].device_plugin_name == name)
            .or_else(|| mig().find(|&id| self.profiles[id].device_plugin_name.eq_ignore_ascii_case(name)))
    }

    /// Profiles without a media/graphics suffix: what the planner uses by default.
    pub fn standard_profiles(&self) -> Vec<ProfileId> {
        (0..self.profiles.len()).filter(|&id| self.profiles[id].kind == ProfileKind::Standard).collect()
    }

    /// Every MIG profile id, in catalog order (not [`GpuModel::whole`]).
    pub fn all_profiles(&self) -> Vec<ProfileId> {
        self.mig_profiles().collect()
    }

    /// The MIG profiles, in catalog order: every profile but the whole GPU.
    pub fn mig_profiles(&self) -> impl Iterator<Item = ProfileId> + '_ {
        (0..self.profiles.len()).filter(|&id| self.profiles[id].kind != ProfileKind::Whole)
    }

    /// The whole GPU (MIG mode off) as a profile: always the last one.
    pub fn whole(&self) -> ProfileId {
        self.profiles.len() - 1
    }

    /// The GPU's memory, MiB: the catalog's figure, else its largest MIG profile's.
    pub fn total_memory_mib(&self) -> u64 {
        self.memory_mib
            .unwrap_or_else(|| self.mig_profiles().map(|id| self.profiles[id].memory_mib).max().unwrap_or(0))
    }

    /// Whether a MIG mode change of this model takes effect only after a GPU reset with every
    /// NVML client stopped: Ampere. Hopper and later change mode at once when idle (NVIDIA MIG
    /// user guide, "Enable MIG Mode"). Geometer's agent resets a GPU only where the policy and
    /// the agent both allow it (`Policy::gpu_reset_allowed`); otherwise the planner keeps such
    /// a GPU in the mode it is in.
    pub fn mode_change_needs_reset(&self) -> bool {
        self.architecture.starts_with("Ampere")
    }

    /// Whether `profile` is the whole GPU (MIG mode off).
    pub fn is_whole(&self, profile: ProfileId) -> bool {
        self.profiles.get(profile).is_some_and(|p| p.kind == ProfileKind::Whole)
    }

    /// Bitmask with every placement unit set.
    pub fn full_mask(&self) -> u32 {
        if self.placement_units >= 32 {
            u32::MAX
        } else {
            (1u32 << self.placement_units) - 1
        }
    }

    /// The exclusive groups translated to profile ids (names were validated when loading).
    pub(crate) fn group_ids(&self, group: &ExclusiveGroup) -> (Vec<ProfileId>, Vec<ProfileId>) {
        let ids = |names: &[String]| names.iter().filter_map(|n| self.profile(n)).collect::<Vec<_>>();
        (ids(&group.profiles), ids(&group.only_coexists_with))
    }
}

/// A GPU the reference knows about but whose placements are unknown, so no geometry can be
/// planned for it. Listed so that a lookup can say so instead of "unknown GPU".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnplaceableModel {
    pub key: String,
    pub nvml_names: Vec<String>,
    pub reason: String,
}

/// All known GPU models with lookup indexes.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    models: Vec<GpuModel>,
    unplaceable: Vec<UnplaceableModel>,
    index: lookup::Index,
}

const BUILTIN_YAML: &str = include_str!("../catalog/gpus.yaml");

impl Catalog {
    /// The catalog compiled into Geometer, parsed once.
    ///
    /// # Panics
    /// If the embedded data does not validate; a test proves it does.
    pub fn builtin() -> &'static Catalog {
        static BUILTIN: OnceLock<Catalog> = OnceLock::new();
        BUILTIN.get_or_init(|| match Catalog::from_yaml(BUILTIN_YAML) {
            Ok(catalog) => catalog,
            Err(err) => panic!("built-in catalog solver/catalog/gpus.yaml is invalid: {err}"),
        })
    }

    /// The text of the built-in catalog, so users can copy it as a starting point.
    pub fn builtin_yaml() -> &'static str {
        BUILTIN_YAML
    }

    /// Parses and validates a catalog file. Errors name the model, profile, field and value.
    pub fn from_yaml(text: &str) -> Result<Catalog, CatalogError> {
        let (models, unplaceable) = schema::parse(text)?;
        Ok(Catalog::assemble(models, unplaceable))
    }

    /// This catalog with `extra` laid over it: a model with the same key (case-insensitive)
    /// is replaced in place, a new key is appended. Device ids and names of `extra` win.
    pub fn with_overrides(&self, extra: Catalog) -> Catalog {
        let mut models = self.models.clone();
        let mut from_extra = Vec::new();
        for model in extra.models {
            match models.iter().position(|m| m.key.eq_ignore_ascii_case(&model.key)) {
                Some(i) => {
                    models[i] = model;
                    from_extra.push(i);
                }
                None => {
                    models.push(model);
                    from_extra.push(models.len() - 1);
                }
            }
        }
        let mut order: Vec<usize> = (0..models.len()).filter(|i| !from_extra.contains(i)).collect();
        order.extend(from_extra);
        let mut unplaceable: Vec<UnplaceableModel> = self
            .unplaceable
            .iter()
            .filter(|u| !models.iter().any(|m| m.key.eq_ignore_ascii_case(&u.key)))
            .cloned()
            .collect();
        for u in extra.unplaceable {
            unplaceable.retain(|old| !old.key.eq_ignore_ascii_case(&u.key));
            unplaceable.push(u);
        }
        let index = lookup::Index::build(&models, &order);
        Catalog { models, unplaceable, index }
    }

    pub fn models(&self) -> &[GpuModel] {
        &self.models
    }

    /// Known GPUs that cannot be planned for (placements unknown).
    pub fn unplaceable(&self) -> &[UnplaceableModel] {
        &self.unplaceable
    }

    /// By catalog key (case-insensitive), PCI id (`0x20B010DE`, `20B010DE`, `0x20b0`, `20b0`,
    /// `10de:20b0`), NVML name, or `nvidia.com/gpu.product` label (also with `-SHARED` or
    /// `-MIG-<profile>` suffixes the GPU Operator adds).
    pub fn find(&self, query: &str) -> Option<&GpuModel> {
        self.index.find(query).map(|i| &self.models[i])
    }

    /// An unplaceable GPU matching `query` by key or NVML name/label, for error messages.
    pub fn find_unplaceable(&self, query: &str) -> Option<&UnplaceableModel> {
        lookup::find_unplaceable(&self.unplaceable, query)
    }

    /// By full PCI id (device in the high half, vendor `10DE` in the low half).
    pub fn by_device_id(&self, id: u32) -> Option<&GpuModel> {
        self.index.by_device_id(id).map(|i| &self.models[i])
    }

    fn assemble(models: Vec<GpuModel>, unplaceable: Vec<UnplaceableModel>) -> Catalog {
        let order: Vec<usize> = (0..models.len()).collect();
        let index = lookup::Index::build(&models, &order);
        Catalog { models, unplaceable, index }
    }
}
