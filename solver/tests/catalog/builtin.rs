//! The built-in catalog: it parses, holds every GPU of the reference, and lookups work by every
//! form a user or a node label uses.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::{Catalog, GpuModel, ProfileKind, Verification};

fn model(query: &str) -> &'static GpuModel {
    Catalog::builtin().find(query).unwrap_or_else(|| panic!("{query} not found"))
}

#[test]
fn builtin_catalog_parses_and_lists_every_reference_gpu() {
    let keys: Vec<&str> = Catalog::builtin().models().iter().map(|m| m.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "A30",
            "A100-40GB",
            "A100-80GB",
            "H100-80GB",
            "H100-94GB",
            "H100-96GB",
            "H200-141GB",
            "GH200-144GB",
            "B200",
            "GB200",
            "B300",
            "GB300",
            "RTX-PRO-6000"
        ]
    );
    let unplaceable: Vec<&str> = Catalog::builtin().unplaceable().iter().map(|u| u.key.as_str()).collect();
    assert_eq!(unplaceable, ["RTX-PRO-5000", "RTX-PRO-4500"]);
}

#[test]
fn every_profile_fits_its_grid_and_every_model_has_standard_profiles() {
    for m in Catalog::builtin().models() {
        assert!(!m.standard_profiles().is_empty(), "{}", m.key);
        for p in &m.profiles {
            assert_eq!(p.memory_slices, p.size, "{} {}", m.key, p.name);
            for &s in &p.starts {
                assert!(s + p.size <= m.placement_units, "{} {}@{}", m.key, p.name, s);
            }
            assert!(p.compute_slices <= m.compute_slices, "{} {}", m.key, p.name);
        }
    }
}

#[test]
fn a100_40gb_transcribed_facts() {
    let m = model("A100-40GB");
    assert_eq!(m.placement_units, 8);
    assert_eq!(m.compute_slices, 7);
    assert_eq!(m.memory_mib, Some(40960));
    assert_eq!(m.device_ids, [0x20B010DE, 0x20B110DE, 0x20F110DE, 0x20F610DE]);
    let p = m.profile_info(m.profile("3g.20gb").unwrap());
    assert_eq!((p.compute_slices, p.size, p.max_instances), (3, 4, 2));
    assert_eq!(p.starts, [0, 4]);
    assert_eq!(p.nvidia_smi_profile_id, Some(9));
    assert_eq!(p.placements_status, Verification::Verified);
    let one = m.profile_info(m.profile("1g.5gb").unwrap());
    assert_eq!(one.starts, [0, 1, 2, 3, 4, 5, 6], "unit 7 is no legal start for 1g.5gb");
    let standard: Vec<&str> =
        m.standard_profiles().iter().map(|&id| m.profile_info(id).name.as_str()).collect();
    assert_eq!(standard, ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]);
}

#[test]
fn find_by_key_pci_id_nvml_name_and_product_label() {
    let cat = Catalog::builtin();
    let key = |q: &str| cat.find(q).map(|m| m.key.as_str());
    assert_eq!(key("A100-40GB"), Some("A100-40GB"));
    assert_eq!(key("a100-40gb"), Some("A100-40GB"));
    assert_eq!(key("0x20B010DE"), Some("A100-40GB"));
    assert_eq!(key("0x20b010de"), Some("A100-40GB"));
    assert_eq!(key("20B010DE"), Some("A100-40GB"));
    assert_eq!(key("0x20b0"), Some("A100-40GB"));
    assert_eq!(key("20b0"), Some("A100-40GB"));
    assert_eq!(key("10de:20b0"), Some("A100-40GB"));
    assert_eq!(key("NVIDIA A100-SXM4-40GB"), Some("A100-40GB"));
    assert_eq!(key("NVIDIA-A100-SXM4-40GB"), Some("A100-40GB"));
    assert_eq!(key("NVIDIA-A100-SXM4-40GB-SHARED"), Some("A100-40GB"));
    assert_eq!(key("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"), Some("A100-40GB"));
    assert_eq!(key("NVIDIA-A100-80GB-PCIe"), Some("A100-80GB"));
    assert_eq!(key("NVIDIA A100 80GB PCIe"), Some("A100-80GB"));
    assert_eq!(key("NVIDIA-H100-80GB-HBM3"), Some("H100-80GB"));
    assert_eq!(key("NVIDIA-H100-NVL"), Some("H100-94GB"));
    assert_eq!(key("NVIDIA-GH200-480GB"), Some("H100-96GB"));
    assert_eq!(key("NVIDIA-H200"), Some("H200-141GB"));
    assert_eq!(key("NVIDIA-H200-NVL"), Some("H200-141GB"));
    assert_eq!(key("NVIDIA-B200"), Some("B200"));
    assert_eq!(key("NVIDIA-GB200"), Some("GB200"));
    assert_eq!(key("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"), Some("RTX-PRO-6000"));
    assert_eq!(key("0x2BB510DE"), Some("RTX-PRO-6000"));
    assert_eq!(key("RTX PRO 6000"), Some("RTX-PRO-6000"));
    assert_eq!(key("0x318210DE"), Some("B300"));
    assert_eq!(key("0x31C2"), Some("GB300"));
    // "B200" is also valid hex; the key wins over a device-id reading.
    assert_eq!(key("b200"), Some("B200"));
    assert_eq!(key("NVIDIA A30"), Some("A30"));
    assert_eq!(key("0x20B7"), Some("A30"));
    for unknown in ["", "   ", "V100", "0x1DB610DE", "1234:20b0", "NVIDIA-A100", "0x20B010DE00"] {
        assert_eq!(key(unknown), None, "{unknown:?}");
    }
}

#[test]
fn by_device_id_takes_the_full_pci_id() {
    let cat = Catalog::builtin();
    assert_eq!(cat.by_device_id(0x233010DE).map(|m| m.key.as_str()), Some("H100-80GB"));
    assert_eq!(cat.by_device_id(0x290110DE).map(|m| m.key.as_str()), Some("B200"));
    assert_eq!(cat.by_device_id(0x233510DE).map(|m| m.key.as_str()), Some("H200-141GB"));
    assert!(cat.by_device_id(0x20B0).is_none());
}

#[test]
fn driver_specific_profile_names_are_aliases() {
    let m = model("A100-80GB");
    assert_eq!(m.profile("7g.79gb"), m.profile("7g.80gb"));
    assert_eq!(m.profile("3g.39gb"), m.profile("3g.40gb"));
    assert!(m.profile("7g.80gb").is_some());
    let gb = model("GB200");
    assert_eq!(gb.profile("1g.24gb"), gb.profile("1g.23gb"));
    assert_eq!(gb.profile("7g.189gb"), gb.profile("7g.186gb"));
    assert_eq!(gb.profile("3g.95gb"), gb.profile("3g.93gb"));
    assert!(gb.profile("1g.23gb").is_some());
    // Profile names are per model: A100-40GB has no 1g.10gb+me.
    assert!(model("A100-40GB").profile("1g.10gb+me").is_none());
    assert_eq!(m.profile("7G.80GB"), m.profile("7g.80gb"), "case-insensitive");
}

#[test]
fn unplaceable_gpus_are_known_but_not_found() {
    let cat = Catalog::builtin();
    assert!(cat.find("RTX-PRO-5000").is_none());
    let u = cat.find_unplaceable("RTX PRO 5000").expect("listed as unplaceable");
    assert!(u.reason.contains("placements are unknown"), "{}", u.reason);
    assert!(cat.find_unplaceable("rtx-pro-4500").is_some());
    assert!(cat.find_unplaceable("A100-40GB").is_none());
}

#[test]
fn statuses_follow_the_evidence() {
    let p = |m: &str, name: &str| {
        let model = model(m);
        model.profile_info(model.profile(name).unwrap()).clone()
    };
    assert_eq!(p("A100-80GB", "1g.20gb").placements_status, Verification::Inferred);
    assert_eq!(p("H200-141GB", "3g.71gb").placements_status, Verification::Inferred);
    assert_eq!(p("B300", "7g.269gb").placements_status, Verification::Unverified);
    assert_eq!(p("B300", "7g.269gb").memory_status, Verification::Unverified);
    assert_eq!(p("H100-80GB", "1g.10gb").placements_status, Verification::Verified);
    assert_eq!(p("GB200", "7g.186gb").memory_status, Verification::Unverified, "nominal memory");
    // nvidia-smi of "NVIDIA B300 SXM6 AC" in public transcripts; the profiles stay unverified.
    assert_eq!(model("B300").memory_mib, Some(275040));
}

#[test]
fn rtx_pro_6000_profile_kinds_and_engine_rules() {
    let m = model("RTX-PRO-6000");
    assert_eq!(m.placement_units, 12);
    let kind = |name: &str| m.profile_info(m.profile(name).unwrap()).kind;
    assert_eq!(kind("1g.24gb"), ProfileKind::Standard);
    assert_eq!(kind("1g.24gb+me"), ProfileKind::MediaExtensions);
    assert_eq!(kind("1g.24gb+me.all"), ProfileKind::AllMediaExtensions);
    assert_eq!(kind("1g.24gb-me"), ProfileKind::NoMediaExtensions);
    assert_eq!(kind("2g.48gb+gfx"), ProfileKind::Graphics);
    let totals = m.engine_totals.expect("RTX PRO 6000 engine totals are known");
    assert_eq!((totals.dec, totals.enc, totals.jpeg, totals.ofa), (4, 4, 4, 1));
    let groups: Vec<(Vec<String>, Option<u8>, Vec<String>)> = m
        .exclusive_groups
        .iter()
        .map(|g| (g.profiles.clone(), g.max_total, g.only_coexists_with.clone()))
        .collect();
    assert!(groups.contains(&(
        vec!["1g.24gb+me.all".into(), "2g.48gb+me.all".into()],
        None,
        vec!["1g.24gb-me".into(), "2g.48gb-me".into()]
    )));
    let standard: Vec<&str> =
        m.standard_profiles().iter().map(|&id| m.profile_info(id).name.as_str()).collect();
    assert_eq!(standard, ["1g.24gb", "2g.48gb", "4g.96gb"]);
}

#[test]
fn builtin_yaml_is_exposed_for_users_to_copy() {
    let again = Catalog::from_yaml(Catalog::builtin_yaml()).unwrap();
    assert_eq!(again.models(), Catalog::builtin().models());
}
