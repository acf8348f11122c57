//! Plan quality and peak memory per benchmark size: ILP against greedy on demand met and GPUs
//! changed, the gap to the LP bound, solve time, and peak RSS (VmHWM) of a process that only
//! builds the cluster and plans it once.
//!
//! `cargo bench -p geometer-solver --bench planner_report` prints a Markdown table. Each size
//! runs in a child process of this binary so that peak memory is per size.

mod common;

use std::process::Command;
use std::time::Instant;

use geometer_solver::catalog::Catalog;
use geometer_solver::plan::PlanOptions;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn child(gpus: usize, pods: usize, planner: &str, evict: bool) {
    let mut snapshot = common::cluster(gpus, pods, 7);
    if evict {
        snapshot = common::with_eviction(snapshot);
    }
    let catalog = Catalog::builtin();
    let options = PlanOptions::default();
    let started = Instant::now();
    let plan = match planner {
        "greedy" => geometer_solver::greedy::plan(&snapshot, catalog, &options),
        _ => geometer_solver::plan(&snapshot, catalog, &options),
    }
    .unwrap();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let o = &plan.objective;
    println!(
        "RESULT {ms:.1} {} {} {} {} {:.1} {:.4} {:.1} {:?}",
        o.demand_met,
        o.pods_met,
        o.gpus_changed,
        o.evictions,
        plan.bound,
        plan.gap,
        peak_rss_mib(),
        plan.solver
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        let gpus = args[pos + 1].parse().unwrap();
        let pods = args[pos + 2].parse().unwrap();
        child(gpus, pods, &args[pos + 3], args[pos + 4] == "evict");
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let me = std::env::current_exe().unwrap();
    println!("| GPUs | pods | eviction | planner | time ms | demand met | pods met | GPUs changed | evictions | LP bound | gap | peak RSS MiB | solver |");
    println!("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut runs: Vec<(usize, usize, bool)> = common::SIZES.iter().map(|&(g, p)| (g, p, false)).collect();
    runs.push((1000, 1000, true));
    runs.push((8000, 5000, true));
    for (gpus, pods, evict) in runs {
        for planner in ["ilp", "greedy"] {
            let out = Command::new(&me)
                .args(["--child", &gpus.to_string(), &pods.to_string(), planner, if evict { "evict" } else { "keep" }])
                .output()
                .expect("child runs");
            let text = String::from_utf8_lossy(&out.stdout);
            let Some(line) = text.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
                println!("| {gpus} | {pods} | {evict} | {planner} | failed: {} |", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or(""));
                continue;
            };
            let f: Vec<&str> = line.split(' ').collect();
            println!(
                "| {gpus} | {pods} | {} | {planner} | {} | {} | {} | {} | {} | {} | {:.2}% | {} | {} |",
                if evict { "allowed" } else { "off" },
                f[0],
                f[1],
                f[2],
                f[3],
                f[4],
                f[5],
                f[6].parse::<f64>().unwrap_or(f64::NAN) * 100.0,
                f[7],
                f[8]
            );
        }
    }
}
