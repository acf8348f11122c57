//! `geometer` given what a careless or hostile user gives it: a snapshot of a 5,000-node
//! cluster as `kubectl get -o yaml` prints it, absurd numbers, bad objects among good ones,
//! out-of-range flags; it answers, names what is wrong, and under `-o json` says it in JSON.

use std::process::{Command, Output};

use geometer_testkit::kubectl_snapshot::kubectl_yaml;
use serde_json::Value;

fn geometer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_geometer")).args(args).output().expect("geometer runs")
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_five_thousand_node_kubectl_yaml_snapshot_plans() {
    let dir = tempfile::tempdir().unwrap();
    // 5,000 nodes (500 with eight H100s in MIG mode), 2,000 pods (500 pending): about 30 MB,
    // past serde-saphyr's fixed budget of a million events.
    let yaml = kubectl_yaml(5000, 10, 2000);
    assert!(yaml.len() > 20_000_000, "{} bytes", yaml.len());
    let file = write(&dir, "cluster.yaml", &yaml);
    let out = geometer(&["plan", "--snapshot", &file, "--time-limit-ms", "60000", "-o", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let met = plan["pods"].as_array().unwrap().iter().filter(|p| p["node"].is_string()).count();
    assert!(met > 0, "no pending pod is placed: {}", &String::from_utf8_lossy(&out.stdout)[..2000]);
}

#[test]
fn a_bad_object_among_good_ones_is_skipped_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
kind: List
items:
- kind: Node
  metadata: {name: n1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: "1", nvidia.com/mig-7g.80gb.count: "1"}}
  status: {allocatable: {cpu: "8", memory: 64Gi}}
- kind: Node
  metadata: {name: n2, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: "99999999999", nvidia.com/mig-7g.80gb.count: "1"}}
- kind: Pod
  metadata: {name: hog, namespace: ml}
  spec: {nodeName: n1, containers: [{name: c, resources: {limits: {nvidia.com/mig-1g.10gb: "1e12"}}}]}
  status: {phase: Running}
- kind: Pod
  metadata: {name: want, namespace: ml}
  spec: {containers: [{name: c, resources: {limits: {nvidia.com/mig-3g.40gb: "1"}}}]}
  status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]}
- kind: MigNode
  metadata: {name: n3}
  status: {gpus: [{index: 0, uuid: GPU-0, model: H100-80GB, instances: [{profile: 1g.10gb, start: 256, size: 1, gpuInstanceId: 1}]}]}
"#;
    let file = write(&dir, "mixed.yaml", text);
    let out = geometer(&["plan", "--snapshot", &file, "-o", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("skipped") && stderr.contains("Pod ml/hog") && stderr.contains("at most 256"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Node n2") && stderr.contains("99999999999") && stderr.contains("at most 16"),
        "{stderr}"
    );
    assert!(
        stderr.contains("MigNode n3")
            && stderr.contains("status.gpus[0].instances[0].start")
            && stderr.contains("0 to 255"),
        "{stderr}"
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = plan["pods"].as_array().unwrap().iter().find(|p| p["pod"] == "ml/want").unwrap();
    assert_eq!(want["node"], "n1", "the good pod is planned on the good node: {plan}");
}

#[test]
fn out_of_range_flags_are_refused_with_the_range() {
    for (args, range) in [
        (vec!["simulate", "--generate", "0"], "1 to 10000000"),
        (vec!["simulate", "--generate", "10", "--buckets", "10000000000"], "1 to 100000"),
        (vec!["demo", "--duration", "1e12"], "0 to 604800"),
        (vec!["demo", "--nvml-latency-ms", "99999999"], "0 to 60000"),
        (vec!["plan", "--snapshot", "-", "--time-limit-ms", "0"], "1 to 600000"),
    ] {
        let out = geometer(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(range), "{args:?}: {stderr}");
    }
}

#[test]
fn errors_under_json_output_are_json_with_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "bad.yaml", "kind: List\nitems: 7\n");
    let out = geometer(&["plan", "--snapshot", &file, "-o", "json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let error: Value = serde_json::from_slice(&out.stderr).expect("a JSON error on stderr");
    assert_eq!(error["error"]["exitCode"], 2);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("items") && message.contains("expected a list"), "{message}");
    let out = geometer(&["plan", "--snapshot", &file]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert_eq!(stderr.matches("expected a list").count(), 1, "each cause once: {stderr}");

    // A flag out of range is a usage error: JSON too under -o json, in each spelling of it.
    for json in [&["-o", "json"][..], &["-ojson"], &["--output=json"]] {
        let mut args = vec!["plan", "--snapshot", &file, "--time-limit-ms", "0"];
        args.extend_from_slice(json);
        let out = geometer(&args);
        assert_eq!(out.status.code(), Some(2));
        let error: Value = serde_json::from_slice(&out.stderr).expect("a JSON usage error on stderr");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("--time-limit-ms") && message.contains("1 to 600000"), "{message}");
    }
    let out = geometer(&["simulate", "-o", "json"]);
    let error: Value = serde_json::from_slice(&out.stderr).expect("a JSON usage error on stderr");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("not provided") && message.contains("--trace <FILE>"), "{message}");
    assert!(!message.contains("Usage") && !message.contains("--help"), "{message}");
}

#[test]
fn an_unreachable_cluster_is_said_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write(
        &dir,
        "kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_geometer"))
        .args(["plan"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains("cannot reach the Kubernetes API server") && stderr.contains("KUBECONFIG"),
        "{stderr}"
    );
}

#[test]
fn a_misspelt_policy_field_is_refused_by_both_policy_forms() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = write(&dir, "s.yaml", "kind: List\nitems: []\n");
    for (name, text, field) in [
        (
            "object.yaml",
            "kind: MigPolicy\nmetadata: {name: p}\nspec: {disruption: {evictionAlowed: true}}\n",
            "spec.disruption.evictionAlowed",
        ),
        ("fields.yaml", "evictionAlowed: true\n", "evictionAlowed"),
    ] {
        let policy = write(&dir, name, text);
        let out = geometer(&["plan", "--snapshot", &snapshot, "--policy", &policy]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(field), "{name}: {stderr}");
    }
}

#[test]
fn a_geometry_of_hundreds_of_instances_is_refused_in_one_short_line() {
    let spec = vec!["1g.10gb"; 400].join(",");
    for format in ["table", "json"] {
        let out = geometer(&["geometry", "check", "--model", "H100-80GB", &spec, "-o", format]);
        assert_eq!(out.status.code(), Some(1), "{format}");
        let said =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(said.len() < 2000, "{format}: {} bytes: {}", said.len(), &said[..300]);
        assert!(said.contains("1g.10gb x400"), "{format}: {said}");
    }
    let token = format!("1g.10gb@{}", "9".repeat(100_000));
    let out = geometer(&["geometry", "check", "--model", "H100-80GB", &token]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.len() < 2000 && stderr.contains("(100008 bytes)"),
        "{} bytes: {}",
        stderr.len(),
        &stderr[..300]
    );
}

#[test]
fn hostile_yaml_is_refused_in_the_users_terms() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = write(&dir, "s.yaml", "kind: List\nitems: []\n");
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let two_documents = "headroom: 0.1\n---\nevictionAllowed: true\n";
    for (name, text, says) in [
        ("bomb.yaml", bomb.as_str(), "aliases"),
        ("two.yaml", two_documents, "more than one YAML document"),
        ("null.yaml", "", "expected an object"),
    ] {
        let policy = write(&dir, name, text);
        let out = geometer(&["plan", "--snapshot", &snapshot, "--policy", &policy]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(says), "{name}: {stderr}");
        for internal in ["from_str", "Breach", "struct", "{ "] {
            assert!(!stderr.contains(internal), "{name} quotes {internal:?}: {stderr}");
        }
    }
}
