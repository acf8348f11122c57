//! `geometer recommend` offline: from a List of MigNodes and Pods, and from dcgm-exporter's
//! metrics through a Prometheus query API (served here by a stand-in that answers the five
//! range-vector queries the way Prometheus' `/api/v1/query` does).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use serde_json::Value;

use crate::geometer;

/// A ReplicaSet's two pods on whole GPUs, and a bare training pod.
const PODS: &str = r#"
- apiVersion: v1
  kind: Pod
  metadata:
    name: chat-7c-a
    namespace: ml
    labels: {pod-template-hash: 7c}
    ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: chat-7c, uid: u1, controller: true}]
  spec: {containers: [{name: model, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]}
- apiVersion: v1
  kind: Pod
  metadata:
    name: chat-7c-b
    namespace: ml
    labels: {pod-template-hash: 7c}
    ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: chat-7c, uid: u1, controller: true}]
  spec: {containers: [{name: model, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: train, namespace: ml}
  spec: {containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]}
"#;

fn usage(pod: &str, gpu: u32, peak: u64, utilization: u32, samples: u32) -> String {
    format!(
        "    - {{pod: ml/{pod}, gpu: {gpu}, model: H100-80GB, since: \"2026-12-01T00:00:00Z\", samples: {samples}, \
         peakMemoryMib: {peak}, p95MemoryMib: {peak}, peakUtilizationPercent: {utilization}, meanUtilizationPercent: {utilization}}}\n"
    )
}

fn list() -> String {
    format!(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: geometer.dev/v1alpha1\n  kind: MigNode\n  metadata: {{name: n1}}\n  spec: {{}}\n  status:\n    usage:\n{}{}{}{PODS}",
        usage("chat-7c-a", 0, 7_000, 4, 40),
        usage("chat-7c-b", 1, 6_800, 6, 40),
        usage("train", 2, 70_000, 90, 40),
    )
}

#[test]
fn recommends_a_slice_per_workload_with_its_patch() {
    let out = geometer(&["recommend", "--snapshot", "-"], Some(&list()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let line =
        |workload: &str| text.lines().find(|l| l.starts_with(workload)).unwrap_or_default().to_string();
    assert!(line("deployment/chat").contains("1g.10gb (nvidia.com/mig-1g.10gb)"), "{text}");
    assert!(line("pod/train").contains("keep the whole GPU"), "{text}");
    assert!(text.contains("Whole GPUs given back: 1"), "{text}");
    assert!(text.contains("kubectl patch deployment chat -n ml --type=json -p '"), "{text}");

    let out = geometer(&["recommend", "--snapshot", "-", "--min-samples", "50", "-o", "json"], Some(&list()));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["recommendations"][0]["verdict"]["verdict"], "tooFewSamples", "{report}");
    assert_eq!(report["gpusGivenBack"], 0);
}

/// Answers each query of one `geometer recommend --prometheus` run, then stops.
fn prometheus_stand_in(queries: usize) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut asked = Vec::new();
        for stream in listener.incoming().take(queries) {
            let mut stream = stream.unwrap();
            let mut request_line = String::new();
            BufReader::new(&stream).read_line(&mut request_line).unwrap();
            let query = request_line.split_whitespace().nth(1).unwrap_or_default().to_string();
            let value = |chat: f64, train: f64| {
                let series = |ns: &str, pod: &str, gpu: &str, v: f64| {
                    format!(
                        r#"{{"metric":{{"__name__":"x","exported_namespace":"{ns}","exported_pod":"{pod}","namespace":"gpu-operator","pod":"dcgm-exporter-1","gpu":"{gpu}","modelName":"NVIDIA H100 80GB HBM3","Hostname":"n1"}},"value":[1764806400,"{v}"]}}"#
                    )
                };
                let mig = r#"{"metric":{"exported_namespace":"ml","exported_pod":"other","GPU_I_ID":"3","gpu":"3"},"value":[1764806400,"100"]}"#;
                format!(
                    "[{},{},{mig}]",
                    series("ml", "chat-7c-a", "0", chat),
                    series("ml", "train", "2", train)
                )
            };
            let result = if query.contains("count_over_time") {
                value(2_000.0, 2_000.0)
            } else if query.contains("quantile_over_time") {
                value(6_500.0, 65_000.0)
            } else if query.contains("DCGM_FI_DEV_FB_USED") {
                value(7_000.0, 70_000.0)
            } else {
                value(5.0, 90.0)
            };
            let body =
                format!(r#"{{"status":"success","data":{{"resultType":"vector","result":{result}}}}}"#);
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(response.as_bytes()).unwrap();
            asked.push(query);
        }
        asked
    });
    (url, handle)
}

#[test]
fn reads_dcgm_exporter_metrics_through_prometheus() {
    let (url, server) = prometheus_stand_in(5);
    let out = geometer(
        &["recommend", "--snapshot", "-", "--prometheus", &url, "--window", "24h", "-o", "json"],
        Some(&list()),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let asked = server.join().unwrap();
    assert!(
        asked.iter().all(|q| q.starts_with("/api/v1/query?query=") && q.contains("%5B24h%5D")),
        "{asked:?}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let recommendations = report["recommendations"].as_array().unwrap();
    assert_eq!(recommendations.len(), 2, "the MIG device's series is not a whole GPU: {report}");
    let chat = recommendations.iter().find(|r| r["owner"]["name"] == "chat").unwrap();
    assert_eq!(chat["model"], "H100-80GB", "modelName read through the catalog");
    assert_eq!(chat["peakMemoryMib"], 7_000);
    assert_eq!(chat["samples"], 2_000);
    assert_eq!(chat["verdict"]["profile"], "1g.10gb");

    let out = geometer(&["recommend", "--snapshot", "-", "--prometheus", "https://prom:9090"], Some(&list()));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("port-forward"));
}
