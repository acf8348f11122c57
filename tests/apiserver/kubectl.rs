//! The real kubectl against the in-memory API server over HTTP: get (tables, -o yaml, -o
//! wide), describe, apply, patch, label, annotate, cordon, uncordon, delete, and a CRD created
//! at run time used with its printer columns. Results are checked through the server itself.
//!
//! The kubectl is the control plane's (`make control-plane` builds it): the tests skip, saying
//! so, when it is not built, and fail instead under `GEOMETER_REQUIRE_CONTROL_PLANE=1`.

use std::path::PathBuf;
use std::process::Command;

use geometer_apiserver::ApiServer;
use geometer_testkit::control_plane::kubectl_or_skip;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

struct Kubectl {
    path: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
    dir: tempfile::TempDir,
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    /// kubectl against `server` over HTTP; `None` when the test skips for want of kubectl.
    async fn start(server: &ApiServer) -> Option<(Kubectl, geometer_apiserver::ServeHandle)> {
        let path = kubectl_or_skip()?;
        let (_, handle) = server.serve_http("127.0.0.1:0").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let cache = dir.path().join("cache");
        Some((Kubectl { path, kubeconfig, cache, dir }, handle))
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    async fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(&self.path);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .arg("--request-timeout=20s");
        cmd.args(args).env("HOME", self.dir.path()).env_remove("KUBECONFIG");
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        Output {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs kubectl and fails the test with its stderr if it fails.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(out.ok, "kubectl {} failed:\n{}\n{}", args.join(" "), out.stderr, out.stdout);
        out.stdout
    }
}

/// The value of a `Label:   value` line of `kubectl describe` output.
fn field<'a>(described: &'a str, label: &str) -> Option<&'a str> {
    described.lines().find_map(|l| l.strip_prefix(label).map(str::trim))
}

/// The table kubectl printed, as rows of whitespace-separated cells (header first).
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn seed_cluster(server: &ApiServer) {
    for (name, role) in [("gpu-1", "gpu"), ("gpu-2", "")] {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if !role.is_empty() {
            labels[format!("node-role.kubernetes.io/{role}")] = json!("");
        }
        server
            .seed_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                    "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/mig-1g.10gb": "7"},
                    "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/mig-1g.10gb": "7"},
                    "nodeInfo": {"kubeletVersion": "v1.33.1", "architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "containerd://2.0.0",
                        "kernelVersion": "6.8.0", "kubeProxyVersion": "", "machineID": "m", "operatingSystem": "linux", "osImage": "Ubuntu 24.04", "systemUUID": "s"}}}))
            .unwrap();
    }
    server
        .seed_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0", "namespace": "default", "labels": {"app": "train"}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "image": "busybox:1",
                "resources": {"requests": {"cpu": "2", "nvidia.com/mig-1g.10gb": "1"}, "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
            "status": {"phase": "Running", "podIP": "10.1.0.5", "startTime": "2025-01-01T00:00:00Z",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "main", "image": "busybox:1", "imageID": "", "ready": true, "restartCount": 2,
                    "state": {"running": {"startedAt": "2025-01-01T00:00:00Z"}}}]}}))
        .unwrap();
    let uid = server.object::<Pod>("default", "train-0").unwrap().metadata.uid.unwrap();
    server
        .seed_value(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "train-0.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "train-0", "apiVersion": "v1", "uid": uid},
            "reason": "Scheduled", "message": "Successfully assigned default/train-0 to gpu-1", "type": "Normal",
            "source": {"component": "default-scheduler"}, "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1}))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_tables_yaml_and_descriptions() {
    let server = ApiServer::new();
    seed_cluster(&server);
    let Some((k, _http)) = Kubectl::start(&server).await else { return };

    let nodes = rows(&k.ok(&["get", "nodes"]).await);
    assert_eq!(nodes[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(&nodes[1][..3], ["gpu-1", "Ready", "gpu"]);
    assert_eq!(nodes[1][4], "v1.33.1");
    assert_eq!(&nodes[2][..3], ["gpu-2", "Ready", "<none>"]);

    let pods = rows(&k.ok(&["get", "pods", "-o", "wide"]).await);
    assert_eq!(&pods[0][..7], ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]);
    assert_eq!(&pods[1][..4], ["train-0", "1/1", "Running", "2"]);
    assert_eq!(&pods[1][5..7], ["10.1.0.5", "gpu-1"]);
    let by_field = k.ok(&["get", "pods", "-A", "--field-selector", "spec.nodeName=gpu-2"]).await;
    assert!(!by_field.contains("train-0"), "{by_field}");
    let by_label = rows(&k.ok(&["get", "pods", "-l", "app=train", "-o", "name"]).await);
    assert_eq!(by_label, [["pod/train-0"]]);

    let yaml = k.ok(&["get", "pod", "train-0", "-o", "yaml"]).await;
    let pod: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(pod["spec"]["nodeName"], "gpu-1");
    assert_eq!(
        pod["metadata"]["uid"],
        json!(server.object::<Pod>("default", "train-0").unwrap().metadata.uid.unwrap())
    );

    let node = k.ok(&["describe", "node", "gpu-1"]).await;
    assert_eq!(field(&node, "Name:"), Some("gpu-1"), "{node}");
    assert_eq!(field(&node, "Roles:"), Some("gpu"), "{node}");
    assert_eq!(field(&node, "Unschedulable:"), Some("false"), "{node}");
    for expected in ["Non-terminated Pods:", "train-0", "nvidia.com/mig-1g.10gb", "KubeletReady"] {
        assert!(node.contains(expected), "describe node lacks {expected:?}:\n{node}");
    }
    let pod = k.ok(&["describe", "pod", "train-0"]).await;
    assert!(field(&pod, "Node:").is_some_and(|n| n.starts_with("gpu-1")), "{pod}");
    assert_eq!(field(&pod, "Status:"), Some("Running"), "{pod}");
    assert!(
        pod.contains("Successfully assigned default/train-0 to gpu-1"),
        "describe pod shows its events:\n{pod}"
    );
    let missing = k.run(&["get", "pod", "nope"]).await;
    assert!(!missing.ok && missing.stderr.contains("pods \"nope\" not found"), "{}", missing.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_changes_land_in_the_server() {
    let server = ApiServer::new();
    seed_cluster(&server);
    let Some((k, _http)) = Kubectl::start(&server).await else { return };
    let nodes: Api<Node> = Api::all(server.client());

    let manifest = |image: &str| {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: team\n  labels: {{app: web}}\nspec:\n  containers:\n  - name: main\n    image: {image}\n"
        )
    };
    let path = k.file("app.yaml", &manifest("nginx:1"));
    let out = k.ok(&["apply", "-f", path.to_str().unwrap()]).await;
    assert!(out.contains("namespace/team created") && out.contains("pod/web created"), "{out}");
    let path = k.file("app.yaml", &manifest("nginx:2"));
    let out = k.ok(&["apply", "-f", path.to_str().unwrap()]).await;
    assert!(out.contains("pod/web configured"), "{out}");
    let web = server.object::<Pod>("team", "web").unwrap();
    assert_eq!(web.spec.unwrap().containers[0].image.as_deref(), Some("nginx:2"));
    assert!(web
        .metadata
        .annotations
        .unwrap()
        .contains_key("kubectl.kubernetes.io/last-applied-configuration"));

    k.ok(&["patch", "node", "gpu-2", "--type=merge", "-p", r#"{"metadata":{"labels":{"pool":"h100"}}}"#])
        .await;
    k.ok(&["label", "node", "gpu-2", "zone=a"]).await;
    k.ok(&["annotate", "pod", "web", "-n", "team", "geometer.dev/do-not-disrupt=true"]).await;
    let labels = nodes.get("gpu-2").await.unwrap().metadata.labels.unwrap();
    assert_eq!((labels["pool"].as_str(), labels["zone"].as_str()), ("h100", "a"));
    let annotations = server.object::<Pod>("team", "web").unwrap().metadata.annotations.unwrap();
    assert_eq!(annotations["geometer.dev/do-not-disrupt"], "true");
    k.ok(&["label", "node", "gpu-2", "zone-"]).await;
    assert!(!nodes.get("gpu-2").await.unwrap().metadata.labels.unwrap().contains_key("zone"));

    // `kubectl create namespace` sends protobuf; the server reads that one kind.
    k.ok(&["create", "namespace", "scratch"]).await;
    assert!(server.object::<k8s_openapi::api::core::v1::Namespace>("", "scratch").is_some());

    k.ok(&["cordon", "gpu-1"]).await;
    assert_eq!(nodes.get("gpu-1").await.unwrap().spec.unwrap().unschedulable, Some(true));
    let table = rows(&k.ok(&["get", "node", "gpu-1"]).await);
    assert_eq!(table[1][1], "Ready,SchedulingDisabled");
    k.ok(&["uncordon", "gpu-1"]).await;
    assert_ne!(nodes.get("gpu-1").await.unwrap().spec.unwrap().unschedulable, Some(true));

    let out = k.ok(&["delete", "pod", "web", "-n", "team"]).await;
    assert!(out.contains("pod \"web\" deleted"), "{out}");
    assert!(server.object::<Pod>("team", "web").is_none());
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: migplans.example.dev
spec:
  group: example.dev
  scope: Cluster
  names: {plural: migplans, singular: migplan, kind: MigPlan, shortNames: [mp]}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Phase, type: string, jsonPath: .status.phase}
    - {name: Nodes, type: integer, jsonPath: .spec.nodes}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              nodes: {type: integer}
              approved: {type: boolean}
          status:
            type: object
            properties:
              phase: {type: string}
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_created_at_run_time_prints_its_columns() {
    let server = ApiServer::new();
    let Some((k, _http)) = Kubectl::start(&server).await else { return };
    // kubectl learns the server's types before the CRD exists; it must notice the new one.
    k.ok(&["get", "nodes"]).await;
    let crd = k.file("crd.yaml", CRD);
    k.ok(&["apply", "-f", crd.to_str().unwrap()]).await;
    let plan = k.file(
        "plan.yaml",
        "apiVersion: example.dev/v1alpha1\nkind: MigPlan\nmetadata:\n  name: round-1\nspec:\n  nodes: 3\n",
    );
    k.ok(&["apply", "-f", plan.to_str().unwrap()]).await;
    let gvk = GroupVersionKind::gvk("example.dev", "v1alpha1", "MigPlan");
    let plans: Api<DynamicObject> = Api::all_with(server.client(), &ApiResource::from_gvk(&gvk));
    plans
        .patch_status("round-1", &Default::default(), &kube::api::Patch::Merge(json!({"status": {"phase": "Proposed", "conditions": [{"type": "Ready", "status": "False"}]}})))
        .await
        .unwrap();

    let table = rows(&k.ok(&["get", "migplans"]).await);
    assert_eq!(table[0], ["NAME", "PHASE", "NODES", "READY", "AGE"]);
    assert_eq!(&table[1][..4], ["round-1", "Proposed", "3", "False"]);
    let short = rows(&k.ok(&["get", "mp", "round-1"]).await);
    assert_eq!(short[1][0], "round-1");
    k.ok(&["patch", "migplan", "round-1", "--type=merge", "-p", r#"{"spec":{"approved":true}}"#]).await;
    assert_eq!(plans.get("round-1").await.unwrap().data["spec"]["approved"], true);
    let described = k.ok(&["describe", "migplan", "round-1"]).await;
    assert_eq!(field(&described, "Name:"), Some("round-1"), "{described}");
    assert_eq!(field(&described, "API Version:"), Some("example.dev/v1alpha1"), "{described}");
    let phase: Vec<&str> = described
        .lines()
        .find(|l| l.trim_start().starts_with("Phase:"))
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(phase, ["Phase:", "Proposed"], "{described}");
}

/// `geometer apiserver` as a person starts it: loads manifests, writes a kubeconfig, prints
/// the export line; kube-rs and kubectl then work through that kubeconfig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_serves_loaded_manifests_through_its_kubeconfig() {
    use std::io::BufRead;
    // Looked up first: a missing kubectl fails the test before the server process starts.
    let kubectl = kubectl_or_skip();
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("cluster.yaml");
    std::fs::write(&manifests, format!("{CRD}---\napiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-7\n---\napiVersion: example.dev/v1alpha1\nkind: MigPlan\nmetadata:\n  name: seeded\nspec:\n  nodes: 1\n")).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_geometer"))
        .args(["apiserver", "--port", "0", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--load")
        .arg(&manifests)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    assert_eq!(line.trim(), format!("export KUBECONFIG={}", kubeconfig.display()));

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let node = Api::<Node>::all(client.clone()).get("gpu-7").await.unwrap();
    assert!(node.metadata.uid.is_some());
    let gvk = GroupVersionKind::gvk("example.dev", "v1alpha1", "MigPlan");
    let plan =
        Api::<DynamicObject>::all_with(client, &ApiResource::from_gvk(&gvk)).get("seeded").await.unwrap();
    assert_eq!(plan.data["spec"]["nodes"], 1);

    if let Some(kubectl) = kubectl {
        let out = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .args(["get", "migplans", "-o", "name"])
            .env("HOME", dir.path())
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "migplan.example.dev/seeded",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
