//! Properties of the geometry functions over every built-in model: whatever the search returns
//! validates, `validate` agrees with the search's own rules, diffs apply exactly, parsers never
//! panic.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashSet;

use geometer_solver::catalog::{Catalog, GpuModel, ProfileId, WHOLE};
use geometer_solver::geometry::{
    diff, enumerate, maximal_extensions, parse_spec, place, validate, Geometry, GeometryError, Placed,
};
use proptest::prelude::*;

fn models() -> &'static [GpuModel] {
    Catalog::builtin().models()
}

fn any_model() -> impl Strategy<Value = &'static GpuModel> {
    (0..models().len()).prop_map(|i| &models()[i])
}

/// Every valid geometry of a model over all its profiles (small: a few thousand at most).
fn all_valid(m: &GpuModel) -> Vec<Geometry> {
    enumerate(m, &m.all_profiles(), false)
}

fn can_extend(m: &GpuModel, g: &Geometry, allowed: &[ProfileId]) -> bool {
    allowed
        .iter()
        .any(|&p| m.profile_info(p).starts.iter().any(|&s| validate(m, &g.with(Placed::new(p, s))).is_ok()))
}

/// A model, a subset of its profiles (as a bitmask choice), and a seed for picking geometries.
fn model_profiles_seed() -> impl Strategy<Value = (&'static GpuModel, Vec<ProfileId>, u64)> {
    (any_model(), any::<u64>(), any::<u64>()).prop_map(|(m, mask, seed)| {
        let mut allowed: Vec<ProfileId> = m.mig_profiles().filter(|&p| mask & (1 << p) != 0).collect();
        if allowed.is_empty() {
            allowed = m.standard_profiles();
        }
        (m, allowed, seed)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn parse_spec_never_panics(i in 0..13usize, spec in ".{0,40}") {
        let m = &models()[i % models().len()];
        let _ = parse_spec(m, &spec);
    }

    #[test]
    fn parse_spec_never_panics_on_spec_like_text(
        i in 0..13usize,
        spec in "([0-9x*]{0,3}[0-9]g\\.[0-9]{1,3}gb(\\+me|\\+me\\.all|-me|\\+gfx)?(@[0-9]{0,4})?,?){0,6}",
    ) {
        let m = &models()[i % models().len()];
        if let Ok(parsed) = parse_spec(m, &spec) {
            // Whatever parses resolves to a valid geometry or says why not, without panicking.
            if let Ok(g) = parsed.resolve(m) {
                prop_assert_eq!(validate(m, &g), Ok(()));
            }
        }
    }

    #[test]
    fn enumerated_geometries_validate_and_maximal_ones_are_maximal((m, allowed, _) in model_profiles_seed()) {
        let maximal = enumerate(m, &allowed, true);
        prop_assert!(!maximal.is_empty());
        for g in &maximal {
            prop_assert_eq!(validate(m, g), Ok(()), "{}", g.display(m));
            prop_assert!(!can_extend(m, g, &allowed), "{} can grow", g.display(m));
        }
        let valid = enumerate(m, &allowed, false);
        let set: HashSet<&Geometry> = valid.iter().collect();
        prop_assert_eq!(set.len(), valid.len());
        for g in &maximal {
            prop_assert!(set.contains(g));
        }
    }

    #[test]
    fn validate_agrees_with_the_search(
        m in any_model(),
        picks in proptest::collection::vec((any::<usize>(), any::<usize>()), 0..6),
    ) {
        // Random MIG instances at legal starts: valid exactly when the search also finds them.
        // (The search is over MIG geometries; the whole GPU is the one-instance geometry below.)
        let mig = m.all_profiles();
        let instances: Vec<Placed> = picks
            .iter()
            .map(|&(p, s)| {
                let p = mig[p % mig.len()];
                let starts = &m.profile_info(p).starts;
                Placed::new(p, starts[s % starts.len()])
            })
            .collect();
        let g = Geometry::new(instances);
        let found = all_valid(m).contains(&g);
        prop_assert_eq!(validate(m, &g).is_ok(), found, "{}", g.display(m));
        // The whole GPU is valid alone and with no MIG instance beside it.
        prop_assert_eq!(validate(m, &Geometry::whole(m)), Ok(()));
        if let Some(&p) = g.instances().first() {
            let mixed = Geometry::whole(m).with(p);
            // MIG mode off is the whole GPU: any instance beside it overlaps it.
            let overlaps = matches!(validate(m, &mixed),
                Err(GeometryError::Overlap { ref first, ref second, .. }) if first == WHOLE || second == WHOLE);
            prop_assert!(overlaps, "{}: {:?}", mixed.display(m), validate(m, &mixed));
        }
    }

    #[test]
    fn maximal_extensions_keep_fixed_and_are_maximal((m, allowed, seed) in model_profiles_seed()) {
        let valid = all_valid(m);
        let fixed = &valid[(seed as usize) % valid.len()];
        let extensions = maximal_extensions(m, fixed, &allowed);
        prop_assert!(!extensions.is_empty(), "a valid fixed part always has an extension");
        for g in &extensions {
            prop_assert_eq!(validate(m, g), Ok(()));
            for p in fixed.instances() {
                prop_assert!(g.contains(p), "{} lost {:?}", g.display(m), p);
            }
            prop_assert!(!can_extend(m, g, &allowed), "{} can grow", g.display(m));
        }
        // Exactly the maximal valid supersets that add only allowed profiles.
        let expected: Vec<&Geometry> = valid
            .iter()
            .filter(|g| fixed.instances().iter().all(|p| g.contains(p)))
            .filter(|g| diff(fixed, g, m).create.iter().all(|p| allowed.contains(&p.profile)))
            .filter(|g| !can_extend(m, g, &allowed))
            .collect();
        prop_assert_eq!(extensions.iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn place_returns_valid_supersets((m, allowed, seed) in model_profiles_seed(), n in 0..5usize) {
        let valid = all_valid(m);
        let fixed = &valid[(seed as usize) % valid.len()];
        let add: Vec<ProfileId> = (0..n).map(|i| allowed[(seed as usize / 7 + i) % allowed.len()]).collect();
        match place(m, fixed, &add) {
            Ok(g) => {
                prop_assert_eq!(validate(m, &g), Ok(()));
                prop_assert_eq!(g.len(), fixed.len() + add.len());
                let d = diff(fixed, &g, m);
                prop_assert!(d.destroy.is_empty());
                let mut created: Vec<ProfileId> = d.create.iter().map(|p| p.profile).collect();
                let mut wanted = add.clone();
                created.sort();
                wanted.sort();
                prop_assert_eq!(created, wanted);
            }
            Err(_) => {
                // No placement exists: no valid geometry holds fixed plus these profiles.
                let exists = valid.iter().any(|g| {
                    let d = diff(fixed, g, m);
                    let mut created: Vec<ProfileId> = d.create.iter().map(|p| p.profile).collect();
                    let mut wanted = add.clone();
                    created.sort();
                    wanted.sort();
                    d.destroy.is_empty() && created == wanted
                });
                prop_assert!(!exists);
            }
        }
    }

    #[test]
    fn diff_applies_exactly_and_never_destroys_what_stays(m in any_model(), a in any::<usize>(), b in any::<usize>()) {
        let valid = all_valid(m);
        let from = &valid[a % valid.len()];
        let to = &valid[b % valid.len()];
        let d = diff(from, to, m);
        prop_assert_eq!(&d.apply(from), to);
        for k in &d.keep {
            prop_assert!(!d.destroy.contains(k));
            prop_assert!(from.contains(k) && to.contains(k));
        }
        for p in from.instances() {
            if to.contains(p) {
                prop_assert!(d.keep.contains(p));
            }
        }
        let sizes: Vec<u8> = d.create.iter().map(|p| m.profile_info(p.profile).size).collect();
        prop_assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "largest first: {:?}", sizes);
    }
}
