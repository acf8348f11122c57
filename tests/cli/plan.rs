//! `geometer plan` end to end: the binary on every example, output formats, bad input.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::geometer;

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && !p.file_name().unwrap().to_string_lossy().starts_with("policy")
        })
        .collect();
    files.sort();
    files
}

pub(crate) fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name).display().to_string()
}

pub(crate) fn plan_json(args: &[&str]) -> Value {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = geometer(&all, None);
    assert!(out.status.success(), "geometer {all:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON plan")
}

pub(crate) fn pod<'v>(plan: &'v Value, name: &str) -> &'v Value {
    plan["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pod"] == name)
        .unwrap_or_else(|| panic!("{name} in plan"))
}

#[test]
fn every_example_plans_and_names_the_documented_fields() {
    let files = examples();
    assert!(files.len() >= 3, "examples: {files:?}");
    for file in files {
        let path = file.display().to_string();
        let plan = plan_json(&["--snapshot", &path]);
        for field in ["objective", "bound", "solve_ms", "evictions", "gpus", "pods"] {
            assert!(plan.get(field).is_some(), "{path}: no `{field}`");
        }
        // No GPU at all only where every node is left alone, and the plan says why.
        let says_why = notes(&plan).iter().any(|n| n.contains("left unchanged"));
        assert!(!plan["gpus"].as_array().unwrap().is_empty() || says_why, "{path}: no GPUs, and no note why");
        for gpu in plan["gpus"].as_array().unwrap() {
            for field in ["node", "index", "model", "from", "to"] {
                assert!(gpu.get(field).is_some(), "{path}: GPU without `{field}`");
            }
            for inst in gpu["to"].as_array().unwrap() {
                assert!(inst["profile"].is_string() && inst["start"].is_u64());
            }
        }
        for p in plan["pods"].as_array().unwrap() {
            assert!(p["pod"].is_string());
            assert_eq!(p["node"].is_null(), p.get("reason").is_some(), "{path}: {p}");
        }
        let table = geometer(&["plan", "--snapshot", &path], None);
        assert!(table.status.success());
        let text = String::from_utf8_lossy(&table.stdout);
        assert!(text.contains("Plan:") && text.contains("Objective:"), "{text}");
        let yaml = geometer(&["plan", "--snapshot", &path, "-o", "yaml"], None);
        assert!(yaml.status.success());
        assert!(String::from_utf8_lossy(&yaml.stdout).contains("solve_ms:"));
    }
}

#[test]
fn mixed_cluster_from_gpu_operator_labels() {
    let plan = plan_json(&["--snapshot", &example("mixed-cluster.yaml")]);
    assert_eq!(plan["placements_inferred"], true);
    assert_eq!(pod(&plan, "prod/llm-3")["placement"], "existing-slices");
    assert_eq!(pod(&plan, "prod/llm-3")["node"], "h100-1");
    assert_eq!(pod(&plan, "training/pretrain-7g")["node"], "h100-2");
    // h100-2's two free GPUs hold 14 compute slices; the 7g pod, four 1g and two 2g pods want
    // 15, so exactly one small pod waits, for capacity, and the rest go to h100-2.
    let small: Vec<String> = (0..4)
        .map(|i| format!("inference/embed-{i}"))
        .chain((0..2).map(|i| format!("inference/rerank-{i}")))
        .collect();
    let unmet: Vec<&String> = small.iter().filter(|p| pod(&plan, p)["node"].is_null()).collect();
    assert_eq!(unmet.len(), 1, "{unmet:?}");
    assert_eq!(pod(&plan, unmet[0])["reason"]["kind"], "capacity");
    for p in small.iter().filter(|p| !unmet.contains(p)) {
        assert_eq!(pod(&plan, p)["node"], "h100-2", "{p}");
    }
    let untolerated = pod(&plan, "research/no-toleration");
    assert!(untolerated["node"].is_null());
    assert!(untolerated["reason"]["detail"].as_str().unwrap().contains("taint"), "{untolerated}");
    // Busy 1g.5gb slices on a100-1 stay where they are.
    for gpu in plan["gpus"].as_array().unwrap().iter().filter(|g| g["node"] == "a100-1") {
        assert!(gpu["to"].as_array().unwrap().len() >= 5);
    }
    assert!(plan["evictions"].as_array().unwrap().is_empty(), "no policy: no eviction");
}

#[test]
fn eviction_example_respects_do_not_disrupt_and_policy_file() {
    let plan = plan_json(&["--snapshot", &example("eviction.yaml")]);
    assert_eq!(plan["placements_inferred"], false, "MigNode inventories are not inferred");
    let evicted: Vec<&str> =
        plan["evictions"].as_array().unwrap().iter().map(|e| e["pod"].as_str().unwrap()).collect();
    assert!(!evicted.contains(&"prod/api-0"));
    let strict = plan_json(&[
        "--snapshot",
        &example("eviction.yaml"),
        "--policy",
        &example("policy-no-eviction.yaml"),
    ]);
    assert!(strict["evictions"].as_array().unwrap().is_empty());
    assert!(strict["objective"]["gpus_changed"].as_u64().unwrap() <= 2);
    assert!(
        plan["objective"]["demand_met"].as_u64().unwrap()
            >= strict["objective"]["demand_met"].as_u64().unwrap(),
        "allowing eviction never meets less demand"
    );
}

#[test]
fn constraints_example_explains_each_pod() {
    let plan = plan_json(&["--snapshot", &example("constraints.yaml")]);
    assert_eq!(pod(&plan, "team-a/east-gold")["node"], "gpu-east-1");
    assert_eq!(pod(&plan, "team-b/west-tolerant")["node"], "gpu-west-1");
    assert_eq!(pod(&plan, "team-b/west-intolerant")["reason"]["kind"], "no-eligible-node");
    assert_eq!(pod(&plan, "team-a/too-big-for-cpu")["reason"]["kind"], "no-eligible-node");
    // The one node this pod may use has no GPU model with the media-engine profile.
    let media = pod(&plan, "team-c/media");
    assert_eq!(media["reason"]["kind"], "no-eligible-node");
    assert!(media["reason"]["detail"].as_str().unwrap().contains("1g.10gb+me"), "{media}");
    assert_eq!(pod(&plan, "team-c/unknown-profile")["reason"]["kind"], "unknown-profile");
}

#[test]
fn reads_stdin_and_greedy_on_request() {
    let text = std::fs::read_to_string(example("mixed-cluster.yaml")).unwrap();
    let out = geometer(&["plan", "--snapshot", "-", "-o", "json", "--solver", "greedy"], Some(&text));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["solver"], "greedy");
}

#[test]
fn bad_input_exits_2_and_names_field_and_value() {
    let out = geometer(&["plan", "--snapshot", "/nonexistent/snapshot.yaml"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/snapshot.yaml"));

    let bad_pod = r#"{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "x", "namespace": "ml"},
      "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "plenty"}}}]}}]}"#;
    // One bad object is skipped and named; the rest (here nothing) is planned.
    let out = geometer(&["plan", "--snapshot", "-"], Some(bad_pod));
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("skipped Pod ml/x"), "{err}");
    assert!(err.contains("spec.containers[0].resources.requests.cpu") && err.contains("plenty"), "{err}");

    let out = geometer(&["plan", "--snapshot", "-"], Some("kind: Deployment\n"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Deployment"));
}

#[test]
fn help_describes_every_flag() {
    let out = geometer(&["plan", "--help"], None);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--snapshot", "--policy", "--catalog", "--output", "--solver", "--time-limit-ms"] {
        assert!(text.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn gangs_declared_by_podgroups_and_kueue_are_planned_all_or_nothing() {
    let plan = plan_json(&["--snapshot", &example("gangs.yaml")]);
    let gang = |name: &str| {
        plan["gangs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {plan}"))
    };
    // Coscheduling PodGroup minMember 4: the two GPUs hold all four workers.
    assert_eq!(
        (gang("ml/allreduce")["minMembers"].as_u64(), gang("ml/allreduce")["placed"].as_u64()),
        (Some(4), Some(4))
    );
    for i in 0..4 {
        assert_eq!(pod(&plan, &format!("ml/allreduce-{i}"))["node"], "h100-1");
    }
    // Kueue total count 3: none of it beside the larger gang, and said why.
    assert_eq!(gang("ml/sweep")["placed"], 0);
    assert!(
        pod(&plan, "ml/sweep-0")["reason"]["detail"].as_str().unwrap().starts_with("gang ml/sweep: "),
        "{plan}"
    );
    // Volcano PodGroup minMember 3 of whole GPUs on two GPUs: never.
    assert!(gang("ml/big")["reason"]
        .as_str()
        .unwrap()
        .starts_with("no geometry of the eligible GPUs could ever hold it"));
}

/// `examples/mixed-cluster.yaml` with extra labels on node h100-2 (the node the 7g pod lands
/// on), as `kubectl get nodes,pods -A -o yaml` would print a GPU Operator node.
fn with_h100_2_labels(labels: &[(&str, &str)]) -> (tempfile::TempDir, String) {
    let text = std::fs::read_to_string(example("mixed-cluster.yaml")).unwrap();
    let (head, tail) = text.split_once("    name: h100-2\n    labels:\n").expect("h100-2 in the example");
    let extra: String = labels.iter().map(|(k, v)| format!("      {k}: \"{v}\"\n")).collect();
    let tail = tail.replacen("      nvidia.com/mig.strategy: mixed\n", "", 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    std::fs::write(&path, format!("{head}    name: h100-2\n    labels:\n{extra}{tail}")).unwrap();
    let path = path.display().to_string();
    (dir, path)
}

pub(crate) fn notes(plan: &Value) -> Vec<String> {
    plan["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
}

#[test]
fn a_node_whose_device_plugin_uses_the_single_strategy_is_left_unchanged_with_a_note() {
    let (_dir, path) = with_h100_2_labels(&[("nvidia.com/mig.strategy", "single")]);
    let plan = plan_json(&["--snapshot", &path]);
    assert!(plan["gpus"].as_array().unwrap().iter().all(|g| g["node"] != "h100-2"), "{}", plan["gpus"]);
    assert!(pod(&plan, "training/pretrain-7g")["node"] != "h100-2");
    let notes = notes(&plan);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("h100-2") && n.contains("\"single\"") && n.contains("mig.strategy=mixed")),
        "{notes:?}"
    );
    let table = geometer(&["plan", "--snapshot", &path], None);
    assert!(String::from_utf8_lossy(&table.stdout).contains("left unchanged"), "the table says it too");
}

#[test]
fn a_node_the_gpu_operators_mig_manager_still_owns_is_left_unchanged_with_a_note() {
    let owned = [
        ("nvidia.com/mig.strategy", "mixed"),
        ("nvidia.com/gpu.deploy.device-plugin", "true"),
        ("nvidia.com/gpu.deploy.mig-manager", "true"),
    ];
    let (_dir, path) = with_h100_2_labels(&owned);
    let plan = plan_json(&["--snapshot", &path]);
    assert!(plan["gpus"].as_array().unwrap().iter().all(|g| g["node"] != "h100-2"));
    let notes = notes(&plan);
    assert!(notes.iter().any(|n| n.contains("h100-2") && n.contains("mig-manager=false")), "{notes:?}");

    let handed_over = [
        ("nvidia.com/mig.strategy", "mixed"),
        ("nvidia.com/gpu.deploy.device-plugin", "true"),
        ("nvidia.com/gpu.deploy.mig-manager", "false"),
    ];
    let (_dir, path) = with_h100_2_labels(&handed_over);
    let plan = plan_json(&["--snapshot", &path]);
    assert_eq!(pod(&plan, "training/pretrain-7g")["node"], "h100-2", "handed over, it is planned as before");
}
