//! Load on the in-memory API server: 1,000 nodes and 20,000 pods, listed and watched by a
//! kube-rs reflector through the in-process client. Prints peak RSS (VmHWM) at the end.
//!
//! Run: `cargo bench --bench apiserver -- --warm-up-time 1 --measurement-time 3`

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use futures::{StreamExt, TryStreamExt};
use geometer::apiserver::ApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::reflector;
use serde_json::json;

const NODES: usize = 1_000;
const PODS: usize = 20_000;

fn populate(server: &ApiServer) {
    for n in 0..NODES {
        server
            .seed_value(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("gpu-{n:04}"), "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/mig-1g.10gb": "7"},
                    "nodeInfo": {"kubeletVersion": "v1.33.0", "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                        "kernelVersion": "", "kubeProxyVersion": "", "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}}}))
            .expect("valid node");
    }
    for p in 0..PODS {
        server
            .seed_value(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("job-{p:05}"), "namespace": format!("team-{}", p % 20), "labels": {"app": "train", "shard": (p % 50).to_string()}},
                "spec": {"nodeName": format!("gpu-{:04}", p % NODES), "containers": [{"name": "main", "image": "registry.example/train:1",
                    "resources": {"requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/mig-1g.10gb": "1"}, "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("valid pod");
    }
}

/// Lists every pod through a reflector (500 per page, as kube-rs does) and returns when it is synced.
async fn sync_reflector(server: &ApiServer) -> (reflector::Store<Pod>, impl futures::Stream<Item = Result<Event<Pod>, watcher::Error>>) {
    let pods: Api<Pod> = Api::all(server.client());
    let (reader, writer) = reflector::store();
    let mut stream = reflector(writer, watcher::watcher(pods, watcher::Config::default())).boxed();
    loop {
        if let Some(Event::InitDone) = stream.try_next().await.expect("watch stream error") {
            break;
        }
    }
    (reader, stream)
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = ApiServer::new();
    let started = Instant::now();
    populate(&server);
    eprintln!("seeded {NODES} nodes and {PODS} pods in {:?}", started.elapsed());

    let mut group = c.benchmark_group("apiserver");
    group.sample_size(10);
    group.bench_function("reflector_initial_sync_20k_pods", |b| {
        b.iter(|| {
            rt.block_on(async {
                let (reader, _stream) = sync_reflector(&server).await;
                assert_eq!(reader.state().len(), PODS);
            })
        })
    });
    group.bench_function("watch_1000_pod_updates_through_reflector", |b| {
        b.iter_custom(|iters| {
            let server = server.clone();
            rt.block_on(async move {
                let (reader, mut stream) = sync_reflector(&server).await;
                let api: Api<Pod> = Api::namespaced(server.client(), "team-0");
                let mut total = Duration::ZERO;
                for round in 0..iters {
                    let start = Instant::now();
                    let names: Vec<String> = (0..1000).map(|i| format!("job-{:05}", i * 20)).collect();
                    for name in &names {
                        api.patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"round": round.to_string()}}})))
                            .await
                            .unwrap();
                    }
                    let want = round.to_string();
                    let done = |r: &reflector::Store<Pod>| {
                        r.state().iter().filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get("round")) == Some(&want)).count() == names.len()
                    };
                    while !done(&reader) {
                        stream.try_next().await.unwrap();
                    }
                    total += start.elapsed();
                }
                total
            })
        })
    });
    group.finish();
    eprintln!("peak RSS: {} MiB", peak_rss_kib().unwrap_or(0) / 1024);
}

criterion_group!(benches, bench);
criterion_main!(benches);
