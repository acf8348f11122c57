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
    table.line("| GPUs | pending pods | planner | median |");
    table.line("|---:|---:|---|---:|");
    // Ids look like `plan/ilp-eviction/1000gpus-500pods`: by size, then planner as run.
    let order = ["ilp", "ilp-eviction", "greedy"];
    let mut rows: Vec<(usize, usize, usize, String)> = report::criterion_medians(&dir)
        .into_iter()
        .filter_map(|(id, ns)| {
            let mut parts = id.split('/').skip(1);
            let planner = parts.next()?;
            let (gpus, pods) = parts.next()?.split_once("gpus-")?;
            let rank = order.iter().position(|o| *o == planner).unwrap_or(order.len());
            let row = format!(
                "| {gpus} | {} | {planner} | {} |",
                pods.trim_end_matches("pods"),
                report::human_ns(ns)
            );
            Some((gpus.parse().ok()?, pods.trim_end_matches("pods").parse().ok()?, rank, row))
        })
        .collect();
    rows.sort();
    for (_, _, _, row) in rows {
        table.line(row);
    }
    table.write();
}
