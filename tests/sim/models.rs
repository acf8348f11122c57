//! The simulator's view of catalog models and the mig-parted layouts placed on them.

use geometer_sim::cluster::parse_cluster_spec;
use geometer_sim::mapping::{Mapping, WholeGpus};
use geometer_sim::models::{model_info, resolve, static_geometry};
use geometer_sim::strategy::StaticLayout;
use geometer_sim::trace::Trace;
use geometer_sim::workload::Workload;
use geometer_solver::catalog::Catalog;

#[test]
fn a100_80gb_has_the_standard_profiles_with_their_slices() {
    let info = resolve(Catalog::builtin(), "A100-80GB").unwrap();
    let shapes: Vec<(&str, u8, u8)> =
        info.profiles.iter().map(|p| (p.name.as_str(), p.compute_slices, p.memory_slices)).collect();
    assert_eq!(
        shapes,
        [
            ("1g.10gb", 1, 1),
            ("1g.20gb", 1, 2),
            ("2g.20gb", 2, 2),
            ("3g.40gb", 3, 4),
            ("4g.40gb", 4, 4),
            ("7g.80gb", 7, 8)
        ]
    );
    assert_eq!((info.compute_slices, info.memory_slices), (7, 8));
    // A PCI device id finds the same model.
    assert_eq!(resolve(Catalog::builtin(), "0x20B210DE").unwrap().name, "A100-80GB");
}

fn workload_for(models: &str) -> Workload {
    let cluster = parse_cluster_spec(models, |m| resolve(Catalog::builtin(), m)).unwrap();
    Workload::new(&Trace::default(), &cluster, Mapping::Compute, WholeGpus::Whole)
}

#[test]
fn mig_parted_layouts_place_on_a100_and_h100() {
    let w = workload_for("1xA100-80GB:1,1xH100-80GB:1");
    for key in ["A100-80GB", "H100-80GB"] {
        let model = Catalog::builtin().find(key).unwrap();
        let balanced = static_geometry(StaticLayout::AllBalanced, model, &w).unwrap();
        let mut names: Vec<&str> = balanced.iter().map(|s| w.profiles[s.profile].as_str()).collect();
        names.sort();
        assert_eq!(names, ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"], "{key}");
        let ones = static_geometry(StaticLayout::All1g, model, &w).unwrap();
        assert_eq!(ones.len(), 7);
        let mut starts: Vec<u8> = ones.iter().map(|s| s.start).collect();
        starts.sort();
        assert_eq!(starts, [0, 1, 2, 3, 4, 5, 6], "{key}");
    }
}

#[test]
fn every_catalog_model_with_a_layout_entry_can_hold_it() {
    for model in Catalog::builtin().models() {
        let info = model_info(model);
        if info.full_profile().is_none() {
            continue;
        }
        let w = workload_for(&format!("1x{}:1", model.key));
        for layout in [StaticLayout::AllBalanced, StaticLayout::All1g] {
            if layout.instances_for(|p| info.profile(p).is_some()).is_some() {
                let placed = static_geometry(layout, model, &w);
                assert!(placed.is_ok(), "{layout} on {}: {placed:?}", model.key);
            }
        }
    }
}
