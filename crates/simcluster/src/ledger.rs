//! What happened to each pod and node, as the simulated scheduler, kubelet and device plugin
//! saw it: a live event stream for displays and a ledger with exact instants for summaries
//! (API timestamps only have second precision).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::broadcast;

/// One thing the simulated cluster did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimEvent {
    /// The scheduler bound a pod (`namespace/name`) to a node.
    Scheduled { pod: String, node: String },
    /// The scheduler found no node; `message` is what `PodScheduled` says.
    Unschedulable { pod: String, message: String },
    /// The kubelet started a pod on these MIG devices (`1g.10gb on GPU 3`).
    Started { pod: String, node: String, devices: Vec<String> },
    /// The pod ran to its end.
    Succeeded { pod: String, node: String },
    /// The pod was deleted (evicted) while it ran; its slices are free again.
    Stopped { pod: String, node: String },
    /// The kubelet refused the pod (its devices were gone).
    AdmissionFailed { pod: String, node: String, message: String },
    /// The device plugin (re)started and the node advertises these MIG resources.
    Advertised { node: String, resources: BTreeMap<String, u64>, start: u32 },
}

/// How a pod's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Succeeded,
    /// Deleted while running: an eviction, or a person.
    Stopped,
    AdmissionFailed,
}

/// One pod's run, by uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRun {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    pub started: Instant,
    pub ended: Option<(Instant, Ending)>,
    /// Profiles of the MIG devices it held.
    pub profiles: Vec<String>,
}

pub struct Ledger {
    runs: Mutex<BTreeMap<String, PodRun>>,
    events: broadcast::Sender<SimEvent>,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger { runs: Mutex::new(BTreeMap::new()), events: broadcast::channel(8192).0 }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<SimEvent> {
        self.events.subscribe()
    }

    pub fn emit(&self, event: SimEvent) {
        let _ = self.events.send(event);
    }

    pub fn started(&self, uid: &str, run: PodRun) {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).insert(uid.to_string(), run);
    }

    pub fn ended(&self, uid: &str, ending: Ending) {
        if let Some(run) = self.runs.lock().unwrap_or_else(|p| p.into_inner()).get_mut(uid) {
            run.ended.get_or_insert((Instant::now(), ending));
        }
    }

    /// Every run so far, by pod uid.
    pub fn runs(&self) -> BTreeMap<String, PodRun> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn run(&self, uid: &str) -> Option<PodRun> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).get(uid).cloned()
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new()
    }
}
