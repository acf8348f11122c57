//! Legal and illegal layouts per GPU family, and enumeration counts checked against the counts
//! derived independently when the hardware facts were gathered.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashSet;

use geometer_solver::catalog::{Catalog, GpuModel, ProfileId};
use geometer_solver::geometry::{enumerate, parse_spec, place, validate, Geometry, GeometryError, Placed};

fn model(key: &str) -> &'static GpuModel {
    Catalog::builtin().find(key).unwrap_or_else(|| panic!("{key} not in catalog"))
}

/// Parses a fully placed spec into a geometry (without validating it).
fn geometry(m: &GpuModel, spec: &str) -> Geometry {
    let parsed = parse_spec(m, spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert!(parsed.unplaced().is_empty(), "{spec} must give every start");
    parsed.fixed()
}

fn check(m: &GpuModel, spec: &str) -> Result<(), GeometryError> {
    validate(m, &geometry(m, spec))
}

fn ids(m: &GpuModel, names: &[&str]) -> Vec<ProfileId> {
    names.iter().map(|n| m.profile(n).unwrap_or_else(|| panic!("{n}"))).collect()
}

/// (placement-level, multiset-level) counts of maximal geometries over `profiles`.
fn maximal_counts(m: &GpuModel, profiles: &[ProfileId]) -> (usize, usize) {
    let maximal = enumerate(m, profiles, true);
    let multisets: HashSet<Vec<u16>> = maximal.iter().map(|g| g.counts(m)).collect();
    (maximal.len(), multisets.len())
}

fn all(m: &GpuModel) -> Vec<ProfileId> {
    m.all_profiles()
}

#[test]
fn a100_40gb_4g_next_to_3g_is_legal() {
    let m = model("A100-40GB");
    assert_eq!(check(m, "4g.20gb@0,3g.20gb@4"), Ok(()));
    assert_eq!(check(m, "3g.20gb@0,3g.20gb@4"), Ok(()));
    assert_eq!(check(m, "3g.20gb@4,2g.10gb@0,1g.5gb@2,1g.5gb@3"), Ok(()));
    assert_eq!(check(m, "7g.40gb@0"), Ok(()));
}

#[test]
fn a100_40gb_two_3g_and_a_1g_do_not_fit() {
    let m = model("A100-40GB");
    let err = place(m, &Geometry::empty(), &ids(m, &["3g.20gb", "3g.20gb", "1g.5gb"])).unwrap_err();
    match &err {
        GeometryError::NoPlacement { wanted, reason, .. } => {
            assert!(wanted.contains("3g.20gb"), "{err}");
            // 3+3+1 compute slices fit in 7; it is the placement grid that is full.
            assert!(reason.contains("cannot hold"), "{err}");
        }
        other => panic!("expected NoPlacement, got {other:?}"),
    }
    // Explicit starts: the 1g has nowhere to go.
    assert!(matches!(check(m, "3g.20gb@0,3g.20gb@4,1g.5gb@3"), Err(GeometryError::Overlap { .. })));
}

#[test]
fn a100_40gb_seven_1g_leave_unit_7_empty() {
    let m = model("A100-40GB");
    let one = m.profile("1g.5gb").unwrap();
    let g = place(m, &Geometry::empty(), &[one; 7]).unwrap();
    assert_eq!(validate(m, &g), Ok(()));
    assert_eq!(g.len(), 7);
    assert_eq!(g.used_units(m), 0b0111_1111, "unit 7 stays empty: {}", g.display(m));
    match place(m, &Geometry::empty(), &[one; 8]) {
        Err(GeometryError::NoPlacement { reason, .. }) => {
            assert_eq!(reason, "8 instances of 1g.5gb on A100-40GB; at most 7 fit")
        }
        other => panic!("expected NoPlacement, got {other:?}"),
    }
    match check(m, "1g.5gb@7") {
        Err(GeometryError::IllegalStart { start: 7, legal, .. }) => assert_eq!(legal, [0, 1, 2, 3, 4, 5, 6]),
        other => panic!("expected IllegalStart, got {other:?}"),
    }
}

#[test]
fn a100_40gb_illegal_layouts_say_why() {
    let m = model("A100-40GB");
    let err = check(m, "3g.20gb@2").unwrap_err();
    assert!(err.to_string().contains("3g.20gb@2") && err.to_string().contains("[0, 4]"), "{err}");
    let err = check(m, "4g.20gb@0,2g.10gb@2").unwrap_err();
    assert!(matches!(err, GeometryError::Overlap { .. }), "{err}");
    assert!(err.to_string().contains("[2, 3]"), "names the shared units: {err}");
    let err = check(m, "1g.5gb+me@0,1g.5gb+me@1").unwrap_err();
    assert!(
        matches!(err, GeometryError::TooManyInstances { max: 1, .. } | GeometryError::GroupLimit { .. }),
        "{err}"
    );
    let err = check(m, "7g.40gb@0,1g.5gb@0").unwrap_err();
    assert!(matches!(err, GeometryError::Overlap { .. }), "{err}");
    // 1g.10gb covers two units but one compute slice: four of them and a 3g exceed nothing
    // placement-wise only if they fit; 4 x 1g.10gb fill all 8 units.
    assert_eq!(check(m, "1g.10gb@0,1g.10gb@2,1g.10gb@4,1g.10gb@6"), Ok(()));
}

#[test]
fn a100_enumeration_matches_derived_counts() {
    for key in ["A100-40GB", "A100-80GB"] {
        let m = model(key);
        let classic: Vec<ProfileId> = m
            .standard_profiles()
            .into_iter()
            .filter(|&p| !(m.profile_info(p).compute_slices == 1 && m.profile_info(p).size == 2))
            .collect();
        assert_eq!(classic.len(), 5, "{key}");
        assert_eq!(maximal_counts(m, &classic), (19, 14), "{key} classic");
        assert_eq!(maximal_counts(m, &m.standard_profiles()), (78, 38), "{key} with 1g double-memory");
        assert_eq!(maximal_counts(m, &all(m)), (239, 64), "{key} every profile incl. +me");
    }
}

#[test]
fn a100_80gb_accepts_driver_names() {
    let m = model("A100-80GB");
    assert_eq!(check(m, "7g.79gb@0"), Ok(()));
    assert_eq!(check(m, "3g.39gb@0,3g.40gb@4"), Ok(()));
    let g = geometry(m, "3g.39gb@4");
    assert_eq!(g.display(m), "3g.40gb@4", "shown by canonical name");
}

#[test]
fn a30_layouts_and_counts() {
    let m = model("A30");
    assert_eq!(check(m, "4g.24gb@0"), Ok(()));
    assert_eq!(check(m, "2g.12gb@0,2g.12gb@2"), Ok(()));
    assert_eq!(check(m, "2g.12gb@0,1g.6gb@2,1g.6gb@3"), Ok(()));
    assert!(matches!(check(m, "2g.12gb@1"), Err(GeometryError::IllegalStart { .. })));
    // One JPEG/OFA on the card: only one media-extension instance.
    let err = check(m, "1g.6gb+me@0,2g.12gb+me@2").unwrap_err();
    assert!(matches!(err, GeometryError::GroupLimit { .. } | GeometryError::EngineTotals { .. }), "{err}");
    assert_eq!(check(m, "1g.6gb+me@0,1g.6gb@1,2g.12gb@2"), Ok(()));
    assert_eq!(maximal_counts(m, &m.standard_profiles()), (5, 4));
    assert_eq!(maximal_counts(m, &all(m)), (17, 8));
}

#[test]
fn hopper_layouts_and_counts() {
    for key in ["H100-80GB", "H100-94GB", "H100-96GB", "H200-141GB", "GH200-144GB"] {
        let m = model(key);
        assert_eq!(maximal_counts(m, &m.standard_profiles()).0, 78, "{key}");
    }
    let h100 = model("H100-80GB");
    assert_eq!(maximal_counts(h100, &h100.standard_profiles()), (78, 38));
    assert_eq!(maximal_counts(h100, &all(h100)), (239, 64));
    let classic = ids(h100, &["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]);
    assert_eq!(maximal_counts(h100, &classic).0, 19);
    assert_eq!(check(h100, "4g.40gb@0,3g.40gb@4"), Ok(()));
    assert_eq!(check(h100, "1g.10gb+me@6,2g.20gb@0,2g.20gb@2,2g.20gb@4"), Ok(()));
    assert_eq!(
        check(h100, "1g.10gb+me@5,1g.10gb+me@6"),
        Err(GeometryError::TooManyInstances {
            model: "H100-80GB".into(),
            profile: "1g.10gb+me".into(),
            count: 2,
            max: 1
        })
    );

    let h200 = model("H200-141GB");
    assert_eq!(check(h200, "3g.71gb@0,3g.71gb@4"), Ok(()));
    assert_eq!(check(h200, "1g.35gb@0,1g.35gb@2,1g.35gb@4,1g.35gb@6"), Ok(()));
    match check(h200, "4g.71gb@4") {
        Err(GeometryError::IllegalStart { legal, .. }) => assert_eq!(legal, [0]),
        other => panic!("expected IllegalStart, got {other:?}"),
    }
    assert!(matches!(check(h200, "2g.35gb@6"), Err(GeometryError::IllegalStart { .. })));
    assert_eq!(maximal_counts(h200, &all(h200)).0, 239);
}

#[test]
fn blackwell_layouts_and_counts() {
    let b200 = model("B200");
    assert_eq!(maximal_counts(b200, &b200.standard_profiles()).0, 78);
    assert_eq!(maximal_counts(b200, &all(b200)).0, 239);
    assert_eq!(check(b200, "4g.90gb@0,3g.90gb@4"), Ok(()));
    assert_eq!(check(b200, "7g.180gb@0"), Ok(()));
    assert!(
        matches!(check(b200, "7g.180gb@0,1g.23gb@0"), Err(GeometryError::Overlap { units, .. }) if units == [0]),
        "{:?}",
        check(b200, "7g.180gb@0,1g.23gb@0")
    );
    // No engine totals are known for B200; the +me cap still comes from its group and max.
    assert_eq!(
        check(b200, "1g.23gb+me@0,1g.23gb+me@1"),
        Err(GeometryError::TooManyInstances {
            model: "B200".into(),
            profile: "1g.23gb+me".into(),
            count: 2,
            max: 1
        })
    );
    let gb200 = model("GB200");
    assert_eq!(maximal_counts(gb200, &gb200.standard_profiles()).0, 78);
    let err = check(gb200, "1g.24gb@0,7g.189gb@0").unwrap_err();
    assert!(err.to_string().contains("1g.23gb@0") && err.to_string().contains("overlap"), "{err}");
}

#[test]
fn rtx_pro_6000_standard_layouts() {
    let m = model("RTX-PRO-6000");
    assert_eq!(check(m, "4g.96gb@0"), Ok(()));
    assert_eq!(check(m, "2g.48gb@0,2g.48gb@6"), Ok(()));
    assert_eq!(check(m, "2g.48gb@0,1g.24gb@6,1g.24gb@9"), Ok(()));
    assert_eq!(check(m, "1g.24gb@0,1g.24gb@3,1g.24gb@6,1g.24gb@9"), Ok(()));
    assert!(matches!(check(m, "2g.48gb@3"), Err(GeometryError::IllegalStart { .. })));
    assert!(matches!(check(m, "1g.24gb@1"), Err(GeometryError::IllegalStart { .. })));
    assert_eq!(maximal_counts(m, &m.standard_profiles()), (5, 4));
    assert_eq!(maximal_counts(m, &all(m)), (302, 64));
}

#[test]
fn rtx_pro_6000_media_engine_rules() {
    let m = model("RTX-PRO-6000");
    // +me.all owns every media engine: only -me profiles may share the GPU.
    assert_eq!(check(m, "1g.24gb+me.all@0,1g.24gb-me@3,2g.48gb-me@6"), Ok(()));
    assert_eq!(check(m, "2g.48gb+me.all@0,1g.24gb-me@6,1g.24gb-me@9"), Ok(()));
    let err = check(m, "1g.24gb+me.all@0,1g.24gb@3").unwrap_err();
    assert!(matches!(err, GeometryError::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("1g.24gb-me"), "names what may coexist: {err}");
    let err = check(m, "1g.24gb+me.all@0,1g.24gb+gfx@3").unwrap_err();
    assert!(matches!(&err, GeometryError::Incompatible { other, .. } if other == "1g.24gb+gfx"), "{err}");
    // Two +me.all instances would each own every media engine: one at most.
    let err = check(m, "1g.24gb+me.all@0,2g.48gb+me.all@6").unwrap_err();
    assert!(matches!(err, GeometryError::GroupLimit { count: 2, max: 1, .. }), "{err}");
    // One OFA: +me and +me.all exclude each other.
    let err = check(m, "1g.24gb+me@0,1g.24gb+me.all@3").unwrap_err();
    assert!(matches!(err, GeometryError::GroupLimit { .. } | GeometryError::Incompatible { .. }), "{err}");
    // +me next to standard and graphics profiles is fine: engines add up to the totals.
    assert_eq!(check(m, "1g.24gb+me@0,1g.24gb@3,1g.24gb+gfx@6,1g.24gb-me@9"), Ok(()));
    assert_eq!(check(m, "1g.24gb+gfx@0,1g.24gb+gfx@3,1g.24gb+gfx@6,1g.24gb+gfx@9"), Ok(()));
    assert_eq!(check(m, "4g.96gb+gfx@0"), Ok(()));
    // Placing +me.all with an unplaced standard profile has no answer.
    let add = ids(m, &["1g.24gb+me.all", "1g.24gb"]);
    assert!(matches!(place(m, &Geometry::empty(), &add), Err(GeometryError::NoPlacement { .. })));
}

#[test]
fn place_keeps_fixed_instances_and_prefers_room() {
    let m = model("A100-40GB");
    let fixed = geometry(m, "3g.20gb@4");
    let g = place(m, &fixed, &ids(m, &["2g.10gb", "1g.5gb"])).unwrap();
    assert!(g.contains(&Placed::new(m.profile("3g.20gb").unwrap(), 4)), "{}", g.display(m));
    assert_eq!(validate(m, &g), Ok(()));
    // A single 1g goes where it leaves a 4g-sized range free.
    let g = place(m, &Geometry::empty(), &ids(m, &["1g.5gb"])).unwrap();
    let free = m.full_mask() & !g.used_units(m);
    assert!(free & 0x0F == 0x0F || free & 0xF0 == 0xF0, "{}", g.display(m));
    // The same request gives the same answer.
    assert_eq!(place(m, &Geometry::empty(), &ids(m, &["1g.5gb"])).unwrap(), g);
    // An invalid fixed part is reported as such.
    let bad = geometry(m, "3g.20gb@2");
    assert!(matches!(place(m, &bad, &[]), Err(GeometryError::IllegalStart { .. })));
}

#[test]
fn enumerate_all_valid_includes_empty_and_every_maximal() {
    let m = model("A30");
    let valid = enumerate(m, &m.standard_profiles(), false);
    assert_eq!(valid.first(), Some(&Geometry::empty()));
    let maximal = enumerate(m, &m.standard_profiles(), true);
    for g in &maximal {
        assert!(valid.contains(g));
    }
    let distinct: HashSet<&Geometry> = valid.iter().collect();
    assert_eq!(distinct.len(), valid.len(), "no duplicates");
    assert_eq!(enumerate(m, &m.standard_profiles(), true), maximal, "deterministic");
}
