//! What has to change on each GPU: the desired geometry (`MigNode.spec`) against what the
//! inventory shows, per GPU. Instances in both stay and are never touched.
//!
//! The whole spec is checked before anything is done: one bad GPU entry refuses the spec, so a
//! node is never half-reconfigured towards a geometry that cannot be completed.

use std::collections::{BTreeMap, BTreeSet};

use geometer_solver::catalog::{Catalog, GpuModel};
use geometer_solver::geometry::{diff, validate, Geometry, Placed};
use thiserror::Error;

use geometer_api::{GpuGeometry, GpuInventory, MigInstance, PlacedInstance};

/// Why a desired geometry cannot be worked towards. Each names the GPU and the value; the spec
/// has to change (the agent will not guess).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WorkError {
    #[error("spec.gpus lists GPU {gpu} twice; give each GPU index once")]
    DuplicateGpu { gpu: u32 },
    #[error("spec.gpus names GPU {gpu}, but this node has GPUs {present:?}")]
    NoSuchGpu { gpu: u32, present: Vec<u32> },
    #[error("GPU {gpu} is a {model:?}, which Geometer's catalog does not know as MIG-capable; remove it from spec.gpus or load a catalog that has it")]
    UnknownModel { gpu: u32, model: String },
    #[error("GPU {gpu} ({model}) has no MIG profile {profile:?}; use a profile of `geometer catalog show {model}`")]
    UnknownProfile { gpu: u32, model: String, profile: String },
    #[error("the geometry for GPU {gpu} ({model}) is not valid: {reason}")]
    InvalidGeometry { gpu: u32, model: String, reason: String },
    /// The geometry diff named an instance the GPU does not have: a bug in Geometer, reported
    /// instead of acting on a diff it cannot trust.
    #[error("GPU {gpu} ({model}): the change to the target names {instance}, which the GPU does not have; nothing was changed (please report this as a bug)")]
    DiffMismatch { gpu: u32, model: String, instance: String },
}

/// Work on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuWork {
    pub index: u32,
    /// Catalog key of the GPU's model.
    pub model: String,
    /// MIG mode is off and must be turned on (which resets the GPU).
    pub enable_mig: bool,
    /// The target is the whole GPU: every instance goes, then MIG mode goes off (a reset).
    pub whole: bool,
    /// MIG mode is on and must be turned off once the instances are gone.
    pub disable_mig: bool,
    /// The pods holding the whole GPU (several when the device plugin shares it), which must
    /// leave before MIG mode can change.
    pub whole_gpu_pods: Vec<String>,
    /// Instances that stay (some may lack their compute instance: half built).
    pub keep: Vec<MigInstance>,
    /// Instances that go.
    pub destroy: Vec<MigInstance>,
    /// Instances to create, largest first, with the catalog's profile names.
    pub create: Vec<PlacedInstance>,
    /// The desired geometry, sorted, with the catalog's profile names.
    pub target: Vec<PlacedInstance>,
}

impl GpuWork {
    /// The GPU has its target geometry, every instance with its compute instance.
    pub(crate) fn is_done(&self) -> bool {
        !self.enable_mig
            && !self.disable_mig
            && self.destroy.is_empty()
            && self.create.is_empty()
            && self.half_built().next().is_none()
    }

    /// Kept instances without a compute instance: need one before they can be used.
    pub(crate) fn half_built(&self) -> impl Iterator<Item = &MigInstance> {
        self.keep.iter().filter(|i| i.compute_instance_id.is_none())
    }

    /// The node must be cordoned first: something in use goes, or something advertised goes
    /// (the kubelet could hand it to a new pod while we destroy it), or the whole GPU resets.
    pub(crate) fn needs_cordon(&self) -> bool {
        self.enable_mig
            || self.disable_mig
            || self.destroy.iter().any(|i| i.in_use() || i.compute_instance_id.is_some())
    }

    /// Pods that must leave before the work can be done.
    pub(crate) fn pods_to_evict(&self) -> Vec<String> {
        let mut pods: Vec<String> = self.destroy.iter().flat_map(MigInstance::pods).cloned().collect();
        if self.enable_mig {
            pods.extend(self.whole_gpu_pods.iter().cloned());
        }
        pods
    }

    /// Instances that go but have processes and no pod (something outside Kubernetes uses
    /// them): nothing can be evicted, the agent waits for them.
    pub(crate) fn busy_without_pod(&self) -> impl Iterator<Item = &MigInstance> {
        self.destroy.iter().filter(|i| i.pod.is_none() && i.processes > 0)
    }
}

/// Work on every GPU the spec names, in GPU index order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeWork {
    pub gpus: Vec<GpuWork>,
}

impl NodeWork {
    /// Compares the spec with the inventory. GPUs the spec does not name are left alone.
    /// `models` gives each GPU's rules by index (the catalog's, corrected by what NVML reports);
    /// a GPU without one is not MIG-capable as far as Geometer knows.
    pub(crate) fn plan(
        desired: &[GpuGeometry],
        observed: &[GpuInventory],
        models: &GpuModels,
    ) -> Result<NodeWork, WorkError> {
        let mut seen = BTreeSet::new();
        let mut gpus = Vec::with_capacity(desired.len());
        for want in desired {
            if !seen.insert(want.index) {
                return Err(WorkError::DuplicateGpu { gpu: want.index });
            }
            let Some(have) = observed.iter().find(|g| g.index == want.index) else {
                return Err(WorkError::NoSuchGpu {
                    gpu: want.index,
                    present: observed.iter().map(|g| g.index).collect(),
                });
            };
            let model = models
                .get(&want.index)
                .ok_or_else(|| WorkError::UnknownModel { gpu: want.index, model: have.model.clone() })?;
            gpus.push(plan_gpu(want, have, model)?);
        }
        gpus.sort_by_key(|g| g.index);
        Ok(NodeWork { gpus })
    }

    pub(crate) fn is_done(&self) -> bool {
        self.gpus.iter().all(GpuWork::is_done)
    }

    pub(crate) fn needs_cordon(&self) -> bool {
        self.gpus.iter().any(GpuWork::needs_cordon)
    }

    pub(crate) fn pods_to_evict(&self) -> Vec<String> {
        let mut pods: Vec<String> = self.gpus.iter().flat_map(GpuWork::pods_to_evict).collect();
        pods.sort();
        pods.dedup();
        pods
    }

    pub(crate) fn gpu(&self, index: u32) -> Option<&GpuWork> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

/// The rules of each GPU on the node, by GPU index.
pub(crate) type GpuModels = BTreeMap<u32, GpuModel>;

/// The catalog model of an inventoried GPU: by the name the inventory gives, else its PCI id.
pub(crate) fn model_of<'c>(gpu: &GpuInventory, catalog: &'c Catalog) -> Option<&'c GpuModel> {
    catalog.find(&gpu.model).or_else(|| catalog.find(&gpu.pci_device_id))
}

/// Each GPU's catalog model, uncorrected by NVML (the tests' GPU rules).
#[cfg(test)]
pub(crate) fn catalog_models(observed: &[GpuInventory], catalog: &Catalog) -> GpuModels {
    observed.iter().filter_map(|g| model_of(g, catalog).map(|m| (g.index, m.clone()))).collect()
}

fn plan_gpu(want: &GpuGeometry, have: &GpuInventory, model: &GpuModel) -> Result<GpuWork, WorkError> {
    let gpu = want.index;
    let target = target_geometry(gpu, model, &want.geometry)?;
    // The whole GPU has no instances: every MIG instance goes, then MIG mode goes off.
    let whole = target.is_whole(model);
    let target = if whole { Geometry::empty() } else { target };

    // Observed instances by catalog profile; ones the catalog cannot name are never in a
    // target, so they go.
    let mut known: Vec<(Placed, &MigInstance)> = Vec::new();
    let mut destroy: Vec<MigInstance> = Vec::new();
    // An instance that is not one full-size compute instance goes too, and is made again
    // where the target has it.
    for instance in &have.instances {
        match model.profile(&instance.profile) {
            Some(id) if instance.rebuild.is_none() => known.push((Placed::new(id, instance.start), instance)),
            _ => destroy.push(instance.clone()),
        }
    }
    let current: Geometry = known.iter().map(|(p, _)| *p).collect();
    let d = diff(&current, &target, model);

    let mut pool = known;
    let mut take = |p: &Placed| -> Result<MigInstance, WorkError> {
        let at = pool.iter().position(|(q, _)| q == p).ok_or_else(|| WorkError::DiffMismatch {
            gpu,
            model: model.key.clone(),
            instance: format!("{}@{}", model.profiles[p.profile].name, p.start),
        })?;
        Ok(pool.remove(at).1.clone())
    };
    let keep: Vec<MigInstance> = d.keep.iter().map(&mut take).collect::<Result<_, _>>()?;
    for p in &d.destroy {
        destroy.push(take(p)?);
    }
    destroy.sort_by_key(|i| (i.start, i.gpu_instance_id));

    let name = |p: &Placed| PlacedInstance::new(model.profiles[p.profile].name.clone(), p.start);
    Ok(GpuWork {
        index: gpu,
        model: model.key.clone(),
        enable_mig: !whole && !have.mig_mode.current,
        whole,
        disable_mig: whole && have.mig_mode.current,
        whole_gpu_pods: have.pods().cloned().collect(),
        keep,
        destroy,
        create: d.create.iter().map(name).collect(),
        target: target.instances().iter().map(name).collect(),
    })
}

fn target_geometry(gpu: u32, model: &GpuModel, geometry: &[PlacedInstance]) -> Result<Geometry, WorkError> {
    let mut placed = Vec::with_capacity(geometry.len());
    for instance in geometry {
        let id = model.profile(&instance.profile).ok_or_else(|| WorkError::UnknownProfile {
            gpu,
            model: model.key.clone(),
            profile: instance.profile.clone(),
        })?;
        placed.push(Placed::new(id, instance.start));
    }
    let target = Geometry::new(placed);
    validate(model, &target).map_err(|e| WorkError::InvalidGeometry {
        gpu,
        model: model.key.clone(),
        reason: e.to_string(),
    })?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use geometer_api::MigModeStatus;

    use super::*;

    fn instance(profile: &str, start: u8, size: u8, gi: u32, pod: Option<&str>) -> MigInstance {
        MigInstance {
            profile: profile.into(),
            start,
            size,
            gpu_instance_id: gi,
            compute_instance_id: Some(0),
            uuid: Some(format!("MIG-{gi}")),
            pod: pod.map(str::to_string),
            processes: 0,
            shared_with: Vec::new(),
            rebuild: None,
        }
    }

    fn h100(index: u32, instances: Vec<MigInstance>) -> GpuInventory {
        GpuInventory {
            index,
            uuid: format!("GPU-{index}"),
            model: "H100-80GB".into(),
            pci_device_id: "0x233010DE".into(),
            mig_mode: MigModeStatus { current: true, pending: true },
            instances,
            pod: None,
            shared_with: vec![],
            advertised_as: Default::default(),
            free_placements: Vec::new(),
        }
    }

    fn models(observed: &[GpuInventory]) -> GpuModels {
        catalog_models(observed, Catalog::builtin())
    }

    fn want(index: u32, geometry: &[(&str, u8)]) -> GpuGeometry {
        GpuGeometry { index, geometry: geometry.iter().map(|&(p, s)| PlacedInstance::new(p, s)).collect() }
    }

    #[test]
    fn instances_in_both_geometries_stay_and_creates_come_largest_first() {
        let have =
            h100(0, vec![instance("3g.40gb", 0, 4, 1, Some("ml/keep")), instance("1g.10gb", 4, 1, 2, None)]);
        let work = NodeWork::plan(
            &[want(0, &[("3g.40gb", 0), ("1g.10gb", 6), ("2g.20gb", 4)])],
            std::slice::from_ref(&have),
            &models(std::slice::from_ref(&have)),
        )
        .unwrap();
        let gpu = &work.gpus[0];
        assert_eq!(gpu.keep.iter().map(|i| i.gpu_instance_id).collect::<Vec<_>>(), vec![1]);
        assert_eq!(gpu.destroy.iter().map(|i| i.gpu_instance_id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(gpu.create, vec![PlacedInstance::new("2g.20gb", 4), PlacedInstance::new("1g.10gb", 6)]);
        // The free 1g.10gb is advertised, so it could be handed out while it is destroyed.
        assert!(gpu.needs_cordon());
        // The pod on the kept instance is never evicted.
        assert!(work.pods_to_evict().is_empty());
        assert!(!work.is_done());
    }

    #[test]
    fn only_adding_instances_needs_no_cordon() {
        let have = h100(0, vec![instance("3g.40gb", 0, 4, 1, Some("ml/a"))]);
        let work = NodeWork::plan(
            &[want(0, &[("3g.40gb", 0), ("3g.40gb", 4)])],
            std::slice::from_ref(&have),
            &models(std::slice::from_ref(&have)),
        )
        .unwrap();
        assert!(!work.needs_cordon());
        assert_eq!(work.gpus[0].create, vec![PlacedInstance::new("3g.40gb", 4)]);
    }

    #[test]
    fn pods_on_instances_that_go_are_evicted_once_each() {
        let have = vec![
            h100(0, vec![instance("7g.80gb", 0, 8, 1, Some("ml/big"))]),
            h100(
                1,
                vec![
                    instance("1g.10gb", 0, 1, 1, Some("ml/small")),
                    instance("1g.10gb", 1, 1, 2, Some("ml/big")),
                ],
            ),
        ];
        let work =
            NodeWork::plan(&[want(0, &[("3g.40gb", 0)]), want(1, &[])], &have, &models(&have)).unwrap();
        assert_eq!(work.pods_to_evict(), vec!["ml/big".to_string(), "ml/small".to_string()]);
    }

    #[test]
    fn gpus_the_spec_does_not_name_are_left_alone() {
        let have = vec![h100(0, vec![]), h100(1, vec![instance("7g.80gb", 0, 8, 1, None)])];
        let work = NodeWork::plan(&[want(0, &[])], &have, &models(&have)).unwrap();
        assert_eq!(work.gpus.len(), 1);
        assert!(work.is_done());
    }

    #[test]
    fn a_half_built_instance_that_stays_needs_its_compute_instance() {
        let mut bare = instance("3g.40gb", 0, 4, 1, None);
        bare.compute_instance_id = None;
        bare.uuid = None;
        let work = NodeWork::plan(
            &[want(0, &[("3g.40gb", 0)])],
            &[h100(0, vec![bare.clone()])],
            &models(&[h100(0, vec![bare])]),
        )
        .unwrap();
        assert!(work.gpus[0].destroy.is_empty() && work.gpus[0].create.is_empty());
        assert_eq!(work.gpus[0].half_built().count(), 1);
        assert!(!work.is_done());
        assert!(
            !work.needs_cordon(),
            "a bare GPU instance is not advertised, creating its compute instance is safe"
        );
    }

    #[test]
    fn a_gpu_named_by_its_nvml_product_name_is_found_in_the_catalog() {
        let mut have = h100(0, vec![instance("3g.40gb", 0, 4, 1, None)]);
        have.model = "NVIDIA H100 80GB HBM3".into();
        let work = NodeWork::plan(
            &[want(0, &[("3g.40gb", 0)])],
            std::slice::from_ref(&have),
            &models(std::slice::from_ref(&have)),
        )
        .unwrap();
        assert!(work.is_done(), "{work:?}");
    }

    #[test]
    fn mig_mode_off_means_enable_then_create_everything_after_the_whole_gpu_pod_leaves() {
        let mut have = h100(0, vec![]);
        have.mig_mode = MigModeStatus { current: false, pending: false };
        have.pod = Some("ml/whole".into());
        let work = NodeWork::plan(
            &[want(0, &[("7g.80gb", 0)])],
            std::slice::from_ref(&have),
            &models(std::slice::from_ref(&have)),
        )
        .unwrap();
        let gpu = &work.gpus[0];
        assert!(gpu.enable_mig && gpu.needs_cordon());
        assert_eq!(gpu.pods_to_evict(), vec!["ml/whole".to_string()]);
        assert_eq!(gpu.create, vec![PlacedInstance::new("7g.80gb", 0)]);
    }

    #[test]
    fn instances_the_catalog_cannot_name_go() {
        let have = h100(0, vec![instance("9g.99gb", 0, 8, 1, None)]);
        let work = NodeWork::plan(
            &[want(0, &[])],
            std::slice::from_ref(&have),
            &models(std::slice::from_ref(&have)),
        )
        .unwrap();
        assert_eq!(work.gpus[0].destroy.len(), 1);
    }

    #[test]
    fn bad_specs_are_refused_naming_gpu_and_value() {
        let have = vec![h100(0, vec![]), h100(1, vec![])];
        let cat = &models(&have);
        let err = NodeWork::plan(&[want(3, &[])], &have, cat).unwrap_err();
        assert_eq!(err, WorkError::NoSuchGpu { gpu: 3, present: vec![0, 1] });
        let err = NodeWork::plan(&[want(0, &[]), want(0, &[])], &have, cat).unwrap_err();
        assert_eq!(err, WorkError::DuplicateGpu { gpu: 0 });
        let err = NodeWork::plan(&[want(1, &[("1g.5gb", 0)])], &have, cat).unwrap_err();
        assert!(err.to_string().contains("1g.5gb") && err.to_string().contains("GPU 1"), "{err}");
        let err = NodeWork::plan(&[want(0, &[("7g.80gb", 0), ("1g.10gb", 0)])], &have, cat).unwrap_err();
        assert!(matches!(err, WorkError::InvalidGeometry { gpu: 0, .. }), "{err:?}");
        let mut t4 = h100(0, vec![]);
        t4.model = "Tesla T4".into();
        t4.pci_device_id = "0x1EB810DE".into();
        let err = NodeWork::plan(&[want(0, &[])], &[t4.clone()], &models(&[t4])).unwrap_err();
        assert!(matches!(err, WorkError::UnknownModel { gpu: 0, .. }), "{err:?}");
    }
}
