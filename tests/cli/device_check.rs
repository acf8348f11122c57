//! `scripts/device-check.sh`, the read-only device check, without a GPU: a fake `nvidia-smi`
//! on PATH that logs every argument list and answers like an H100, and a PATH without one.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// nvidia-smi arguments that change MIG mode or geometry or reset a GPU.
const MUTATING: &[&str] =
    &["-mig", "--multi-instance-gpu", "-cgi", "-dgi", "-cci", "-dci", "-r", "--gpu-reset"];

/// Every nvidia-smi argument list the script may pass (its header lists them).
const ALLOWED: &[&[&str]] = &[
    &["-L"],
    &[
        "--query-gpu=index,name,pci.device_id,memory.total,mig.mode.current,mig.mode.pending,driver_version",
        "--format=csv,noheader",
    ],
    &["mig", "-lgip"],
    &["mig", "-lgipp"],
    &["mig", "-lcip"],
    &["mig", "-lgi"],
    &["mig", "-lci"],
    &["-q", "-d", "MEMORY"],
    &["--query-gpu=index,persistence_mode", "--format=csv,noheader"],
];

const QUERY_KEY: &str = "nvidia-smi --query-gpu=index,name,pci.device_id,memory.total,mig.mode.current,\
                         mig.mode.pending,driver_version --format=csv,noheader";

/// Answers like one H100 80GB HBM3 in MIG mode with one 7g.80gb instance (driver 550.54.15,
/// the output shapes of its nvidia-smi); logs each call's arguments, tab-separated, to
/// `$FAKE_NVIDIA_SMI_LOG`. Anything else is an error, as the real one does.
const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
for a in "$@"; do printf '%s\t' "$a" >>"$FAKE_NVIDIA_SMI_LOG"; done
printf '\n' >>"$FAKE_NVIDIA_SMI_LOG"
case "$*" in
"-L")
  echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5fd4a4c2-7f1e-3b2a-9d1c-000000000000)"
  echo "  MIG 7g.80gb     Device  0: (UUID: MIG-0d5e1b7a-1c2d-5e6f-8a9b-000000000000)" ;;
"--query-gpu=index,name,pci.device_id,memory.total,mig.mode.current,mig.mode.pending,driver_version --format=csv,noheader")
  echo "0, NVIDIA H100 80GB HBM3, 0x233010DE, 81559 MiB, Enabled, Enabled, 550.54.15" ;;
"mig -lgip")
  cat <<'EOF'
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.10gb       19     0/7        9.75       No     16     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me    20     0/1        9.75       No     16     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.20gb       15     0/4        19.62      No     26     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 2g.20gb       14     0/3        19.62      No     32     2     0   |
|                                                             2     2     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 3g.40gb        9     0/2        39.50      No     60     3     0   |
|                                                             3     3     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 4g.40gb        5     0/1        39.50      No     64     4     0   |
|                                                             4     4     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.80gb        0     0/1        79.25      No     132    7     0   |
|                                                             8     7     1   |
+-----------------------------------------------------------------------------+
EOF
  ;;
"mig -lgipp")
  cat <<'EOF'
GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
GPU  0 Profile ID 14 Placements: {0,2,4}:2
GPU  0 Profile ID  9 Placements: {0,4}:4
GPU  0 Profile ID  5 Placement : {0}:4
GPU  0 Profile ID  0 Placement : {0}:8
EOF
  ;;
"mig -lgi")
  cat <<'EOF'
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 7g.80gb          0        0          0:8     |
+-------------------------------------------------------+
EOF
  ;;
"mig -lcip")
  echo "| GPU  GI  Compute instance profile 7g.80gb ID 4* (fake)" ;;
"mig -lci")
  echo "No compute instances found: Not Found"
  exit 6 ;;
"--query-gpu=index,persistence_mode --format=csv,noheader")
  echo "0, Enabled" ;;
"-q -d MEMORY")
  echo "==============NVSMI LOG=============="
  echo "Attached GPUs                             : 1"
  echo "GPU 00000000:1B:00.0"
  echo "    FB Memory Usage"
  echo "        Total                             : 81559 MiB"
  # Enough to be trimmed (the script keeps 32 KiB).
  i=0
  while [ $i -lt 2000 ]; do echo "        Padding line $i                    : 0 MiB"; i=$((i + 1)); done ;;
*)
  echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." >&2
  exit 2 ;;
esac
"#;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/device-check.sh")
}

/// The PATH of this process without any directory that holds an `nvidia-smi`.
fn path_without_nvidia_smi() -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> =
        std::env::split_paths(&path).filter(|d| !d.join("nvidia-smi").exists()).collect();
    std::env::join_paths(dirs).unwrap().into_string().unwrap()
}

fn device_check(path: &str, extra_env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .args(args)
        .env("PATH", path)
        .env("GEOMETER", env!("CARGO_BIN_EXE_geometer"))
        .env_remove("GEOMETER_LOG_JSON")
        .env_remove("DEVICE_CHECK_ASSEMBLER");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.output().expect("bash runs scripts/device-check.sh")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn read_report(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("report {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{text}"))
}

fn stdout_of<'r>(report: &'r Value, key: &str) -> &'r str {
    report["commands"][key]["stdout"].as_str().unwrap_or_else(|| panic!("{key} recorded: {report:#}"))
}

/// A temp dir with the fake nvidia-smi; returns (dir, PATH with it first, log file).
fn fake_gpu_machine() -> (tempfile::TempDir, String, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = bin.join("nvidia-smi");
    std::fs::write(&fake, FAKE_NVIDIA_SMI).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), path_without_nvidia_smi());
    let log = dir.path().join("nvidia-smi.log");
    (dir, path, log)
}

/// Every argument list the fake nvidia-smi was called with.
fn calls(log: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(|l| l.split('\t').filter(|a| !a.is_empty()).map(str::to_string).collect()).collect()
}

fn assert_read_only(log: &Path) {
    let calls = calls(log);
    assert!(!calls.is_empty(), "the script never called the fake nvidia-smi");
    for call in &calls {
        for arg in call {
            assert!(!MUTATING.contains(&arg.as_str()), "mutating nvidia-smi argument {arg:?} in {call:?}");
        }
        assert!(
            ALLOWED.iter().any(|a| a.iter().map(|s| s.to_string()).eq(call.iter().cloned())),
            "nvidia-smi {call:?} is not one of the read-only listings the script may run"
        );
    }
}

#[test]
fn fake_h100_is_recorded_and_nvidia_smi_only_lists() {
    let (dir, path, log) = fake_gpu_machine();
    let out = dir.path().join("r.json");
    let log_env = log.display().to_string();
    let o = device_check(&path, &[("FAKE_NVIDIA_SMI_LOG", &log_env)], &["--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = read_report(&out);

    assert_eq!(r["readOnly"], true);
    assert_eq!(r["nvidia"], true, "{r:#}");
    assert_eq!(r["nvidiaReason"], "nvidia-smi -L listed 1 GPU(s)");
    assert!(stdout_of(&r, "nvidia-smi -L").contains("NVIDIA H100 80GB HBM3"));
    assert!(stdout_of(&r, QUERY_KEY).contains("0x233010DE"));
    assert!(stdout_of(&r, "nvidia-smi mig -lgip").contains("MIG 1g.10gb+me    20"));
    assert!(stdout_of(&r, "nvidia-smi mig -lgipp").contains("Profile ID 19 Placements: {0,1,2,3,4,5,6}:1"));
    assert!(stdout_of(&r, "nvidia-smi mig -lgi").contains("MIG 7g.80gb"));
    // A failing listing is recorded with its exit code, not fatal.
    assert_eq!(r["commands"]["nvidia-smi mig -lci"]["exitCode"], 6);
    assert!(stdout_of(&r, "nvidia-smi mig -lci").contains("No compute instances found"));
    // -q -d MEMORY is trimmed.
    let mem = &r["commands"]["nvidia-smi -q -d MEMORY"];
    assert_eq!(mem["stdoutTruncated"], true, "{mem:#}");
    assert!(mem["stdoutBytes"].as_u64().unwrap() > 32768);
    assert_eq!(mem["stdout"].as_str().unwrap().len(), 32768);
    assert!(mem["stdout"].as_str().unwrap().contains("81559 MiB"));

    let gpu = &r["gpus"][0];
    assert_eq!(gpu["index"], 0);
    assert_eq!(gpu["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpu["pciDeviceId"], "0x233010DE");
    assert_eq!(gpu["migModeCurrent"], "Enabled");
    assert_eq!(gpu["driverVersion"], "550.54.15");

    // The probe ran; without libnvidia-ml it fails, and the report says so.
    let probe = &r["probe"];
    assert_eq!(probe["ran"], true, "{probe:#}");
    if probe["ok"] == true {
        assert!(probe["report"]["gpus"].is_array(), "{probe:#}");
    } else {
        assert_ne!(probe["exitCode"], 0, "{probe:#}");
        assert!(!probe["error"].as_str().unwrap_or_default().is_empty(), "{probe:#}");
    }
    assert_eq!(r["geometer"]["binary"], env!("CARGO_BIN_EXE_geometer"));
    assert_eq!(r["geometer"]["source"], "$GEOMETER");

    // Device-plugin names: the probe does not compute them; the catalog's record for the GPU
    // nvidia-smi reports is there for comparison.
    let names = &r["devicePluginNames"];
    assert_eq!(names["computed"], false, "{names:#}");
    assert!(names["reason"]
        .as_str()
        .unwrap()
        .contains("not computed: the probe gave no device-plugin names"));
    let catalog = &names["catalog"][0];
    assert_eq!(catalog["query"], "0x233010DE");
    assert_eq!(catalog["model"], "H100-80GB");
    assert!(
        catalog["profiles"].as_array().unwrap().iter().any(|p| p["resource"] == "nvidia.com/mig-1g.10gb"),
        "{catalog:#}"
    );

    // What a MIG change has to stop, read from /proc only.
    let persistence = "nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader";
    assert!(stdout_of(&r, persistence).contains("0, Enabled"));
    for key in
        ["open /dev/nvidia* handles (/proc/*/fd)", "MIG_STRATEGY of running processes (/proc/*/environ)"]
    {
        assert_eq!(r["commands"][key]["exitCode"], 0, "{key}: {:#}", r["commands"][key]);
    }

    assert_read_only(&log);
    let called: BTreeSet<Vec<String>> = calls(&log).into_iter().collect();
    assert_eq!(called.len(), ALLOWED.len(), "every listing ran once: {called:?}");
}

#[test]
fn jq_assembles_the_same_report_as_python() {
    if Command::new("jq").arg("--version").output().is_err() {
        eprintln!("jq not installed; skipped");
        return;
    }
    let (dir, path, log) = fake_gpu_machine();
    let log_env = log.display().to_string();
    let mut reports = Vec::new();
    for assembler in ["python3", "jq"] {
        let out = dir.path().join(format!("{assembler}.json"));
        let o = device_check(
            &path,
            &[("FAKE_NVIDIA_SMI_LOG", &log_env), ("DEVICE_CHECK_ASSEMBLER", assembler)],
            &["--out", out.to_str().unwrap()],
        );
        assert_eq!(o.status.code(), Some(0), "{assembler}: {}", stderr(&o));
        let mut r = read_report(&out);
        assert_eq!(r["assembler"], assembler);
        let obj = r.as_object_mut().unwrap();
        obj.remove("assembler");
        obj.remove("generatedAt");
        reports.push(r);
    }
    assert_eq!(reports[0], reports[1], "python3 and jq reports differ");
    assert_read_only(&log);
}

#[test]
fn no_nvidia_smi_reports_nvidia_false_and_require_gpu_fails() {
    let path = path_without_nvidia_smi();
    let found =
        Command::new("bash").args(["-c", "command -v nvidia-smi"]).env("PATH", &path).output().unwrap();
    assert!(!found.status.success(), "nvidia-smi still on the filtered PATH");
    let dir = tempfile::tempdir().unwrap();

    let out = dir.path().join("r.json");
    let o = device_check(&path, &[], &["--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = read_report(&out);
    assert_eq!(r["nvidia"], false, "{r:#}");
    assert!(r["nvidiaReason"].as_str().unwrap().contains("nvidia-smi not found on PATH"), "{r:#}");
    assert!(r["commands"]["nvidia-smi -L"]["skipped"].is_string());
    assert!(r["commands"]["nvidia-smi mig -lgip"]["skipped"].is_string());
    assert_eq!(r["gpus"], serde_json::json!([]));
    assert_eq!(r["probe"]["ran"], true);
    assert!(r["commands"]["uname -a"]["stdout"].as_str().unwrap().contains("Linux"));

    let strict = dir.path().join("strict.json");
    let o = device_check(&path, &[], &["--require-gpu", "--out", strict.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("--require-gpu") && err.contains("no usable NVIDIA GPU"), "{err}");
    assert_eq!(read_report(&strict)["nvidia"], false);
}

#[test]
fn help_and_bad_arguments() {
    let path = path_without_nvidia_smi();
    let o = device_check(&path, &[], &["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--require-gpu") && help.contains("Never changes MIG mode"), "{help}");

    let o = device_check(&path, &[], &["--frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown argument"));
}

/// The script's text calls nvidia-smi only through `"$nvsmi"`, never with a mutating argument,
/// and never names mig-parted outside comments.
#[test]
fn script_has_no_mutating_command() {
    let text = std::fs::read_to_string(script()).unwrap().replace("\\\n", " ");
    // One line per command (continuations joined), words separated by one space.
    let code: Vec<String> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let mentions: Vec<&String> = code.iter().filter(|l| l.contains("$nvsmi")).collect();
    let calls =
        mentions.iter().filter(|l| l.contains("\"$nvsmi\" -") || l.contains("\"$nvsmi\" mig")).count();
    assert_eq!(calls, ALLOWED.len(), "{mentions:#?}");
    for line in mentions {
        for word in line.split(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
            assert!(!MUTATING.contains(&word), "{word:?} in: {line}");
        }
    }
    for line in &code {
        assert!(!line.contains("mig-parted") && !line.contains("nvidia-smi -r"), "in: {line}");
    }
}
