//! Plan quality, planning time and peak memory per benchmark size: ILP against greedy on demand
//! met and GPUs changed, the gap to the LP bound, median planning time over repeated runs, and
//! the peak RSS (VmHWM) of a process that only builds the cluster and plans it.
//!
//! `cargo bench -p geometer-solver --bench planner_report` prints a Markdown table. Each row
//! runs in a child process of this binary so that peak memory is per row. Environment:
//! `PLANNER_REPORT_REPS` (plans per row, default 5; the time is their median),
//! `PLANNER_REPORT_PLANNERS` (default `ilp,greedy`).
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod common;
#[path = "../../benches/support/proc_memory.rs"]
mod proc_memory;
#[path = "../../benches/support/report.rs"]
mod report;

use std::process::Command;
use std::time::Instant;

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::{Plan, PlanOptions, SliceSource};

/// Plans one cluster `reps` times and prints one `RESULT` line (fields in `COLUMNS` order).
fn child(scenario: &str, gpus: usize, pods: usize, planner: &str, evict: bool, reps: usize) {
    let mut snapshot = match scenario {
        "90%-busy" => common::cluster_with(gpus, pods, 7, common::BUSY_SHARE),
        _ => common::cluster(gpus, pods, 7),
    };
    if evict {
        snapshot = common::with_eviction(snapshot);
    }
    let catalog = Catalog::builtin();
    let options = PlanOptions::default();
    let mut times = Vec::with_capacity(reps);
    let mut last = None;
    let mut last_complete: Option<Plan> = None;
    for _ in 0..reps.max(1) {
        let started = Instant::now();
        let plan = match planner {
            "greedy" => geometer_solver::greedy::plan(&snapshot, catalog, &options),
            _ => geometer_solver::plan(&snapshot, catalog, &options),
        }
        .unwrap();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        let mut same = plan.clone();
        same.solve_ms = 0;
        // A plan cut short by the time limit depends on how far the solver got: only the others
        // must repeat, each as the last one that was not cut short.
        let timed_out = same.notes.iter().any(|n| n.contains("time limit"));
        if !timed_out {
            if let Some(previous) = &last_complete {
                assert_eq!(previous, &same, "same input, same plan");
            }
            last_complete = Some(same.clone());
        }
        last = Some(same);
    }
    let plan = last.unwrap();
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    for note in &plan.notes {
        eprintln!("note: {note}");
    }
    let existing = plan.pods.iter().filter(|p| p.placement == SliceSource::ExistingSlices).count();
    let o = &plan.objective;
    println!(
        "RESULT {median:.1} {:.1} {} {} {existing} {} {} {:.1} {:.2}% {:.1} {:?}",
        times[0],
        o.demand_met,
        o.pods_met as usize - existing,
        o.gpus_changed,
        o.evictions,
        plan.bound,
        plan.gap * 100.0,
        proc_memory::own_peak(),
        plan.solver
    );
}

const COLUMNS: &str = "median ms | min ms | demand met | pods on new slices | pods on existing slices | GPUs changed | evictions | LP bound | gap to bound | peak RSS MiB | solver";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = std::env::var("PLANNER_REPORT_REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        let a = &args[pos + 1..];
        child(&a[0], a[1].parse().unwrap(), a[2].parse().unwrap(), &a[3], a[4] == "evict", reps);
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    // Cargo passes `--bench` only under `cargo bench`; `cargo test --all-targets` runs this as a
    // smoke test: the small sizes, one plan each.
    let smoke = !args.iter().any(|a| a == "--bench");
    let me = std::env::current_exe().unwrap();
    let columns = COLUMNS.split(" | ").count();
    let mut table = report::Report::new(
        "planner_report",
        "cargo bench -p geometer-solver --bench planner_report",
        format!("synthetic clusters (seed 7), half-busy and 90%-busy, up to 520,000 GPUs, eviction off and allowed; median of {reps} plans per row, each row in its own process"),
    );
    table.line(format!("| scenario | GPUs | pending pods | eviction | planner | {COLUMNS} |"));
    table.line(format!("|---|---:|---:|---|---|{}", "---:|".repeat(columns - 1) + "---|"));
    // `PLANNER_REPORT_PLANNERS=greedy` reruns one planner's rows only.
    let planners: Vec<String> = std::env::var("PLANNER_REPORT_PLANNERS")
        .unwrap_or_else(|_| "ilp,greedy".into())
        .split(',')
        .map(str::to_string)
        .collect();
    let mut runs: Vec<(&str, usize, usize)> =
        common::SIZES.iter().map(|&(g, p)| ("half-busy", g, p)).collect();
    runs.extend(common::BUSY_SIZES.iter().map(|&(g, p)| ("90%-busy", g, p)));
    if smoke {
        runs.retain(|&(_, gpus, _)| gpus <= 100);
    } else {
        runs.extend(common::LARGE_SIZES.iter().map(|&(g, p)| ("half-busy", g, p)));
    }
    for (scenario, gpus, pods) in runs {
        for evict in [false, true] {
            for planner in planners.iter().map(String::as_str) {
                let mode = if evict { "evict" } else { "keep" };
                let out = Command::new(&me)
                    .args(["--child", scenario, &gpus.to_string(), &pods.to_string(), planner, mode])
                    .env("PLANNER_REPORT_REPS", if smoke { "1".to_string() } else { reps.to_string() })
                    .output()
                    .expect("child runs");
                let text = String::from_utf8_lossy(&out.stdout);
                let head = format!(
                    "| {scenario} | {gpus} | {pods} | {} | {planner} |",
                    if evict { "allowed" } else { "off" }
                );
                match text.lines().find_map(|l| l.strip_prefix("RESULT ")) {
                    Some(line) => {
                        table.line(format!("{head} {} |", line.split(' ').collect::<Vec<_>>().join(" | ")))
                    }
                    None => table.line(format!(
                        "{head} failed: {} |",
                        String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("no output")
                    )),
                }
            }
        }
    }
    table.write();
}
