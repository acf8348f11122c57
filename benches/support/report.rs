//! A benchmark's results table, printed as it is measured and, under `cargo bench`, written with
//! what was run, on which machine, when and at which commit to `target/bench-results/NAME.md`.
//! `scripts/bench-results.sh` (the last step of `make bench`) puts each file into BENCHMARKS.md
//! between `<!-- bench-results: NAME -->` and `<!-- /bench-results -->`, so no figure there is
//! copied by hand.
//!
//! Shared by the root benches and the solver's (`#[path]`), which have no crate in common.
#![allow(dead_code)] // each bench uses part of it

use std::path::PathBuf;
use std::process::Command;

pub(crate) struct Report {
    name: String,
    command: String,
    load: String,
    load_average: String,
    lines: Vec<String>,
}

impl Report {
    /// `command` reruns this benchmark; `load` says what it was given (sizes, seeds, trace).
    pub(crate) fn new(name: &str, command: &str, load: impl Into<String>) -> Self {
        Report {
            name: name.into(),
            command: command.into(),
            load: load.into(),
            load_average: load_average(),
            lines: Vec::new(),
        }
    }

    /// One line of the table (or of text after it): printed now, written by `write`.
    pub(crate) fn line(&mut self, line: impl Into<String>) {
        let line = line.into();
        println!("{line}");
        self.lines.push(line);
    }

    /// Writes the table under `cargo bench` (cargo passes `--bench`); a smoke run under
    /// `cargo test` measures too little to stand as a result and writes nothing.
    pub(crate) fn write(self) {
        if !std::env::args().any(|a| a == "--bench") {
            return;
        }
        let dir = target_dir().join("bench-results");
        std::fs::create_dir_all(&dir).expect("target/bench-results can be created");
        let path = dir.join(format!("{}.md", self.name));
        let text = format!(
            "Measured {} at commit `{}` on {} (load average {} at the start).\n\
             Command: `{}`. Load: {}.\n\n{}\n",
            today(),
            commit(),
            machine(),
            self.load_average,
            self.command,
            self.load,
            self.lines.join("\n")
        );
        std::fs::write(&path, text).expect("bench result can be written");
        eprintln!("wrote {}", path.display());
    }
}

/// The cargo target folder this bench binary was built into (`target/release/deps/NAME-HASH`).
pub(crate) fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.ancestors().nth(3).expect("bench binaries live in target/PROFILE/deps").to_path_buf()
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn today() -> String {
    run("date", &["-u", "+%Y-%m-%d"]).unwrap_or_else(|| "(date unknown)".into())
}

/// The short commit, with `+changes` when tracked files differ from it.
fn commit() -> String {
    let Some(head) = run("git", &["rev-parse", "--short=7", "HEAD"]) else {
        return "(not a git checkout)".into();
    };
    let dirty = run("git", &["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{head}+changes")
    } else {
        head
    }
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim()))
        .unwrap_or("an unknown CPU")
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    format!("{model}, {cores} cores, {gib:.0} GiB")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Criterion's median for every benchmark it ran into `dir`, by its full id, in id order.
pub(crate) fn criterion_medians(dir: &std::path::Path) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.ends_with("new/benchmark.json") {
                let read = |f: &str| -> Option<serde_json::Value> {
                    serde_json::from_str(&std::fs::read_to_string(p.with_file_name(f)).ok()?).ok()
                };
                let (Some(bench), Some(est)) = (read("benchmark.json"), read("estimates.json")) else {
                    continue;
                };
                let id = bench["full_id"].as_str().unwrap_or_default().to_string();
                let median_ns = est["median"]["point_estimate"].as_f64().unwrap_or(f64::NAN);
                found.push((id, median_ns));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// A duration in nanoseconds as a person reads it: `7.0 µs`, `143 µs`, `1.21 s`.
pub(crate) fn human_ns(ns: f64) -> String {
    let (value, unit) = match ns {
        n if n >= 1e9 => (n / 1e9, "s"),
        n if n >= 1e6 => (n / 1e6, "ms"),
        n if n >= 1e3 => (n / 1e3, "µs"),
        n => (n, "ns"),
    };
    if value >= 100.0 {
        format!("{value:.0} {unit}")
    } else if value >= 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.2} {unit}")
    }
}
