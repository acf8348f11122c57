//! Planning time: ILP and greedy on synthetic clusters (see `common`), with eviction off and
//! allowed. Under `cargo bench` it writes its table for BENCHMARKS.md (see `report`);
//! `planner_report` adds peak memory and plan quality.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod common;
#[path = "../../benches/support/report.rs"]
mod report;

use criterion::{BenchmarkId, Criterion};
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

fn main() {
    let dir = report::target_dir().join("criterion/planner");
    let mut criterion = Criterion::default().output_directory(&dir).configure_from_args();
    planning(&mut criterion);
    criterion.final_summary();
    let sizes: Vec<String> =
        common::SIZES.iter().map(|(g, p)| format!("{g} GPUs / {p} pending pods")).collect();
    let mut table = report::Report::new(
        "planner",
        "cargo bench -p geometer-solver --bench planner",
        format!("half-busy synthetic clusters (seed 7): {}; 10 samples each", sizes.join(", ")),
    );
    table.line("| cluster | planner | median |");
    table.line("|---|---|---:|");
    for (id, ns) in report::criterion_medians(&dir) {
        // `plan/ilp-eviction/1000gpus-500pods`
        let mut parts = id.split('/').skip(1);
        let (planner, size) = (parts.next().unwrap_or(&id), parts.next().unwrap_or(""));
        table.line(format!("| {size} | {planner} | {} |", report::human_ns(ns)));
    }
    table.write();
}
