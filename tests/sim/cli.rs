//! `geometer simulate` end to end: generated trace in, table and files out, exit codes.

use std::process::Command;

fn geometer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_geometer"))
}

fn generated_trace(dir: &std::path::Path, pods: usize) -> std::path::PathBuf {
    let out = geometer().args(["simulate", "--generate", &pods.to_string(), "--seed", "3"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = dir.join("trace.csv");
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

#[test]
fn writes_table_csv_and_chart() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generated_trace(dir.path(), 60);
    let out_dir = dir.path().join("out");
    let out = geometer()
        .args(["simulate", "--trace"])
        .arg(&trace)
        .args([
            "--cluster",
            "1xA100-80GB:4,1xH100-80GB:4",
            "--strategy",
            "whole-gpu",
            "--strategy",
            "static:all-balanced",
            "-o",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("| whole-gpu | "), "{stdout}");
    assert!(stdout.contains("| static:all-balanced | "), "{stdout}");
    let summary = std::fs::read_to_string(out_dir.join("summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), 3, "{summary}");
    let series = std::fs::read_to_string(out_dir.join("timeseries.csv")).unwrap();
    // 200 buckets per strategy plus the header.
    assert_eq!(series.lines().count(), 401);
    let svg = std::fs::read_to_string(out_dir.join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 6, "two strategies in three line panels");
}

#[test]
fn same_seed_same_output() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generated_trace(dir.path(), 80);
    let run = || {
        let out = geometer()
            .args(["simulate", "--trace"])
            .arg(&trace)
            .args([
                "--cluster",
                "2xA100-80GB:2",
                "--load",
                "1.3",
                "--seed",
                "9",
                "--strategy",
                "whole-gpu,static:all-1g",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // Drop the wall-time notes, the only lines allowed to differ.
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.contains("wall time"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(run(), run());
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generated_trace(dir.path(), 10);
    let cases: [(&[&str], &str); 4] = [
        (&["--cluster", "2xA100-80GB"], "GPUS"),
        (&["--cluster", "2xT9:8"], "\"T9\""),
        (&["--cluster", "2xA100-80GB:8", "--strategy", "magic"], "\"magic\""),
        (&["--cluster", "2xA100-80GB:8", "--mapping", "share"], "\"share\""),
    ];
    for (args, expected) in cases {
        let out = geometer().args(["simulate", "--trace"]).arg(&trace).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "name,arrival_s,mig\na,soon,1g.10gb\n").unwrap();
    let out =
        geometer().args(["simulate", "--cluster", "1xA100-80GB:8", "--trace"]).arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"arrival_s\"") && stderr.contains("\"soon\""), "{stderr}");
}

#[test]
fn a_trace_naming_what_the_cluster_lacks_is_replayed_with_a_note_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("lacks.yaml");
    let pods = "pods:\n\
        - {name: fits, arrival_s: 0, duration_s: 60, mig: {1g.10gb: 1}}\n\
        - {name: typo, arrival_s: 1, duration_s: 60, mig: {1g.10gb: 1}, gpu_models: [X100-80GB]}\n\
        - {name: elsewhere, arrival_s: 1, duration_s: 60, mig: {1g.10gb: 1}, gpu_models: [A100-40GB]}\n\
        - {name: pinned, arrival_s: 2, duration_s: 60, mig: {1g.10gb: 1}, nodes: [gpu-node-7]}\n";
    std::fs::write(&trace, pods).unwrap();
    let out = geometer()
        .args([
            "simulate",
            "--cluster",
            "2xH100-80GB:8",
            "--strategy",
            "greedy",
            "--strategy",
            "geometer",
            "--trace",
        ])
        .arg(&trace)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    for strategy in ["greedy", "geometer"] {
        assert_eq!(served(&stdout, strategy), 1, "{stdout}");
    }
    assert!(
        stdout.contains("2 pods name GPU models outside the cluster, e.g. pod \"typo\": model \"X100-80GB\" (not in the catalog"),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 pods name nodes outside the cluster, e.g. pod \"pinned\": node \"gpu-node-7\""),
        "{stdout}"
    );
}

/// Column 2 (pods served) of the table row whose first cell is `name`.
fn served(stdout: &str, name: &str) -> usize {
    let row =
        stdout.lines().find(|l| l.starts_with(&format!("| {name} |"))).unwrap_or_else(|| panic!("{stdout}"));
    row.split('|').nth(2).unwrap().trim().parse().unwrap()
}

#[test]
fn the_table_ends_with_a_bound_no_strategy_passes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generated_trace(dir.path(), 200);
    let out = geometer()
        .args(["simulate", "--trace"])
        .arg(&trace)
        .args(["--cluster", "1xA100-80GB:4,1xH100-80GB:4", "--load", "1.3", "--seed", "5"])
        .args(["--strategy", "whole-gpu", "--strategy", "greedy", "--strategy", "geometer"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bound = served(&stdout, "upper bound (capacity)");
    let submitted: usize = stdout
        .lines()
        .find_map(|l| l.split(" of ").next()?.strip_prefix("- load mode (seed 5): ")?.parse().ok())
        .unwrap_or_else(|| panic!("no load-mode line: {stdout}"));
    // At 130% of capacity, not every submitted pod can fit.
    assert!(bound < submitted, "bound {bound} of {submitted} submitted\n{stdout}");
    for strategy in ["whole-gpu", "greedy", "geometer"] {
        assert!(served(&stdout, strategy) <= bound, "{strategy} beats the bound\n{stdout}");
    }
    assert!(served(&stdout, "geometer") > 0, "{stdout}");
    // Waits compared with greedy's on the pods both served: "this / greedy", none for greedy.
    let shared = "wait p95 on the pods greedy also served (s), this / greedy";
    assert_eq!(cell(&stdout, "greedy", shared), "-", "{stdout}");
    for strategy in ["whole-gpu", "geometer"] {
        let pair = cell(&stdout, strategy, shared);
        let seconds: Vec<f64> = pair.split(" / ").map(|x| x.parse().unwrap()).collect();
        assert_eq!(seconds.len(), 2, "{strategy}: {pair}\n{stdout}");
    }
}

/// The cell of `column` in the row whose first cell is `name`.
fn cell(stdout: &str, name: &str, column: &str) -> String {
    let header: Vec<&str> =
        stdout.lines().find(|l| l.starts_with("| strategy |")).unwrap().split('|').collect();
    let at = header.iter().position(|c| c.trim() == column).unwrap_or_else(|| panic!("{column}: {stdout}"));
    let row =
        stdout.lines().find(|l| l.starts_with(&format!("| {name} |"))).unwrap_or_else(|| panic!("{stdout}"));
    row.split('|').nth(at).unwrap().trim().to_string()
}

#[test]
fn a_generated_trace_with_gangs_compares_gang_aware_and_unaware_planning() {
    let dir = tempfile::tempdir().unwrap();
    let out =
        geometer().args(["simulate", "--generate", "80", "--seed", "4", "--gangs", "0.5"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().ends_with(",gang,gang_min"), "{text}");
    let trace = dir.path().join("gangs.csv");
    std::fs::write(&trace, text.as_bytes()).unwrap();
    let out_dir = dir.path().join("out");
    let out = geometer()
        .args(["simulate", "--trace"])
        .arg(&trace)
        .args(["--cluster", "1xA100-80GB:2,1xH100-80GB:2", "--strategy", "geometer,geometer-no-gangs", "-o"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let idle = "memory slice-s held idle by waiting gang members";
    // No greedy in this run: nothing to compare waits with.
    assert_eq!(cell(&stdout, "geometer", "wait p95 on the pods greedy also served (s), this / greedy"), "-");
    assert_eq!(cell(&stdout, "geometer", idle), "0", "{stdout}");
    let started = cell(&stdout, "geometer", "gangs started / total");
    assert!(started.contains(" / "), "{stdout}");
    assert!(stdout.contains("Permit timeout 60 s"), "{stdout}");
    // Where the memory no pod held was while demand exceeded capacity, beside what was held.
    let held =
        cell(&stdout, "geometer", "memory slices allocated / usable by the pods, while demand > capacity");
    let out_of_play = cell(
        &stdout,
        "geometer",
        "memory no pod held while demand > capacity, on nodes reconfiguring / in their stabilisation window",
    );
    assert_ne!(held, "-", "demand exceeds 4 GPUs here: {stdout}");
    let shares: Vec<f64> =
        out_of_play.split(" / ").map(|p| p.trim_end_matches('%').parse().unwrap()).collect();
    assert_eq!(shares.len(), 2, "{out_of_play}");
    assert!(shares.iter().all(|p| (0.0..=100.0).contains(p)) && shares[0] > 0.0, "{stdout}");
    let csv = std::fs::read_to_string(out_dir.join("summary.csv")).unwrap();
    assert!(
        csv.lines().next().unwrap().ends_with(
            ",greedy_wait_p95_s_shared,memory_unheld_saturated_reconfiguring,memory_unheld_saturated_stabilising"
        ),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 3, "{csv}");
    // --gangs is a generator option.
    let out = geometer().args(["simulate", "--gangs", "0.5", "--trace"]).arg(&trace).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `--dynamic-mig` on one H100 after churn (1g.10gb pods left at placements 0, 1 and 5): a
/// 3g.40gb pod waits for ever with first-fit, and compaction serves it by moving one pod.
#[test]
fn dynamic_mig_compares_first_fit_with_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("churn.csv");
    std::fs::write(
        &trace,
        "name,arrival_s,duration_s,mig\na,0,,1g.10gb\nb,1,,1g.10gb\nc,2,60,1g.10gb\nd,3,60,1g.10gb\n\
         e,4,60,1g.10gb\nf,5,,1g.10gb\ntrain,100,600,3g.40gb\n",
    )
    .unwrap();
    let out = geometer()
        .args(["simulate", "--trace"])
        .arg(&trace)
        .args(["--cluster", "1xH100-80GB:1", "--dynamic-mig"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("| first-fit | 7 | 6 | "), "{stdout}");
    assert!(stdout.contains("| first-fit + compaction | 7 | 7 | "), "{stdout}");
    let refused = geometer()
        .args(["simulate", "--trace"])
        .arg(&trace)
        .args(["--cluster", "1xH100-80GB:1", "--dynamic-mig", "--strategy", "greedy"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "--dynamic-mig runs no strategy");
}
