//! Geometry search costs the planner pays per GPU class: enumerating maximal geometries (the
//! search behind `maximal_extensions`), a memoized `maximal_extensions` hit, placing a multiset,
//! validating. Run: `cargo bench -p geometer-solver --bench geometry_search`; under `cargo bench`
//! it writes its table for BENCHMARKS.md (see `report`).
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

#[path = "../../benches/support/report.rs"]
mod report;

use criterion::Criterion;
use geometer_solver::catalog::Catalog;
use geometer_solver::geometry::{
    enumerate, maximal_extensions_cached, parse_spec, place, validate, Geometry, GeometryCache,
};
use std::hint::black_box;

/// Runs every benchmark; returns what each one's answer was, by benchmark id.
fn search(c: &mut Criterion) -> Vec<(String, String)> {
    let mut answers = Vec::new();
    let catalog = Catalog::builtin();
    for (key, all) in
        [("A100-40GB", false), ("H100-80GB", false), ("H100-80GB", true), ("RTX-PRO-6000", true)]
    {
        let m = catalog.find(key).unwrap();
        let allowed = if all { m.all_profiles() } else { m.standard_profiles() };
        let label = if all { "all" } else { "standard" };
        let count = format!("{} geometries", enumerate(m, &allowed, true).len());
        answers.push((format!("enumerate_maximal/{key}/{label}"), count.clone()));
        answers.push((format!("maximal_extensions_memo_hit/{key}/{label}"), count));
        c.bench_function(&format!("enumerate_maximal/{key}/{label}"), |b| {
            b.iter(|| enumerate(black_box(m), black_box(&allowed), true))
        });
        let fixed = parse_spec(m, &format!("{}@0", m.profile_info(allowed[0]).name)).unwrap().fixed();
        // A planner's cache, warmed by the first question: the rest are hits.
        let cache = GeometryCache::new();
        c.bench_function(&format!("maximal_extensions_memo_hit/{key}/{label}"), |b| {
            b.iter(|| maximal_extensions_cached(black_box(m), black_box(&fixed), black_box(&allowed), &cache))
        });
    }
    let a100 = catalog.find("A100-40GB").unwrap();
    let add = parse_spec(a100, "3g.20gb,2g.10gb,1g.5gb,1g.5gb").unwrap().unplaced();
    let placed =
        place(a100, &Geometry::empty(), &add).map_or("no placement".into(), |_| "placed".to_string());
    answers.push(("place/A100-40GB/3g+2g+1g+1g".into(), placed));
    c.bench_function("place/A100-40GB/3g+2g+1g+1g", |b| {
        b.iter(|| place(black_box(a100), black_box(&Geometry::empty()), black_box(&add)))
    });
    let g = parse_spec(a100, "3g.20gb@4,2g.10gb@0,1g.5gb@2,1g.5gb@3").unwrap().fixed();
    answers.push((
        "validate/A100-40GB/4 instances".into(),
        validate(a100, &g).map_or_else(|e| e.to_string(), |()| "valid".into()),
    ));
    c.bench_function("validate/A100-40GB/4 instances", |b| {
        b.iter(|| validate(black_box(a100), black_box(&g)))
    });
    answers
}

fn main() {
    let dir = report::target_dir().join("criterion/geometry_search");
    let mut criterion = Criterion::default().output_directory(&dir).configure_from_args();
    let answers = search(&mut criterion);
    criterion.final_summary();
    let mut table = report::Report::new(
        "geometry_search",
        "cargo bench -p geometer-solver --bench geometry_search",
        "the built-in catalog; criterion's default sampling",
    );
    table.line("| benchmark | answer | median |");
    table.line("|---|---|---:|");
    let medians = report::criterion_medians(&dir);
    for (id, answer) in answers {
        let median =
            medians.iter().find(|(m, _)| *m == id).map_or("not run".into(), |(_, ns)| report::human_ns(*ns));
        table.line(format!("| {id} | {answer} | {median} |"));
    }
    table.write();
}
