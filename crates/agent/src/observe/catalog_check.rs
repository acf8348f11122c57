//! Compares Geometer's catalog with what NVML reports about a GPU's profiles. NVML is trusted:
//! disagreements are reported (MigNode status, `geometer agent probe`), and [`nvml_model`] gives
//! the catalog model corrected by NVML's values.

use geometer_solver::catalog::{GpuModel, Profile, ProfileId};

use crate::nvml::{GpuIndex, GpuInstanceProfileInfo, NvmlBackend, NvmlError, NvmlProfileIndex, Placement};
use geometer_api::CatalogDisagreement;

/// One profile as NVML reports it: its info and every placement it allows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NvmlProfile {
    pub info: GpuInstanceProfileInfo,
    pub placements: Vec<Placement>,
    /// Why NVML would not give the placements (the profile is then not used on this GPU).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "as_text")]
    pub placements_error: Option<NvmlError>,
}

fn as_text<S: serde::Serializer>(error: &Option<NvmlError>, serializer: S) -> Result<S::Ok, S::Error> {
    match error {
        Some(e) => serializer.serialize_str(&e.to_string()),
        None => serializer.serialize_none(),
    }
}

/// Profile info and possible placements of every profile a GPU offers (MIG mode must be on).
/// A profile whose placements NVML will not give does not stop the reading of the others: it
/// is kept with the error, reported as a catalog disagreement and not used on this GPU.
pub fn read_profiles(nvml: &dyn NvmlBackend, gpu: GpuIndex) -> Result<Vec<NvmlProfile>, NvmlError> {
    let mut out = Vec::new();
    for info in nvml.gpu_instance_profiles(gpu)? {
        let (placements, placements_error) = match nvml.possible_placements(gpu, info.id) {
            Ok(placements) => (placements, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        out.push(NvmlProfile { info, placements, placements_error });
    }
    Ok(out)
}

/// The catalog profile an NVML profile is: same `NVML_GPU_INSTANCE_PROFILE_*` index, else the
/// same name.
pub fn match_profile(model: &GpuModel, info: &GpuInstanceProfileInfo) -> Option<ProfileId> {
    model
        .profiles
        .iter()
        .position(|p| NvmlProfileIndex(p.nvml_profile_index) == info.profile_index)
        .or_else(|| info.name.as_deref().and_then(|name| model.profile(name)))
}

/// The NVML profile (with the driver id that creation takes) of a catalog profile name, so the
/// agent can turn a planned `profile@start` into `create_gpu_instance(gpu, info.id, placement)`.
pub fn nvml_profile_for<'a>(
    model: &GpuModel,
    profiles: &'a [GpuInstanceProfileInfo],
    name: &str,
) -> Option<&'a GpuInstanceProfileInfo> {
    let wanted = model.profile(name)?;
    profiles.iter().find(|info| match_profile(model, info) == Some(wanted))
}

/// Every difference between the catalog's model and NVML's report for one GPU.
pub fn compare(model: &GpuModel, gpu: GpuIndex, reported: &[NvmlProfile]) -> Vec<CatalogDisagreement> {
    let mut out = Vec::new();
    let mut seen = vec![false; model.profiles.len()];
    for r in reported {
        let Some(id) = match_profile(model, &r.info) else {
            out.push(CatalogDisagreement {
                gpu,
                profile: Some(nvml_label(&r.info)),
                field: "offered".to_string(),
                catalog: "no such profile".to_string(),
                nvml: format!(
                    "profile index {}, id {}, {} slices, {} MiB, placements {}",
                    r.info.profile_index,
                    r.info.id,
                    r.info.slice_count,
                    r.info.memory_mib,
                    placements_text(&r.placements)
                ),
            });
            continue;
        };
        seen[id] = true;
        compare_profile(&model.profiles[id], gpu, r, &mut out);
    }
    // The whole GPU is no NVML profile: NVML never offers it.
    seen[model.whole()] = true;
    for (profile, _) in model.profiles.iter().zip(&seen).filter(|(_, seen)| !**seen) {
        out.push(CatalogDisagreement {
            gpu,
            profile: Some(profile.name.clone()),
            field: "offered".to_string(),
            catalog: format!("profile index {}", profile.nvml_profile_index),
            nvml: "not offered".to_string(),
        });
    }
    out
}

fn compare_profile(p: &Profile, gpu: GpuIndex, r: &NvmlProfile, out: &mut Vec<CatalogDisagreement>) {
    let mut differ = |field: &str, catalog: String, nvml: String| {
        if catalog != nvml {
            out.push(CatalogDisagreement {
                gpu,
                profile: Some(p.name.clone()),
                field: field.to_string(),
                catalog,
                nvml,
            });
        }
    };
    if let Some(name) = &r.info.name {
        let known = p.name == *name || p.aliases.iter().any(|a| a == name);
        differ("name", p.name.clone(), if known { p.name.clone() } else { name.clone() });
    }
    if let Some(id) = p.nvidia_smi_profile_id {
        differ("profileId", id.to_string(), r.info.id.to_string());
    }
    differ("computeSlices", p.compute_slices.to_string(), r.info.slice_count.to_string());
    differ("maxInstances", p.max_instances.to_string(), r.info.instance_count.to_string());
    differ("memoryMib", p.memory_mib.to_string(), r.info.memory_mib.to_string());
    let catalog_placements: Vec<Placement> =
        p.starts.iter().map(|&s| Placement { start: s as u32, size: p.size as u32 }).collect();
    let reported = match &r.placements_error {
        Some(e) => format!("unreadable: {e}"),
        None => placements_text(&r.placements),
    };
    differ("placements", placements_text(&catalog_placements), reported);
    differ("decoders", p.engines.dec.to_string(), r.info.decoder_count.to_string());
    differ("encoders", p.engines.enc.to_string(), r.info.encoder_count.to_string());
    differ("jpegs", p.engines.jpeg.to_string(), r.info.jpeg_count.to_string());
    differ("ofas", p.engines.ofa.to_string(), r.info.ofa_count.to_string());
}

/// The catalog model with NVML's placements, caps, slice counts and memory where NVML reports
/// the profile; profiles NVML does not offer get no legal start, so nothing plans them (the
/// whole GPU excepted: it is no NVML profile).
pub fn nvml_model(model: &GpuModel, reported: &[NvmlProfile]) -> GpuModel {
    let mut corrected = model.clone();
    let mut offered = vec![false; model.profiles.len()];
    // The whole GPU (MIG off) is no NVML profile; the catalog's stands.
    offered[model.whole()] = true;
    for r in reported {
        let Some(id) = match_profile(model, &r.info) else { continue };
        if r.placements_error.is_some() {
            continue;
        }
        offered[id] = true;
        let p = &mut corrected.profiles[id];
        p.starts = r.placements.iter().map(|pl| pl.start as u8).collect();
        if let Some(first) = r.placements.first() {
            p.size = first.size as u8;
            p.memory_slices = first.size as u8;
        }
        p.max_instances = r.info.instance_count.min(u8::MAX as u32) as u8;
        p.compute_slices = r.info.slice_count.min(u8::MAX as u32) as u8;
        p.memory_mib = r.info.memory_mib;
        p.nvidia_smi_profile_id = Some(r.info.id.0);
    }
    for (p, offered) in corrected.profiles.iter_mut().zip(offered) {
        if !offered {
            p.starts.clear();
            p.max_instances = 0;
        }
    }
    corrected
}

/// `0,1,2,3 (size 1)`; placements of mixed sizes are listed as `start:size`.
pub fn placements_text(placements: &[Placement]) -> String {
    if placements.is_empty() {
        return "none".to_string();
    }
    let mut placements = placements.to_vec();
    placements.sort();
    let size = placements[0].size;
    if placements.iter().all(|p| p.size == size) {
        let starts: Vec<String> = placements.iter().map(|p| p.start.to_string()).collect();
        format!("{} (size {size})", starts.join(","))
    } else {
        placements.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
    }
}

fn nvml_label(info: &GpuInstanceProfileInfo) -> String {
    info.name.clone().unwrap_or_else(|| format!("profile index {}", info.profile_index))
}
