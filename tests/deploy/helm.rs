//! The Helm chart (`deploy/helm/geometer`) with the real helm (built from its Go module by
//! scripts/k8s-control-plane.sh): `helm lint` passes; with its defaults it renders exactly what
//! `kubectl kustomize deploy/base` renders, and with the policy and GPU Operator values exactly
//! what the overlays render (after dropping the Namespace, which `helm install
//! --create-namespace` makes, and Helm's own labels); a wrong value fails at install, naming it;
//! its CRDs are crds/.

use std::path::PathBuf;
use std::process::Command;

use geometer_testkit::control_plane::{helm, tool_or_skip};
use geometer_testkit::deploy::{kubectl_available, read, render, repo};
use serde_json::Value;

const CHART: &str = "deploy/helm/geometer";
/// `helm template` assumes Kubernetes 1.20 unless told; the chart needs 1.29 or later.
const KUBE_VERSION: &str = "1.37.0";
/// Labels only Helm adds.
const HELM_LABELS: [&str; 3] =
    ["app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart"];

fn helm_or_skip() -> Option<PathBuf> {
    tool_or_skip(helm())
}

fn run(helm: &PathBuf, args: &[&str]) -> std::process::Output {
    Command::new(helm).args(args).current_dir(repo()).output().expect("helm runs")
}

/// `helm template` of the chart with `sets`, as objects.
fn template(helm: &PathBuf, sets: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        "geometer",
        CHART,
        "-n",
        "geometer-system",
        "--include-crds",
        "--kube-version",
        KUBE_VERSION,
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = run(helm, &args);
    assert!(out.status.success(), "helm {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).expect("helm prints YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Objects sorted by identity, without the Namespace and without Helm's labels; CRDs without
/// labels (Helm installs crds/ untemplated, kustomize labels them); `255.0` read as `255`.
fn normalised(objects: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = objects
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .map(|mut o| {
            if o["kind"] == "CustomResourceDefinition" {
                if let Some(meta) = o["metadata"].as_object_mut() {
                    meta.remove("labels");
                }
            }
            if let Some(labels) = o["metadata"]["labels"].as_object_mut() {
                labels.retain(|k, _| !HELM_LABELS.contains(&k.as_str()));
            }
            integral(&mut o);
            o
        })
        .collect();
    let id = |o: &Value| {
        format!("{} {} {} {}", o["apiVersion"], o["kind"], o["metadata"]["namespace"], o["metadata"]["name"])
    };
    out.sort_by_key(id);
    out
}

fn integral(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.1e15) {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral),
        Value::Object(map) => map.values_mut().for_each(integral),
        _ => {}
    }
}

/// The first path where `a` and `b` differ, with both values.
fn difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    format!("{path}.{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| difference(p, q, format!("{path}[{i}]")))
        }
        _ if a == b => None,
        _ => Some(format!("{path}: chart {a}, kustomize {b}")),
    }
}

fn assert_same(chart: Vec<Value>, kustomize: Vec<Value>, what: &str) {
    let (chart, kustomize) = (normalised(chart), normalised(kustomize));
    let names = |v: &[Value]| {
        v.iter().map(|o| format!("{} {}", o["kind"], o["metadata"]["name"])).collect::<Vec<_>>()
    };
    assert_eq!(names(&chart), names(&kustomize), "{what}: the chart and kustomize render other objects");
    for (c, k) in chart.iter().zip(&kustomize) {
        if let Some(d) = difference(c, k, String::new()) {
            panic!("{what}: {} {} differs at {d}", c["kind"], c["metadata"]["name"]);
        }
    }
}

#[test]
fn the_chart_renders_what_kustomize_renders() {
    let Some(helm) = helm_or_skip() else { return };
    if !kubectl_available() {
        return;
    }
    let lint = run(&helm, &["lint", CHART, "--strict", "--kube-version", KUBE_VERSION]);
    assert!(
        lint.status.success(),
        "helm lint: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    assert_same(template(&helm, &[]), render("deploy/base"), "defaults vs deploy/base");
    assert_same(
        template(&helm, &["policy.mode=DryRun"]),
        render("deploy/overlays/dryrun-only"),
        "policy.mode=DryRun vs dryrun-only",
    );
    assert_same(
        template(&helm, &["policy.mode=DryRun", "gpuOperator.enabled=true"]),
        render("deploy/overlays/gpu-operator"),
        "gpuOperator.enabled vs gpu-operator",
    );
}

#[test]
fn a_wrong_value_fails_naming_it() {
    let Some(helm) = helm_or_skip() else { return };
    let out = run(
        &helm,
        &["template", "geometer", CHART, "--kube-version", KUBE_VERSION, "--set", "policy.mode=Sometimes"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("policy.mode") && err.contains(r#""off", "DryRun", "Approve", "Auto""#), "{err}");
    let out = run(
        &helm,
        &["template", "geometer", CHART, "--kube-version", KUBE_VERSION, "--set", "agent.replicas=3"],
    );
    assert!(!out.status.success(), "an unknown value is refused, not ignored");
}

#[test]
fn the_optional_objects_render_when_asked() {
    let Some(helm) = helm_or_skip() else { return };
    let objects =
        template(&helm, &["serviceMonitor.enabled=true", "prometheusRule.enabled=true", "policy.mode=Auto"]);
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(kinds.contains(&"ServiceMonitor") && kinds.contains(&"PodMonitor"), "{kinds:?}");
    let rule = objects.iter().find(|o| o["kind"] == "PrometheusRule").expect("the alerts");
    assert_eq!(rule["spec"]["groups"][0]["rules"].as_array().map(Vec::len), Some(9), "{rule}");
    let policy = objects.iter().find(|o| o["kind"] == "MigPolicy").expect("the default policy");
    assert_eq!(policy["spec"]["mode"], "Auto");
}

#[test]
fn allowing_gpu_resets_gives_the_agent_a_flag_its_cli_accepts() {
    use clap::Parser;
    let Some(helm) = helm_or_skip() else { return };
    let agent_args = |sets: &[&str]| {
        let objects = template(&helm, sets);
        let agent = objects
            .iter()
            .find(|o| o["kind"] == "DaemonSet" && o["metadata"]["name"] == "geometer-agent")
            .expect("the agent")
            .clone();
        crate::render::args(&agent)
    };
    assert!(!agent_args(&[]).contains(&"--allow-gpu-reset".to_string()), "off by default");
    let args = agent_args(&["agent.allowGpuReset=true"]);
    assert!(args.contains(&"--allow-gpu-reset".to_string()), "{args:?}");
    let argv: Vec<String> = std::iter::once("geometer".to_string()).chain(args).collect();
    if let Err(e) = geometer::cli::Cli::try_parse_from(&argv) {
        panic!("the agent runs `{}`, which the CLI rejects:\n{e}", argv.join(" "));
    }
}

#[test]
fn the_charts_crds_are_the_generated_ones() {
    for name in ["migpolicies.geometer.dev.yaml", "migplans.geometer.dev.yaml", "mignodes.geometer.dev.yaml"]
    {
        assert_eq!(
            read(&repo().join(CHART).join("crds").join(name)),
            read(&repo().join("crds").join(name)),
            "{CHART}/crds/{name} differs from crds/{name}; regenerate it (cargo run -- crds --out-dir {CHART}/crds)"
        );
    }
}
