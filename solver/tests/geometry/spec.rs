//! Geometry specs as users type them, errors that name the token and value, and the canonical
//! display that is their inverse.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::{Catalog, GpuModel};
use geometer_solver::geometry::{
    diff, maximal_extensions, parse_spec, validate, Geometry, GeometryError, Placed,
};

fn model(key: &str) -> &'static GpuModel {
    Catalog::builtin().find(key).unwrap()
}

#[test]
fn starts_repeats_aliases_and_spaces() {
    let m = model("A100-80GB");
    let spec = parse_spec(m, " 3g.40gb@4 , 2x1g.10gb, 7G.79GB ").unwrap();
    let id = |n: &str| m.profile(n).unwrap();
    assert_eq!(
        spec.items,
        vec![(id("3g.40gb"), Some(4)), (id("1g.10gb"), None), (id("1g.10gb"), None), (id("7g.80gb"), None)]
    );
    assert_eq!(spec.fixed(), Geometry::new(vec![Placed::new(id("3g.40gb"), 4)]));
    assert_eq!(spec.unplaced(), vec![id("1g.10gb"), id("1g.10gb"), id("7g.80gb")]);
    // 7g cannot join a 3g: resolving says so.
    assert!(matches!(spec.resolve(m), Err(GeometryError::NoPlacement { .. })));
    let ok = parse_spec(m, "3g.40gb@4,2x1g.10gb").unwrap().resolve(m).unwrap();
    assert_eq!(validate(m, &ok), Ok(()));
    assert_eq!(ok.len(), 3);
}

#[test]
fn display_is_canonical_and_parses_back() {
    let m = model("A100-40GB");
    let g = parse_spec(m, "1g.5gb@2,2g.10gb@0,3g.20gb@4").unwrap().fixed();
    assert_eq!(g.display(m), "3g.20gb@4,2g.10gb@0,1g.5gb@2");
    assert_eq!(parse_spec(m, &g.display(m)).unwrap().fixed(), g);
    assert_eq!(Geometry::empty().display(m), "-");
}

#[test]
fn malformed_tokens_name_token_and_value() {
    let m = model("A100-40GB");
    let err = |spec: &str| parse_spec(m, spec).unwrap_err();
    assert_eq!(err(""), GeometryError::EmptySpec);
    assert_eq!(err(" , "), GeometryError::EmptySpec);
    let e = err("3g.20gb@4,,1g.5gb").to_string();
    assert!(e.contains("\"\"") && e.contains("empty entry"), "{e}");
    let e = err("3g.20gb@").to_string();
    assert!(e.contains("\"3g.20gb@\"") && e.contains("missing start"), "{e}");
    let e = err("3g.20gb@four").to_string();
    assert!(e.contains("\"four\""), "{e}");
    let e = err("3g.20gb@300").to_string();
    assert!(e.contains("\"300\""), "{e}");
    let e = err("@4").to_string();
    assert!(e.contains("missing profile name"), "{e}");
    let e = err("3x3g.20gb@4").to_string();
    assert!(e.contains("repeat count"), "{e}");
    let e = err("0x1g.5gb").to_string();
    assert!(e.contains("1..=64"), "{e}");
    let e = err("x1g.5gb").to_string();
    assert!(e.contains("x1g.5gb"), "{e}");
    match err("1g.5gb,4g.40gb@0") {
        GeometryError::UnknownProfile { value, token, known, model } => {
            assert_eq!(
                (value.as_str(), token.as_str(), model.as_str()),
                ("4g.40gb", "4g.40gb@0", "A100-40GB")
            );
            assert!(known.contains("4g.20gb"), "{known}");
        }
        other => panic!("expected UnknownProfile, got {other:?}"),
    }
}

#[test]
fn every_rule_violation_names_profile_start_and_limit() {
    let m = model("A100-40GB");
    let v = |spec: &str| validate(m, &parse_spec(m, spec).unwrap().fixed()).unwrap_err().to_string();
    let e = v("2g.10gb@6");
    assert!(e.contains("2g.10gb@6") && e.contains("[0, 2, 4]"), "{e}");
    let e = v("2g.10gb@0,1g.5gb@1");
    assert!(e.contains("2g.10gb@0") && e.contains("1g.5gb@1") && e.contains("[1]"), "{e}");
    let e = v("1g.10gb@0,1g.10gb@2,1g.10gb@4,1g.10gb@6,1g.10gb@6");
    assert!(e.contains("overlap"), "{e}");
    let e = v("1g.5gb+me@0,1g.5gb+me@1");
    assert!(e.contains("1g.5gb+me") && e.contains("at most 1"), "{e}");
    let h = model("A30");
    let e = validate(h, &parse_spec(h, "1g.6gb+me@0,2g.12gb+me@2").unwrap().fixed()).unwrap_err().to_string();
    assert!(e.contains("1g.6gb+me") && e.contains("2g.12gb+me"), "{e}");
}

#[test]
fn maximal_extensions_of_a_busy_gpu() {
    let m = model("A100-40GB");
    let fixed = parse_spec(m, "3g.20gb@4").unwrap().fixed();
    let ext = maximal_extensions(m, &fixed, &m.standard_profiles());
    assert!(!ext.is_empty());
    for g in &ext {
        assert!(g.contains(&fixed.instances()[0]));
        assert_eq!(validate(m, g), Ok(()));
    }
    let shown: Vec<String> = ext.iter().map(|g| g.display(m)).collect();
    assert!(shown.contains(&"4g.20gb@0,3g.20gb@4".to_string()), "{shown:?}");
    assert!(shown.contains(&"3g.20gb@0,3g.20gb@4".to_string()), "{shown:?}");
    // Nothing to add: the answer is the fixed geometry itself.
    let full = parse_spec(m, "7g.40gb@0").unwrap().fixed();
    assert_eq!(maximal_extensions(m, &full, &m.standard_profiles()), vec![full.clone()]);
    // An invalid fixed part has no extension.
    let bad = parse_spec(m, "3g.20gb@2").unwrap().fixed();
    assert!(maximal_extensions(m, &bad, &m.standard_profiles()).is_empty());
    // Asked twice (memoized), the answer is the same.
    assert_eq!(maximal_extensions(m, &fixed, &m.standard_profiles()), ext);
}

#[test]
fn diff_keeps_what_stays_and_creates_largest_first() {
    let m = model("A100-40GB");
    let g = |s: &str| parse_spec(m, s).unwrap().fixed();
    let d = diff(&g("3g.20gb@4,1g.5gb@0,1g.5gb@1"), &g("3g.20gb@4,2g.10gb@0,1g.5gb@2,1g.5gb@3"), m);
    assert_eq!(d.keep, g("3g.20gb@4").instances());
    assert_eq!(d.destroy, g("1g.5gb@0,1g.5gb@1").instances());
    let created: Vec<String> = d.create.iter().map(|p| m.profile_info(p.profile).name.clone()).collect();
    assert_eq!(created, ["2g.10gb", "1g.5gb", "1g.5gb"]);
    assert!(diff(&g("7g.40gb@0"), &g("7g.40gb@0"), m).is_empty());
}
