//! Synthetic clusters for the planner benchmarks: 8 GPUs per node, mixed models (A100-40GB,
//! A100-80GB, H100-80GB, H200), geometries from mig-parted-like configs, half the GPUs busy,
//! pending pods with a realistic profile mix, some pinned to a zone, three priorities.
#![allow(dead_code)]

use std::collections::BTreeMap;

use geometer_solver::catalog::{Catalog, GpuModel};
use geometer_solver::geometry::{place, Geometry};
use geometer_solver::snapshot::{Gpu, Instance, Node, Pod, Policy, Snapshot};

/// Small deterministic generator (xorshift64*), so every run plans the same clusters.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

const MODELS: [&str; 4] = ["A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"];

/// Per model: profile names by size class 1g, 2g, 3g, 4g, 7g.
fn names(model: &str) -> [&'static str; 5] {
    match model {
        "A100-40GB" => ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
        "H200-141GB" => ["1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
        _ => ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    }
}

/// mig-parted-like configs as counts of (1g, 2g, 3g, 4g, 7g); `None`: MIG on, no instances.
const CONFIGS: [Option<[usize; 5]>; 6] = [
    Some([7, 0, 0, 0, 0]), // all-1g
    Some([1, 3, 0, 0, 0]), // all-2g
    Some([0, 0, 2, 0, 0]), // all-3g
    Some([2, 1, 1, 0, 0]), // all-balanced
    Some([0, 0, 0, 0, 1]), // all-7g
    None,
];

fn config_geometry(model: &GpuModel, config: [usize; 5]) -> Geometry {
    let names = names(&model.key);
    let ids: Vec<usize> = config
        .iter()
        .enumerate()
        .flat_map(|(i, &n)| std::iter::repeat_n(model.profile(names[i]).expect("profile in catalog"), n))
        .collect();
    place(model, &Geometry::empty(), &ids).expect("config fits")
}

/// `gpus` GPUs (8 per node, rounded up) and `pods` pending pods; half the GPUs busy.
pub(crate) fn cluster(gpus: usize, pods: usize, seed: u64) -> Snapshot {
    cluster_with(gpus, pods, seed, 0.5)
}

/// The same shape with a `busy_share` of GPUs holding pods (on a busy GPU three in four
/// instances hold one).
pub(crate) fn cluster_with(gpus: usize, pods: usize, seed: u64, busy_share: f64) -> Snapshot {
    let catalog = Catalog::builtin();
    let mut rng = Rng::new(seed);
    let mut snapshot = Snapshot::default();
    let nodes = gpus.div_ceil(8);
    let mut left = gpus;
    for n in 0..nodes {
        let key = MODELS[n % MODELS.len()];
        let model = catalog.find(key).unwrap();
        let name = format!("node-{n:05}");
        let mut node = Node {
            name: name.clone(),
            // Zones cut across models (every zone has every model), as in a real cluster.
            labels: BTreeMap::from([
                ("pool".into(), key.to_string()),
                ("zone".into(), format!("z{}", (n / MODELS.len()) % 4)),
            ]),
            free_cpu_millis: Some(64_000 + rng.below(64) * 1000),
            free_memory_bytes: Some((512u64 + rng.below(512)) << 30),
            ..Node::default()
        };
        let config = CONFIGS[rng.below(CONFIGS.len() as u64) as usize];
        for index in 0..8.min(left) {
            let geometry = config.map(|c| config_geometry(model, c)).unwrap_or_default();
            let busy = rng.chance(busy_share);
            let mut instances = Vec::new();
            for p in geometry.instances() {
                let profile = model.profile_info(p.profile).name.clone();
                let pod = if busy && rng.chance(0.75) {
                    let pod_name = format!("run-{n}-{index}-{}", p.start);
                    snapshot.running.push(Pod {
                        namespace: "batch".into(),
                        name: pod_name.clone(),
                        requests: BTreeMap::from([(profile.clone(), 1)]),
                        cpu_millis: 2000,
                        node: Some(name.clone()),
                        ..Pod::default()
                    });
                    Some(geometer_solver::PodKey::new("batch", &pod_name))
                } else {
                    None
                };
                instances.push(Instance { profile, start: p.start, pod });
            }
            node.gpus.push(Gpu { index: index as u32, model: key.to_string(), instances });
        }
        left -= node.gpus.len();
        snapshot.nodes.push(node);
    }
    for i in 0..pods {
        let key = MODELS[rng.below(MODELS.len() as u64) as usize];
        let size = match rng.below(100) {
            0..50 => 0,
            50..75 => 1,
            75..90 => 2,
            90..96 => 3,
            _ => 4,
        };
        let mut pod = Pod {
            namespace: format!("team-{}", i % 7),
            name: format!("job-{i:05}"),
            priority: [0, 100, 1000][rng.below(3) as usize],
            requests: BTreeMap::from([(names(key)[size].to_string(), 1)]),
            cpu_millis: 2000,
            memory_bytes: 16 << 30,
            ..Pod::default()
        };
        if rng.chance(0.25) {
            pod.node_selector.insert("zone".into(), format!("z{}", rng.below(4)));
        }
        snapshot.pending.push(pod);
    }
    snapshot
}

pub(crate) fn with_eviction(mut snapshot: Snapshot) -> Snapshot {
    snapshot.policy = Some(Policy { eviction_allowed: true, ..Policy::default() });
    snapshot
}

/// The benchmark sizes: (GPUs, pending pods), half the GPUs busy.
pub(crate) const SIZES: [(usize, usize); 8] =
    [(10, 10), (100, 100), (1000, 10), (1000, 1000), (1000, 5000), (8000, 10), (8000, 1000), (8000, 5000)];

/// A contended cluster: most GPUs busy, so pending pods compete for the room left.
pub(crate) const BUSY_SHARE: f64 = 0.9;
pub(crate) const BUSY_SIZES: [(usize, usize); 3] = [(100, 100), (1000, 1000), (8000, 5000)];

/// The largest half-busy clusters the planner is held to: 5,000 and 65,000 nodes of 8 GPUs.
pub(crate) const LARGE_SIZES: [(usize, usize); 2] = [(40_000, 20_000), (520_000, 100_000)];
