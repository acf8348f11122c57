//! Load on the in-memory API server: 1,000 nodes and 20,000 pods, listed and watched
//! by kube-runtime reflectors, one for nodes and one for pods, as the controller's caches do.
//!
//! Measured, for the in-process client (`ApiServer::client`, no sockets) and for a kube client
//! over HTTP on loopback (`ApiServer::serve_http`, as kubectl talks to it):
//! - initial sync: from starting both reflectors to both stores holding every object (paged
//!   lists of 500, kube-runtime's default, then the watches open); several fresh runs;
//! - watch delivery: 1,000 pod and 100 node label patches written one after another while the
//!   reflectors watch; per object, from the start of its write to its event leaving the
//!   reflector (the store is updated by then), and the whole burst's span;
//! - memory: live heap bytes (a counting global allocator) held by the server's store and by
//!   the two reflector stores, the heap's peak during a sync, and the process's resident set
//!   (VmRSS) and peak (VmHWM), which also count what the allocator keeps after freeing.
//!
//! Run: `cargo bench --bench apiserver` (after `--`: `--runs N`, default 5 sync runs;
//! `--transport in-process|http|both`, default both; one per process gives RSS figures that
//! the other transport's earlier run does not inflate; `--keep-managed-fields` to cache
//! objects whole, where by default the reflectors drop managedFields as the controller does).
//! A plain `main` (harness = false): the phases need fresh reflectors and memory readings
//! between them, which a sampling harness would blur.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

#[path = "support/counting_alloc.rs"]
#[allow(unsafe_code)] // a counting GlobalAlloc wrapper: measuring heap needs it
mod counting_alloc;
#[path = "support/report.rs"]
mod report;

use std::collections::HashMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use futures::StreamExt;
use geometer_apiserver::{ApiServer, Verb};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::mpsc;

use report::Report;

/// 1 under `cargo bench`; 10 when `cargo test --all-targets` runs this as a smoke test (cargo
/// passes `--bench` only to benchmarks it runs as such).
static SCALE_DOWN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

fn node_count() -> usize {
    1_000 / SCALE_DOWN.load(std::sync::atomic::Ordering::Relaxed)
}

fn pod_count() -> usize {
    20_000 / SCALE_DOWN.load(std::sync::atomic::Ordering::Relaxed)
}
const POD_UPDATES: usize = 1_000;
const NODE_UPDATES: usize = 100;
/// Label the watch phase writes; its value is the round.
const ROUND: &str = "bench.geometer.dev/round";

fn node(n: usize) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("gpu-{n:04}"), "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig.capable": "true"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "capacity": {"cpu": "96", "memory": "1Ti", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"},
            "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"},
            "nodeInfo": {"kubeletVersion": "v1.37.0", "architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "containerd://2.0.0",
                "kernelVersion": "6.8.0", "kubeProxyVersion": "", "machineID": "m", "operatingSystem": "linux", "osImage": "Ubuntu 24.04", "systemUUID": "s"}}})
}

fn pod(p: usize) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("job-{p:05}"), "namespace": format!("team-{}", p % 20), "labels": {"app": "train", "shard": (p % 50).to_string()}},
        "spec": {"nodeName": format!("gpu-{:04}", p % node_count()), "containers": [{"name": "main", "image": "registry.example/train:1",
            "resources": {"requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/mig-1g.10gb": "1"}, "limits": {"nvidia.com/mig-1g.10gb": "1"}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn populate(server: &ApiServer) {
    for n in 0..node_count() {
        server.seed_value(node(n)).expect("valid node");
    }
    for p in 0..pod_count() {
        server.seed_value(pod(p)).expect("valid pod");
    }
}

/// `--keep-managed-fields`: cache objects whole instead of as the controller does.
static KEEP_MANAGED_FIELDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a reflector reports to the benchmark: its first full sync, and each applied object.
enum Seen {
    Synced(Instant),
    Applied { name: String, round: Option<String>, at: Instant },
}

/// Starts a reflector over every `K`; its stream runs in a task that reports to `tx`.
fn start<K>(client: Client, tx: mpsc::UnboundedSender<Seen>) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let keep = KEEP_MANAGED_FIELDS.load(std::sync::atomic::Ordering::Relaxed);
    let stream = watcher::watcher(Api::<K>::all(client), watcher::Config::default())
        .default_backoff()
        // As the controller's caches (src/controller/cache.rs): managedFields are never read.
        .modify(move |obj: &mut K| {
            if !keep {
                obj.meta_mut().managed_fields = None;
            }
        })
        .reflect(writer);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                // Dropped reflectors end here when the client goes first (at shutdown).
                Err(e) if tx.is_closed() => return drop(e),
                Err(e) => panic!("watch stream error: {e}"),
            };
            let seen = match event {
                Event::InitDone => Seen::Synced(Instant::now()),
                Event::Apply(obj) => Seen::Applied {
                    round: obj.labels().get(ROUND).cloned(),
                    name: obj.name_any(),
                    at: Instant::now(),
                },
                _ => continue,
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
    (reader, task)
}

struct Reflectors {
    nodes: Store<Node>,
    pods: Store<Pod>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    node_rx: mpsc::UnboundedReceiver<Seen>,
    pod_rx: mpsc::UnboundedReceiver<Seen>,
}

impl Drop for Reflectors {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

async fn synced(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Instant {
    loop {
        if let Seen::Synced(at) = rx.recv().await.expect("reflector ended before its sync") {
            return at;
        }
    }
}

/// Starts both reflectors and returns them synced, with the time until the later one was.
async fn sync_both(client: &Client) -> (Reflectors, Duration) {
    let (node_tx, mut node_rx) = mpsc::unbounded_channel();
    let (pod_tx, mut pod_rx) = mpsc::unbounded_channel();
    let started = Instant::now();
    let (nodes, a) = start::<Node>(client.clone(), node_tx);
    let (pods, b) = start::<Pod>(client.clone(), pod_tx);
    let (n, p) = tokio::join!(synced(&mut node_rx), synced(&mut pod_rx));
    let took = n.max(p) - started;
    assert_eq!(
        (nodes.state().len(), pods.state().len()),
        (node_count(), pod_count()),
        "a synced store holds every object"
    );
    (Reflectors { nodes, pods, tasks: vec![a, b], node_rx, pod_rx }, took)
}

/// Patches `names` one after another and waits for each one's event; returns per-object
/// latencies (write start to event) and the burst's span.
async fn watch_round<K>(
    api_for: impl Fn(&Option<String>) -> Api<K>,
    names: Vec<(Option<String>, String)>,
    round: &str,
    rx: &mut mpsc::UnboundedReceiver<Seen>,
) -> (Vec<Duration>, Duration)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + 'static,
{
    let started = Instant::now();
    let mut written = HashMap::new();
    let patch = Patch::Merge(json!({"metadata": {"labels": {ROUND: round}}}));
    for (ns, name) in &names {
        let api = api_for(ns);
        written.insert(name.clone(), Instant::now());
        api.patch(name, &PatchParams::default(), &patch).await.expect("patch");
    }
    let mut latencies = Vec::with_capacity(names.len());
    let mut last = started;
    while latencies.len() < names.len() {
        if let Seen::Applied { name, round: Some(r), at } = rx.recv().await.expect("reflector ended") {
            if r == round {
                let start = written.remove(&name).expect("an event for an object written once");
                latencies.push(at - start);
                last = last.max(at);
            }
        }
    }
    (latencies, last - started)
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux)");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number of kB")
}

fn mib(kib: u64) -> String {
    format!("{:.0} MiB", kib as f64 / 1024.0)
}

fn heap_mib(bytes: usize) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(mut v: Vec<Duration>) -> String {
    v.sort();
    format!("min {} / median {} / max {}", ms(v[0]), ms(percentile(&v, 0.5)), ms(v[v.len() - 1]))
}

async fn measure(
    table: &mut Report,
    transport: &str,
    server: &ApiServer,
    client: Client,
    runs: usize,
    round: &str,
) {
    table.line(format!("\n**{transport}**\n"));
    let before = server.requests().len();
    let heap_before = counting_alloc::mark();
    let (mut reflectors, first) = sync_both(&client).await;
    let (heap_synced, heap_peak) = (counting_alloc::live(), counting_alloc::peak());
    let pod_lists = server.requests()[before..]
        .iter()
        .filter(|r| r.resource.as_deref() == Some("pods") && r.verb == Some(Verb::List))
        .count();
    table.line(format!("- initial sync, nodes and pods: run 1 {} ({pod_lists} pod list pages)", ms(first)));
    table.line(format!(
        "- reflector stores hold {} of heap; the sync peaked at {} above the heap before it; RSS {}",
        heap_mib(heap_synced.saturating_sub(heap_before)),
        heap_mib(heap_peak.saturating_sub(heap_before)),
        mib(status_kib("VmRSS:"))
    ));

    let pod_names: Vec<_> = (0..POD_UPDATES)
        .map(|i| i * (pod_count() / POD_UPDATES))
        .map(|p| (Some(format!("team-{}", p % 20)), format!("job-{p:05}")))
        .collect();
    let (latencies, span) = watch_round(
        |ns| Api::<Pod>::namespaced(client.clone(), ns.as_deref().unwrap()),
        pod_names,
        round,
        &mut reflectors.pod_rx,
    )
    .await;
    report_watch(table, "pod", latencies, span);
    let node_names: Vec<_> =
        (0..NODE_UPDATES).map(|n| (None, format!("gpu-{:04}", n * (node_count() / NODE_UPDATES)))).collect();
    let (latencies, span) =
        watch_round(|_| Api::<Node>::all(client.clone()), node_names, round, &mut reflectors.node_rx).await;
    report_watch(table, "node", latencies, span);
    let labelled = reflectors
        .pods
        .state()
        .iter()
        .filter(|p| p.labels().get(ROUND).map(String::as_str) == Some(round))
        .count();
    assert_eq!(labelled, POD_UPDATES, "the pod store has every update");
    assert!(
        reflectors.nodes.state().iter().filter(|n| n.labels().contains_key(ROUND)).count() == NODE_UPDATES
    );
    drop(reflectors);
    // Give the aborted tasks a moment to drop their streams before reading the heap.
    tokio::time::sleep(Duration::from_secs(1)).await;
    table.line(format!(
        "- heap after dropping the reflectors: {} ({} before the sync)",
        heap_mib(counting_alloc::live()),
        heap_mib(heap_before)
    ));

    let mut syncs = vec![first];
    for _ in 1..runs {
        let (r, took) = sync_both(&client).await;
        syncs.push(took);
        drop(r);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    table.line(format!(
        "- initial sync over {runs} fresh runs: {}; heap after them {}",
        summary(syncs),
        heap_mib(counting_alloc::live())
    ));
}

fn report_watch(table: &mut Report, kind: &str, mut latencies: Vec<Duration>, span: Duration) {
    latencies.sort();
    let n = latencies.len();
    table.line(format!(
        "- watch, {n} {kind} patches one after another: write-to-event p50 {} / p99 {} / max {}; burst {} ({:.0} events/s)",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies[n - 1]),
        ms(span),
        n as f64 / span.as_secs_f64()
    ));
}

/// The value after `--name`, if given; exits 2 naming the flag and value when `parse` refuses it.
fn flag<T>(args: &[String], name: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    let value = args.get(i + 1).map(String::as_str);
    Some(value.and_then(parse).unwrap_or_else(|| {
        eprintln!("{name}: invalid value {value:?}");
        std::process::exit(2)
    }))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = !args.iter().any(|a| a == "--bench");
    if smoke {
        SCALE_DOWN.store(10, std::sync::atomic::Ordering::Relaxed);
        println!("smoke run (cargo test): a tenth of the objects, one sync run; `cargo bench` measures");
    }
    let runs = flag(&args, "--runs", |v| v.parse().ok().filter(|&n: &usize| n > 0)).unwrap_or(if smoke {
        1
    } else {
        5
    });
    let transport =
        flag(&args, "--transport", |v| ["in-process", "http", "both"].contains(&v).then(|| v.to_string()))
            .unwrap_or_else(|| "both".to_string());
    if args.iter().any(|a| a == "--keep-managed-fields") {
        KEEP_MANAGED_FIELDS.store(true, std::sync::atomic::Ordering::Relaxed);
        println!("reflectors keep managedFields");
    }
    let mut table = Report::new(
        "apiserver",
        "cargo bench --bench apiserver",
        format!("{} nodes and {} pods; {POD_UPDATES} pod and {NODE_UPDATES} node patches watched; {runs} sync runs", node_count(), pod_count()),
    );
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let baseline = (status_kib("VmRSS:"), counting_alloc::mark());
    let server = ApiServer::new();
    let started = Instant::now();
    populate(&server);
    let seeded = (status_kib("VmRSS:"), counting_alloc::live());
    table.line(format!(
        "- seeded {} nodes and {} pods in {}; the server's store holds {} of heap; RSS {} before, {} after",
        node_count(),
        pod_count(),
        ms(started.elapsed()),
        heap_mib(seeded.1 - baseline.1),
        mib(baseline.0),
        mib(seeded.0)
    ));

    rt.block_on(async {
        if transport != "http" {
            measure(
                &mut table,
                "in-process client (tower service, no sockets)",
                &server,
                server.client(),
                runs,
                "1",
            )
            .await;
        }
        if transport != "in-process" {
            let (addr, handle) = server.serve_http("127.0.0.1:0").await.expect("serve on loopback");
            let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
            let client = Client::try_from(config).expect("HTTP client");
            measure(&mut table, "kube client over HTTP on loopback", &server, client, runs, "2").await;
            handle.shutdown().await;
        }
    });
    table.line(format!("\npeak RSS (VmHWM) {}", mib(status_kib("VmHWM:"))));
    table.write();
}
