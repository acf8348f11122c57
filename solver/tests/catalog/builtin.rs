//! The built-in catalog: it parses, holds every GPU of the reference, and lookups work by every
//! form a user or a node label uses.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::{Catalog, GpuModel, ProfileKind, Verification, WHOLE};

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

/// One row of NVIDIA's MIG profile tables, transcribed by hand (not read from the catalog).
struct NvidiaRow {
    name: &'static str,
    /// "Fraction of Memory", in eighths: the memory slices the instance covers (for A100
    /// 1g.10gb the table says 1/8, but the guide's own `-lgipp` listing, `{0,2,4,6}:2`, and the
    /// hardware give it two slices).
    memory_eighths: u8,
    /// "Fraction of SMs", in sevenths: the compute slices.
    compute_sevenths: u8,
    /// "Number of Instances Available".
    max_instances: u8,
    /// The placements `nvidia-smi mig -lgipp` lists: `{starts}:size` on an empty GPU.
    starts: &'static [u8],
    /// Memory as `nvidia-smi mig -lgip` prints it (GiB, two decimals), where the guide shows it.
    lgip_gib: Option<f64>,
    /// The profile ID `nvidia-smi mig -lgip` prints, where the guide shows it.
    lgip_id: Option<u32>,
}

const fn row(
    name: &'static str,
    (memory_eighths, compute_sevenths, max_instances): (u8, u8, u8),
    starts: &'static [u8],
    lgip: Option<(f64, u32)>,
) -> NvidiaRow {
    let (lgip_gib, lgip_id) = match lgip {
        Some((gib, id)) => (Some(gib), Some(id)),
        None => (None, None),
    };
    NvidiaRow { name, memory_eighths, compute_sevenths, max_instances, starts, lgip_gib, lgip_id }
}

const ONE_SLICE: &[u8] = &[0, 1, 2, 3, 4, 5, 6];
const TWO_SLICES_1G: &[u8] = &[0, 2, 4, 6];
const TWO_SLICES_2G: &[u8] = &[0, 2, 4];
const HALF: &[u8] = &[0, 4];
const FIRST: &[u8] = &[0];

/// NVIDIA Multi-Instance GPU User Guide, docs.nvidia.com/datacenter/tesla/mig-user-guide:
/// "Supported MIG Profiles" (supported-mig-profiles.html), the A100-SXM4-40GB table (fractions,
/// instances); "Getting Started with MIG" (getting-started-with-mig.html), the `nvidia-smi mig
/// -lgip` and `-lgipp` listings of an A100-SXM4-40GB (memory in GiB, profile IDs, placements).
/// The GiB figures are that driver's output; other drivers print slightly different ones.
const A100_40GB: &[NvidiaRow] = &[
    row("1g.5gb", (1, 1, 7), ONE_SLICE, Some((4.75, 19))),
    row("1g.5gb+me", (1, 1, 1), ONE_SLICE, Some((4.75, 20))),
    row("1g.10gb", (2, 1, 4), TWO_SLICES_1G, Some((9.62, 15))),
    row("2g.10gb", (2, 2, 3), TWO_SLICES_2G, Some((9.62, 14))),
    row("3g.20gb", (4, 3, 2), HALF, Some((19.50, 9))),
    row("4g.20gb", (4, 4, 1), FIRST, Some((19.50, 5))),
    row("7g.40gb", (8, 7, 1), FIRST, Some((39.25, 0))),
];

/// The same guide, "Supported MIG Profiles": the table "GPU Instance Profiles on H100"
/// (fractions, instances). Its placements are those `nvidia-smi mig -lgipp` prints on H100
/// hardware, the A100's grid.
const H100_80GB: &[NvidiaRow] = &[
    row("1g.10gb", (1, 1, 7), ONE_SLICE, None),
    row("1g.10gb+me", (1, 1, 1), ONE_SLICE, None),
    row("1g.20gb", (2, 1, 4), TWO_SLICES_1G, None),
    row("2g.20gb", (2, 2, 3), TWO_SLICES_2G, None),
    row("3g.40gb", (4, 3, 2), HALF, None),
    row("4g.40gb", (4, 4, 1), FIRST, None),
    row("7g.80gb", (8, 7, 1), FIRST, None),
];

/// Checks a model of `catalog` against NVIDIA's table for it, row by row.
fn agrees_with_nvidia(catalog: &Catalog, key: &str, table: &[NvidiaRow]) {
    let m = catalog.find(key).unwrap_or_else(|| panic!("{key} not in the catalog"));
    assert_eq!((m.placement_units, m.compute_slices), (8, 7), "{key}: eight memory and seven compute slices");
    // `whole` is Geometer's own name for the GPU with MIG mode off, not a MIG profile.
    let names: Vec<&str> = m.profiles.iter().map(|p| p.name.as_str()).filter(|&n| n != WHOLE).collect();
    let expected: Vec<&str> = table.iter().map(|r| r.name).collect();
    assert_eq!(names, expected, "{key}: the profiles NVIDIA lists, and no others");
    for r in table {
        let p = m.profile_info(m.profile(r.name).unwrap());
        let what = format!("{key} {}", r.name);
        assert_eq!(p.size, r.memory_eighths, "{what}: memory slices");
        assert_eq!(p.compute_slices, r.compute_sevenths, "{what}: compute slices");
        assert_eq!(p.max_instances, r.max_instances, "{what}: most instances");
        assert_eq!(p.starts, r.starts, "{what}: placements");
        // The name gives the instance's memory in whole GB (the guide's "MIG Device Names"), which
        // its listings show rounded up: 4.75 GiB for 1g.5gb, 39.25 GiB for 7g.40gb.
        let gib = p.memory_mib as f64 / 1024.0;
        let digits = r.name.split('.').nth(1).unwrap().trim_end_matches(|c: char| !c.is_ascii_digit());
        let nominal: f64 = digits.parse().unwrap();
        assert_eq!(gib.ceil(), nominal, "{what}: {gib:.2} GiB");
        if let Some(printed) = r.lgip_gib {
            // nvidia-smi prints two decimals (9.625 GiB as 9.62).
            assert!((gib - printed).abs() < 0.01, "{what}: {gib:.3} GiB, nvidia-smi shows {printed}");
        }
        if let Some(id) = r.lgip_id {
            assert_eq!(p.nvidia_smi_profile_id, Some(id), "{what}: nvidia-smi profile ID");
        }
    }
}

#[test]
fn the_yaml_users_copy_agrees_with_nvidias_mig_profile_tables() {
    // The built-in text users copy as a starting point, read as their catalog file would be.
    let copied = Catalog::from_yaml(Catalog::builtin_yaml()).unwrap();
    for catalog in [&copied, Catalog::builtin()] {
        agrees_with_nvidia(catalog, "A100-40GB", A100_40GB);
        agrees_with_nvidia(catalog, "H100-80GB", H100_80GB);
    }
}
