//! `geometer plan --snapshot` at the size of large clusters: a kubectl-style List (GPU nodes
//! of eight H100s with the GPU Operator's labels, running and pending pods with requests,
//! tolerations and zone selectors; `geometer_testkit::kubectl_snapshot`) written as JSON and
//! as YAML, then planned by one child process per row, phase by phase as the CLI does it:
//! read, parse, snapshot, solve, render; and by `geometer plan --snapshot FILE -o json` itself
//! in another child (the CLI's code with the binary's allocator, its output thrown away): that
//! column is what a user waits for. Prints a Markdown table with each phase's time and each
//! child's peak RSS (VmHWM: the whole planning process, not the generator).
//!
//! The DRA row is the same cluster with NVIDIA's DRA driver in static MIG mode advertising the
//! GPU nodes (`kubectl_dra_list`): every pod asks through a ResourceClaim.
//!
//! Run: `cargo bench --bench plan_snapshot` (`cargo test --all-targets` runs the smallest row
//! once as a smoke test). Env `PLAN_SNAPSHOT_ROWS=1000x5000,5000x20000` picks the rows
//! (GPU nodes x pending pods; as many pods run as are pending); `PLAN_SNAPSHOT_DIR` keeps the
//! generated files.
#![allow(clippy::unwrap_used)] // benchmark code: a failed unwrap is a failed run

use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Parser;

use geometer_controller::adapter;
use geometer_solver::catalog::Catalog;
use geometer_solver::plan::PlanOptions;

#[path = "support/proc_memory.rs"]
mod proc_memory;
#[path = "support/report.rs"]
mod report;

/// The allocator `geometer plan` runs with (src/main.rs), so the phases are timed as it does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Plans `file` as `geometer plan --snapshot file -o json` does; prints one RESULT line.
fn child(file: &str) {
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    let start = Instant::now();
    // As `geometer plan` does: a JSON List is read while it is parsed (its read time is in
    // the parse column), YAML is read whole first.
    let streamed = adapter::json_list_from(std::fs::File::open(file).unwrap()).unwrap();
    let (read, parse, objects) = match streamed {
        Some(objects) => ("-".to_string(), ms(start), objects),
        None => {
            let text = std::fs::read_to_string(file).unwrap();
            let read = ms(start);
            let t = Instant::now();
            let objects = adapter::list_objects(&text).unwrap();
            drop(text);
            (format!("{read:.0}"), ms(t), objects)
        }
    };
    let t = Instant::now();
    let catalog = Catalog::builtin();
    let built = adapter::build_snapshot(&objects, catalog, None, jiff::Timestamp::now()).unwrap();
    drop(objects);
    let snapshot = ms(t);
    let t = Instant::now();
    let plan = geometer_solver::plan(&built.snapshot, catalog, &PlanOptions::default()).unwrap();
    let solve = ms(t);
    let t = Instant::now();
    let json = serde_json::to_string(&plan).unwrap();
    let table = plan.render_table_with(catalog);
    let render = ms(t);
    let total = ms(start);
    let placed = plan.pods.iter().filter(|p| p.node.is_some()).count();
    println!(
        "RESULT {read} {parse:.0} {snapshot:.0} {solve:.0} {render:.0} {total:.0} {:.0} {placed} {}",
        proc_memory::own_peak(),
        json.len() + table.len()
    );
}

/// Runs `geometer plan --snapshot file -o json` as the binary does; prints one CLI line (on
/// standard error: standard output is the plan).
fn cli(file: &str) {
    let start = Instant::now();
    let args = ["geometer", "plan", "--snapshot", file, "-o", "json"];
    let code = geometer::cli::run(geometer::cli::Cli::parse_from(args));
    assert_eq!(code, std::process::ExitCode::SUCCESS, "geometer plan --snapshot {file} failed");
    eprintln!("CLI {:.0} {:.0}", start.elapsed().as_secs_f64() * 1000.0, proc_memory::own_peak());
}

/// `geometer plan --snapshot path`, each run in a child process: the time (ms) and peak RSS
/// (MiB) of the median of `runs` runs by time (a shared machine's runs vary by a third).
fn time_cli(me: &std::path::Path, path: &str, runs: usize) -> (String, String) {
    let mut results: Vec<(f64, String)> = (0..runs)
        .map(|_| {
            let out = Command::new(me).args(["--cli", path]).stdout(Stdio::null()).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let Some(line) = stderr.lines().find_map(|l| l.strip_prefix("CLI ")) else {
                panic!("geometer plan failed: {stderr}");
            };
            let (ms, peak) = line.split_once(' ').unwrap();
            (ms.parse().unwrap(), peak.to_string())
        })
        .collect();
    results.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ms, peak) = results.swap_remove(runs / 2);
    (format!("{ms:.0}"), peak)
}

fn rows(smoke: bool) -> Vec<(usize, usize)> {
    if smoke {
        return vec![(50, 200)];
    }
    let spec = std::env::var("PLAN_SNAPSHOT_ROWS").unwrap_or_else(|_| "1000x5000,5000x20000".into());
    spec.split(',')
        .map(|r| {
            let (n, p) = r.split_once('x').expect("rows look like 1000x5000");
            (n.parse().unwrap(), p.parse().unwrap())
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        child(&args[pos + 1]);
        return;
    }
    if let Some(pos) = args.iter().position(|a| a == "--cli") {
        cli(&args[pos + 1]);
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    // Cargo passes `--bench` only under `cargo bench`.
    let smoke = !args.iter().any(|a| a == "--bench");
    let temp = tempfile::tempdir().unwrap();
    // `PLAN_SNAPSHOT_DIR` keeps the generated Lists there (to profile `geometer plan` on them).
    let dir =
        std::env::var("PLAN_SNAPSHOT_DIR").map(std::path::PathBuf::from).unwrap_or(temp.path().to_path_buf());
    let me = std::env::current_exe().unwrap();
    let sizes = rows(smoke);
    let load: Vec<String> = sizes
        .iter()
        .map(|(n, p)| format!("{n} nodes x 8 H100 with {p} pending and {p} running pods"))
        .collect();
    let mut table = report::Report::new(
        "plan_snapshot",
        "cargo bench --bench plan_snapshot",
        format!(
            "kubectl Lists in JSON and YAML of {}, and in JSON the same cluster with NVIDIA's DRA driver (static MIG) advertising every GPU node (a ResourceSlice per node, a ResourceClaim per pod from its namespace's template, allocated for the running ones); each row in its own process",
            load.join(", ")
        ),
    );
    table.line("| GPU nodes (x 8 H100) | pending pods | running pods | format | input MB | read ms | parse ms | snapshot ms | solve ms | render ms | total ms | peak RSS MiB | pods placed | `geometer plan` ms (median of 3) | its peak RSS MiB |");
    table.line("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (nodes, pending) in sizes {
        let list = geometer_testkit::kubectl_snapshot::kubectl_list(nodes, 1, pending, pending);
        let mut formats = vec![
            ("JSON", serde_json::to_string(&list).unwrap()),
            ("YAML", serde_saphyr::to_string(&list).unwrap()),
        ];
        drop(list);
        let dra = geometer_testkit::kubectl_snapshot::kubectl_dra_list(nodes, 1, pending, pending);
        formats.push(("JSON, DRA", serde_json::to_string(&dra).unwrap()));
        drop(dra);
        for (format, text) in formats {
            let path = dir.join(format!("cluster.{}", format.to_lowercase().replace(", ", "-")));
            std::fs::write(&path, &text).unwrap();
            let out = Command::new(&me).args(["--child", path.to_str().unwrap()]).output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
                panic!("child failed: {}", String::from_utf8_lossy(&out.stderr));
            };
            let f: Vec<&str> = line.split(' ').collect();
            let mb = text.len() as f64 / 1e6;
            let (cli_ms, cli_peak) = time_cli(&me, path.to_str().unwrap(), if smoke { 1 } else { 3 });
            table.line(format!(
                "| {nodes} | {pending} | {pending} | {format} | {mb:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {cli_ms} | {cli_peak} |",
                f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]
            ));
            assert!(f[7].parse::<usize>().unwrap() > 0, "no pending pod placed");
        }
    }
    table.write();
}
