//! The bridge from the solver's catalog to the simulator's view of a GPU model, and the static
//! layouts placed with the solver's geometry search.

use geometer_solver::catalog::{Catalog, GpuModel};
use geometer_solver::geometry::{place, Geometry};

use crate::cluster::{ModelInfo, ProfileInfo};
use crate::strategy::{Slot, StaticLayout};
use crate::workload::Workload;

/// The model's standard profiles (no media-extension or graphics variants), smallest first.
/// Memory is counted in placement units, the grid NVML places instances on.
pub fn model_info(model: &GpuModel) -> ModelInfo {
    let mut profiles: Vec<ProfileInfo> = model
        .standard_profiles()
        .into_iter()
        .map(|id| {
            let p = model.profile_info(id);
            ProfileInfo {
                name: p.name.clone(),
                compute_slices: p.compute_slices,
                memory_slices: p.size,
                memory_mib: p.memory_mib,
            }
        })
        .collect();
    profiles.sort_by_key(|p| (p.compute_slices, p.memory_slices));
    let memory_mib = model.total_memory_mib();
    ModelInfo {
        name: model.key.clone(),
        compute_slices: model.compute_slices,
        memory_slices: model.placement_units,
        memory_mib,
        mode_change_needs_reset: model.mode_change_needs_reset(),
        profiles,
    }
}

/// Looks a model up by any name the catalog knows (key, PCI id, NVML name, product label).
pub fn resolve(catalog: &Catalog, name: &str) -> Option<ModelInfo> {
    catalog.find(name).map(model_info)
}

/// The static layout for one catalog model, placed by the solver. Errors say which model has no
/// entry in the layout or cannot hold it.
pub fn static_geometry(
    layout: StaticLayout,
    model: &GpuModel,
    workload: &Workload,
) -> Result<Vec<Slot>, String> {
    let info = model_info(model);
    let instances = layout
        .instances_for(|p| info.profile(p).is_some())
        .ok_or_else(|| format!("mig-parted {layout} has no entry for GPU model {}", model.key))?;
    let mut ids = Vec::new();
    for (name, count) in &instances {
        let id =
            model.profile(name).ok_or_else(|| format!("GPU model {} has no profile {name}", model.key))?;
        ids.extend(std::iter::repeat_n(id, *count as usize));
    }
    let geometry: Geometry = place(model, &Geometry::empty(), &ids)
        .map_err(|e| format!("{layout} does not fit a {}: {e}", model.key))?;
    geometry
        .instances()
        .iter()
        .map(|placed| {
            let name = &model.profile_info(placed.profile).name;
            let key = workload.profiles.iter().position(|p| p == name).ok_or_else(|| {
                format!("profile {name} of {} is not in the workload's profile table", model.key)
            })?;
            Ok(Slot { profile: key, start: placed.start })
        })
        .collect()
}
