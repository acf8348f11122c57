//! User catalog files (`--catalog FILE`): parsing, overriding built-in models, and errors that
//! name the model, profile, field and value.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::{Catalog, CatalogError, CatalogFile, GpuModel};
use std::time::{Duration, Instant};

use geometer_solver::geometry::{
    maximal_extensions_until, parse_spec, validate, Geometry, GeometryCache, GeometryError,
};
use geometer_solver::plan::PlanOptions;
use geometer_solver::snapshot::Snapshot;
use proptest::prelude::*;

const NEW_GPU: &str = r#"
models:
- key: X100-16GB
  description: a test GPU
  architecture: Test
  nvml_names: [NVIDIA X100 16GB]
  device_ids: ['0x1ABC10DE']
  memory_mib: 16384
  memory_status: verified
  placement_units: 4
  compute_slices: 4
  engine_totals: {dec: 2, jpeg: 1, ofa: 1}
  profiles:
  - {name: 1g.4gb, compute_slices: 1, memory_mib: 4096, starts: [0, 1, 2, 3], size: 1, max_instances: 4,
     engines: {dec: 0}, nvml_profile_index: 0, placements_status: verified}
  - {name: 1g.4gb+me, aliases: [1g.4gb.me], compute_slices: 1, memory_mib: 4096, starts: [0, 1, 2, 3], size: 1,
     max_instances: 1, engines: {dec: 1, jpeg: 1, ofa: 1}, nvml_profile_index: 7}
  - {name: 2g.8gb, compute_slices: 2, memory_mib: 8192, starts: [0, 2], size: 2, max_instances: 2,
     engines: {dec: 1}, nvml_profile_index: 1, nvidia_smi_profile_id: 14}
  - {name: 4g.16gb, compute_slices: 4, memory_mib: 16384, starts: [0], size: 4, max_instances: 1,
     engines: {dec: 2, jpeg: 1, ofa: 1}, nvml_profile_index: 3}
  exclusive_groups:
  - {profiles: [1g.4gb+me], max_total: 1, status: inferred}
"#;

/// A replacement for the built-in A100-40GB: a different device id and only two profiles.
const REPLACE_A100: &str = r#"
models:
- key: a100-40gb
  nvml_names: [NVIDIA A100 Custom]
  device_ids: ['0x20B010DE', '0x1FFF10DE']
  placement_units: 8
  compute_slices: 7
  profiles:
  - {name: 7g.40gb, compute_slices: 7, memory_mib: 40192, starts: [0], size: 8, max_instances: 1, nvml_profile_index: 4}
  - {name: 1g.5gb, compute_slices: 1, memory_mib: 4864, starts: [0, 1, 2, 3, 4, 5, 6], size: 1, max_instances: 7, nvml_profile_index: 0}
"#;

fn key_of<'a>(cat: &'a Catalog, q: &str) -> Option<&'a str> {
    cat.find(q).map(|m| m.key.as_str())
}

#[test]
fn a_new_model_is_added_and_found_every_way() {
    let extra = Catalog::from_yaml(NEW_GPU).unwrap();
    let cat = Catalog::builtin().with_overrides(extra);
    assert_eq!(cat.models().len(), Catalog::builtin().models().len() + 1);
    assert_eq!(key_of(&cat, "x100-16gb"), Some("X100-16GB"));
    assert_eq!(key_of(&cat, "0x1ABC10DE"), Some("X100-16GB"));
    assert_eq!(key_of(&cat, "1abc"), Some("X100-16GB"));
    assert_eq!(key_of(&cat, "NVIDIA X100 16GB"), Some("X100-16GB"));
    assert_eq!(key_of(&cat, "NVIDIA-X100-16GB-SHARED"), Some("X100-16GB"));
    assert_eq!(key_of(&cat, "A100-40GB"), Some("A100-40GB"), "built-ins stay");
    let m = cat.find("X100-16GB").unwrap();
    assert_eq!(m.profile("1g.4gb.me"), m.profile("1g.4gb+me"));
    // Fields left out default to "unverified", and engines to unknown.
    let me = m.profile_info(m.profile("1g.4gb+me").unwrap());
    assert_eq!(me.placements_status, geometer_solver::catalog::Verification::Unverified);
    // Its rules work: the +me cap and the engine totals.
    let spec = |s: &str| parse_spec(m, s).unwrap().fixed();
    assert!(validate(m, &spec("2g.8gb@0,2g.8gb@2")).is_ok());
    assert!(validate(m, &spec("2g.8gb@0,1g.4gb+me@2,1g.4gb@3")).is_ok());
    assert_eq!(
        validate(m, &spec("1g.4gb+me@0,1g.4gb+me@1")),
        Err(GeometryError::TooManyInstances {
            model: "X100-16GB".into(),
            profile: "1g.4gb+me".into(),
            count: 2,
            max: 1
        })
    );
}

#[test]
fn same_key_replaces_and_reindexes_ids_and_names() {
    let before = Catalog::builtin();
    assert_eq!(key_of(before, "NVIDIA-A100-PCIE-40GB"), Some("A100-40GB"));
    let cat = before.with_overrides(Catalog::from_yaml(REPLACE_A100).unwrap());
    assert_eq!(cat.models().len(), before.models().len(), "replaced in place, not added");
    let position = cat.models().iter().position(|m| m.key == "a100-40gb");
    assert_eq!(position, before.models().iter().position(|m| m.key == "A100-40GB"));
    let m = cat.find("A100-40GB").unwrap();
    assert_eq!(m.mig_profiles().count(), 2, "and the whole GPU besides");
    assert!(m.is_whole(m.profiles.len() - 1));
    assert_eq!(key_of(&cat, "0x1FFF10DE"), Some("a100-40gb"));
    assert_eq!(key_of(&cat, "NVIDIA A100 Custom"), Some("a100-40gb"));
    // The replaced model's old ids and names are gone with it.
    assert_eq!(key_of(&cat, "0x20B110DE"), None);
    assert_eq!(key_of(&cat, "NVIDIA-A100-PCIE-40GB"), None);
    assert!(m.profile("3g.20gb").is_none());
    // Untouched models are unchanged.
    assert_eq!(cat.find("H100-80GB"), before.find("H100-80GB"));
}

#[test]
fn memoized_searches_follow_the_overriding_rules_not_the_key() {
    use geometer_solver::geometry::{maximal_extensions, Geometry};
    let builtin = Catalog::builtin().find("A100-40GB").unwrap();
    let before = maximal_extensions(builtin, &Geometry::empty(), &builtin.standard_profiles());
    assert_eq!(before.len(), 78);
    let cat = Catalog::builtin().with_overrides(Catalog::from_yaml(REPLACE_A100).unwrap());
    let replaced = cat.find("A100-40GB").unwrap();
    let after = maximal_extensions(replaced, &Geometry::empty(), &replaced.standard_profiles());
    // Only 7g.40gb or 7 x 1g.5gb fit on the replacement.
    assert_eq!(after.len(), 2);
}

#[test]
fn an_override_takes_a_device_id_from_another_model() {
    let text = NEW_GPU.replace("0x1ABC10DE", "0x233010DE");
    let cat = Catalog::builtin().with_overrides(Catalog::from_yaml(&text).unwrap());
    assert_eq!(key_of(&cat, "0x233010DE"), Some("X100-16GB"));
    assert_eq!(key_of(&cat, "H100-80GB"), Some("H100-80GB"));
}

#[test]
fn catalog_file_form_round_trips() {
    let models: Vec<&GpuModel> = Catalog::builtin().models().iter().collect();
    let unplaceable: Vec<_> = Catalog::builtin().unplaceable().iter().collect();
    let text = CatalogFile::from_models(&models, &unplaceable).to_yaml();
    let again = Catalog::from_yaml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(again.models(), Catalog::builtin().models());
    assert_eq!(again.unplaceable(), Catalog::builtin().unplaceable());
}

/// The error for NEW_GPU with `from` replaced by `to`, as text.
fn error_after(from: &str, to: &str) -> String {
    assert!(NEW_GPU.contains(from), "fixture lacks {from:?}");
    let text = NEW_GPU.replacen(from, to, 1);
    match Catalog::from_yaml(&text) {
        Ok(_) => panic!("{from:?} -> {to:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

fn assert_names(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} should name {part:?}");
    }
}

#[test]
fn errors_name_model_profile_field_and_value() {
    let e = error_after("starts: [0, 2], size: 2", "starts: [0, 3], size: 2");
    assert_names(&e, &["X100-16GB", "2g.8gb", "starts", "3", "placement units"]);
    let e = error_after("starts: [0, 2], size: 2", "starts: [2, 0], size: 2");
    assert_names(&e, &["2g.8gb", "starts", "increasing"]);
    let e = error_after("starts: [0], size: 4", "starts: [0], size: 5");
    assert_names(&e, &["4g.16gb", "size", "5", "between 1 and 4"]);
    let e = error_after("'0x1ABC10DE'", "'0xZZ'");
    assert_names(&e, &["X100-16GB", "device_ids", "0xZZ", "0x20B010DE"]);
    let e = error_after("profiles: [1g.4gb+me], max_total", "profiles: [1g.4gb+xx], max_total");
    assert_names(&e, &["X100-16GB", "exclusive_groups.profiles", "1g.4gb+xx"]);
    let e = error_after("name: 2g.8gb", "name: 2g.8gb+foo");
    assert_names(&e, &["2g.8gb+foo", "name", "+me"]);
    let e = error_after("aliases: [1g.4gb.me]", "aliases: [1g.4gb]");
    assert_names(&e, &["1g.4gb", "another profile"]);
    let e = error_after(
        "engines: {dec: 2, jpeg: 1, ofa: 1}, nvml_profile_index: 3",
        "engines: {dec: 3}, nvml_profile_index: 3",
    );
    assert_names(&e, &["4g.16gb", "engines.dec", "3", "engine_totals.dec"]);
    let e = error_after("compute_slices: 4, memory_mib: 16384", "compute_slices: 9, memory_mib: 16384");
    assert_names(&e, &["4g.16gb", "compute_slices", "9"]);
    let e = error_after("placement_units: 4", "placement_units: 40");
    assert_names(&e, &["X100-16GB", "placement_units", "40"]);
    let e = error_after("max_instances: 4", "max_instances: 0");
    assert_names(&e, &["1g.4gb", "max_instances", "0"]);
    let e = error_after("memory_status: verified", "memory_status: maybe");
    assert_names(&e, &["maybe"]);
    let e = error_after("  compute_slices: 4\n", "  compute_slices: 4\n  colour: red\n");
    assert_names(&e, &["colour"]);
    let e = error_after(
        "memory_mib: 4096, starts: [0, 1, 2, 3], size: 1, max_instances: 4",
        "memory_mib: -1, starts: [0, 1, 2, 3], size: 1, max_instances: 4",
    );
    assert_names(&e, &["1g.4gb", "memory_mib", "-1"]);
}

#[test]
fn duplicates_and_empty_files_are_rejected() {
    let twice = format!("{NEW_GPU}{}", NEW_GPU.replace("models:\n", "").replace("0x1ABC10DE", "0x1ABD10DE"));
    let e = Catalog::from_yaml(&twice).unwrap_err().to_string();
    assert_names(&e, &["X100-16GB", "key", "twice"]);
    let shared_id = format!("{NEW_GPU}{}", NEW_GPU.replace("models:\n", "").replace("X100-16GB", "X200"));
    let e = Catalog::from_yaml(&shared_id).unwrap_err().to_string();
    assert_names(&e, &["X200", "device_ids", "0x1ABC10DE", "X100-16GB"]);
    assert_eq!(Catalog::from_yaml("models: []\n").unwrap_err(), CatalogError::Empty);
    assert!(matches!(Catalog::from_yaml("models: [").unwrap_err(), CatalogError::Parse { .. }));
    assert!(matches!(Catalog::from_yaml("- just a list").unwrap_err(), CatalogError::Parse { .. }));
    let no_profiles = "models:\n- {key: Y, placement_units: 8, compute_slices: 7, profiles: []}\n";
    assert_names(
        &Catalog::from_yaml(no_profiles).unwrap_err().to_string(),
        &["model Y", "profiles", "unplaceable"],
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn from_yaml_never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        let _ = Catalog::from_yaml(&text);
    }

    #[test]
    fn from_yaml_never_panics_on_damaged_catalogs(cut in 0..NEW_GPU.len(), junk in "[-0-9a-z:{}\\[\\], \n]{0,12}") {
        let cut = (0..=cut).rev().find(|&i| NEW_GPU.is_char_boundary(i)).unwrap_or(0);
        let text = format!("{}{}{}", &NEW_GPU[..cut], junk, &NEW_GPU[cut..]);
        if let Ok(cat) = Catalog::from_yaml(&text) {
            // Whatever is accepted is usable: every model enumerates without panicking.
            for m in cat.models() {
                let _ = geometer_solver::geometry::enumerate(m, &m.all_profiles(), true);
            }
        }
    }
}

#[test]
fn a_file_can_make_an_unplaceable_gpu_placeable() {
    let text = NEW_GPU.replace("X100-16GB", "RTX-PRO-5000");
    let cat = Catalog::builtin().with_overrides(Catalog::from_yaml(&text).unwrap());
    assert_eq!(key_of(&cat, "RTX PRO 5000"), Some("RTX-PRO-5000"));
    assert!(cat.find_unplaceable("RTX PRO 5000").is_none());
    assert!(cat.find_unplaceable("RTX-PRO-4500").is_some());
}

/// A catalog model of `units` placement units and `profiles` one-unit profiles that may start
/// anywhere: (profiles + 1)^units layouts.
fn wide_model(units: u8, profiles: u32) -> String {
    let starts: Vec<String> = (0..units).map(|s| s.to_string()).collect();
    let profiles: String = (1..=profiles)
        .map(|i| {
            format!(
                "  - {{name: 1g.{i}gb, compute_slices: 1, memory_mib: {}, starts: [{}], size: 1, max_instances: {units}, nvml_profile_index: {i}}}\n",
                1024 * i,
                starts.join(", ")
            )
        })
        .collect();
    format!(
        "models:\n- key: WIDE-1\n  nvml_names: [NVIDIA Wide]\n  device_ids: ['0x1ABD10DE']\n  memory_mib: 65536\n  placement_units: {units}\n  compute_slices: {units}\n  profiles:\n{profiles}"
    )
}

#[test]
fn a_model_with_more_layouts_than_can_be_searched_is_refused_by_name() {
    // 32 units, four one-unit profiles that may start anywhere: 5^32 layouts. The geometry
    // search is exhaustive, so such a model would ignore any time limit; it is refused.
    let e = Catalog::from_yaml(&wide_model(32, 4)).unwrap_err().to_string();
    assert_names(&e, &["WIDE-1", "profiles", "32 placement units", "5000000 ways"]);
    // Every built-in model is within the bound.
    assert!(Catalog::builtin().models().len() > 5);
}

#[test]
fn the_geometry_search_of_a_model_within_the_bound_stops_at_the_plans_deadline() {
    // 11 units, three profiles: 4^11 (4.2 million) layouts, within the catalog's bound but
    // seconds of search. A plan's time limit covers the search too.
    let catalog = Catalog::from_yaml(&wide_model(11, 3)).unwrap();
    let model = catalog.find("WIDE-1").unwrap();
    let all = model.all_profiles();
    let cache = GeometryCache::new();
    let cut = maximal_extensions_until(model, &Geometry::empty(), &all, &cache, Some(Instant::now()));
    assert!(!cut.complete, "a deadline already past stops the search");
    assert!(!cut.geometries.is_empty() && cut.geometries.len() < 3usize.pow(11));
    assert!(cut.geometries.iter().all(|g| validate(model, g).is_ok()));
    assert!(cache.is_empty(), "an answer cut short is never remembered as the answer");

    let snapshot: Snapshot = serde_saphyr::from_str(
        "nodes:\n- name: a\n  gpus: [{index: 0, model: WIDE-1}]\npending:\n- {namespace: ml, name: p, requests: {1g.2gb: 3}}\n",
    )
    .unwrap();
    let options = PlanOptions { time_limit: Some(Duration::from_millis(1)), ..PlanOptions::default() };
    let plan = geometer_solver::plan(&snapshot, &catalog, &options).unwrap();
    assert!(
        plan.notes.iter().any(|n| n.contains("geometry search for WIDE-1 stopped at the time limit")),
        "{:?}",
        plan.notes
    );
    assert_eq!(plan.objective.pods_met, 1, "the layouts found in time still serve the pod: {:?}", plan.notes);
}
