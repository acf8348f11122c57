//! Planning time: ILP and greedy on synthetic clusters (see `common`), with eviction off and
//! allowed. Numbers go to BENCHMARKS.md; `planner_report` adds peak memory and plan quality.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use geometer_solver::catalog::Catalog;
use geometer_solver::plan::PlanOptions;

fn planning(c: &mut Criterion) {
    let catalog = Catalog::builtin();
    let options = PlanOptions::default();
    let mut group = c.benchmark_group("plan");
    group.sample_size(10);
    for (gpus, pods) in common::SIZES {
        let keep = common::cluster(gpus, pods, 7);
        let evict = common::with_eviction(keep.clone());
        let id = format!("{gpus}gpus-{pods}pods");
        group.bench_with_input(BenchmarkId::new("ilp", &id), &keep, |b, s| {
            b.iter(|| geometer_solver::plan(s, catalog, &options).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("ilp-eviction", &id), &evict, |b, s| {
            b.iter(|| geometer_solver::plan(s, catalog, &options).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("greedy", &id), &keep, |b, s| {
            b.iter(|| geometer_solver::greedy::plan(s, catalog, &options).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, planning);
criterion_main!(benches);
