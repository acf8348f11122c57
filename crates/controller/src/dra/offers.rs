//! The devices Geometer could make on a static-MIG DRA node, as NVIDIA's driver would publish
//! them: one per catalog profile of each GPU model the driver's nodes have, and the whole GPU.
//! A claim's selectors are evaluated against these to learn which profile it needs.
//!
//! Each offer copies the attributes of a device the driver publishes on a node with that model
//! (product name, brand, architecture, driver and CUDA versions, ...), then sets what depends
//! on the profile as the driver does (repository `kubernetes-sigs/dra-driver-nvidia-gpu`, path
//! `cmd/gpu-kubelet-plugin/deviceinfo.go`): `type` (`mig` or `gpu`), `profile` (the name the
//! device plugin also uses), and the capacities `memory`, `memorySlice<i>` at the profile's
//! first placement, and the media engines where the catalog knows them. A device's own
//! identity (`uuid`, `parentUUID`) is left out: an instance that does not exist yet has none,
//! so a selector reading it fails and the request is left unplanned, never guessed.

use std::collections::{BTreeMap, BTreeSet};

use geometer_solver::catalog::{Catalog, GpuModel, Profile, WHOLE};

use super::objects::DraObjects;
use super::selector::{Attribute, CandidateDevice};
use super::stack::NVIDIA_DRIVER;

/// Attributes that name one device, never copied to an offer.
const OWN_ATTRIBUTES: [&str; 4] = ["uuid", "parentUUID", "profile", "type"];

/// A device Geometer could make: `profile` (a catalog profile, or `whole`) on `model`.
#[derive(Debug, Clone)]
pub struct Offer {
    pub model: String,
    pub profile: String,
    /// Smaller is cheaper: placement units, compute slices, memory. A whole GPU ranks last.
    pub rank: (u8, u8, u64),
    pub device: CandidateDevice,
}

/// The offers for every GPU model of the DRA nodes in `models` (node -> catalog keys of its
/// GPUs), in order of rank.
pub fn offers(
    dra: &DraObjects,
    models: &BTreeMap<String, BTreeSet<String>>,
    catalog: &Catalog,
) -> Vec<Offer> {
    let mut base: BTreeMap<&str, BTreeMap<String, Attribute>> = BTreeMap::new();
    // DynamicMIG nodes' GPUs too: their claims' profiles are read the same way, for the
    // fragmentation report (Geometer makes nothing there).
    for (node, keys) in models.iter().filter(|(n, _)| dra.nodes.contains_key(*n)) {
        let published = dra.a_device_of(node).map(|d| CandidateDevice::from_slice(NVIDIA_DRIVER, d));
        for key in keys {
            let Some(model) = catalog.find(key) else { continue };
            let attributes = base.entry(model.key.as_str()).or_insert_with(|| catalog_attributes(model));
            for (name, value) in published.iter().flat_map(|p| &p.attributes) {
                if !OWN_ATTRIBUTES.contains(&name.as_str()) {
                    attributes.insert(name.clone(), value.clone());
                }
            }
        }
    }
    let mut out = Vec::new();
    for (key, attributes) in base {
        let Some(model) = catalog.find(key) else { continue };
        out.extend(model.profiles.iter().map(|p| mig_offer(model, p, &attributes)));
        out.push(whole_offer(model, &attributes));
    }
    out.sort_by(|a, b| a.rank.cmp(&b.rank).then_with(|| a.model.cmp(&b.model)));
    out
}

/// What the catalog says of every device of a model.
fn catalog_attributes(model: &GpuModel) -> BTreeMap<String, Attribute> {
    let product = model.nvml_names.first().cloned().unwrap_or_else(|| model.key.clone());
    BTreeMap::from([
        ("productName".to_string(), Attribute::String(product)),
        ("brand".to_string(), Attribute::String("Nvidia".into())),
        ("architecture".to_string(), Attribute::String(model.architecture.clone())),
    ])
}

fn mig_offer(model: &GpuModel, profile: &Profile, base: &BTreeMap<String, Attribute>) -> Offer {
    let mut attributes = base.clone();
    attributes.insert("type".into(), Attribute::String("mig".into()));
    attributes.insert("profile".into(), Attribute::String(profile.device_plugin_name.clone()));
    let mut capacity = BTreeMap::from([("memory".to_string(), format!("{}Mi", profile.memory_mib))]);
    if profile.engines_known {
        let engines = &profile.engines;
        for (name, count) in [
            ("decoders", engines.dec),
            ("encoders", engines.enc),
            ("jpegEngines", engines.jpeg),
            ("ofaEngines", engines.ofa),
        ] {
            capacity.insert(name.into(), count.to_string());
        }
    }
    let start = profile.starts.first().copied().unwrap_or(0);
    for slice in start..start + profile.size {
        capacity.insert(format!("memorySlice{slice}"), "1".into());
    }
    Offer {
        model: model.key.clone(),
        profile: profile.name.clone(),
        rank: (profile.size, profile.compute_slices, profile.memory_mib),
        device: CandidateDevice { driver: NVIDIA_DRIVER.into(), attributes, capacity },
    }
}

fn whole_offer(model: &GpuModel, base: &BTreeMap<String, Attribute>) -> Offer {
    let mut attributes = base.clone();
    attributes.insert("type".into(), Attribute::String("gpu".into()));
    let memory = model.memory_mib.unwrap_or(0);
    let capacity =
        model.memory_mib.map(|mib| ("memory".to_string(), format!("{mib}Mi"))).into_iter().collect();
    Offer {
        model: model.key.clone(),
        profile: WHOLE.into(),
        rank: (u8::MAX, u8::MAX, memory),
        device: CandidateDevice { driver: NVIDIA_DRIVER.into(), attributes, capacity },
    }
}
