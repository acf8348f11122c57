//! Where the agent's observations come from, as seams tests can replace: which pod holds which
//! device (the kubelet's PodResources API), the clock, and a hook at every step boundary.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::{SignedDuration, Timestamp};

use crate::observe::pod_resources::{DeviceAssignment, PodResourcesClient};
use geometer_api::AgentStep;

/// Which pod holds which NVIDIA device.
pub trait DeviceAssignments: Send + Sync {
    fn assignments(&self) -> BoxFuture<'_, Result<Vec<DeviceAssignment>, String>>;
}

/// The kubelet's PodResources API on its unix socket; reconnects after a failure (the kubelet
/// restarts without telling anyone).
pub struct KubeletPodResources {
    path: PathBuf,
    client: tokio::sync::Mutex<Option<PodResourcesClient>>,
}

impl KubeletPodResources {
    pub fn new(path: impl Into<PathBuf>) -> KubeletPodResources {
        KubeletPodResources { path: path.into(), client: tokio::sync::Mutex::new(None) }
    }
}

impl DeviceAssignments for KubeletPodResources {
    fn assignments(&self) -> BoxFuture<'_, Result<Vec<DeviceAssignment>, String>> {
        Box::pin(async move {
            let mut slot = self.client.lock().await;
            if slot.is_none() {
                *slot = Some(PodResourcesClient::connect(&self.path).await.map_err(|e| e.to_string())?);
            }
            let client = slot.as_mut().expect("connected above");
            match client.nvidia_assignments().await {
                Ok(list) => Ok(list),
                Err(e) => {
                    *slot = None;
                    Err(e.to_string())
                }
            }
        })
    }
}

/// Assignments held in memory: what a simulated kubelet reports.
#[derive(Debug, Clone, Default)]
pub struct SharedAssignments(Arc<Mutex<Vec<DeviceAssignment>>>);

impl SharedAssignments {
    pub fn set(&self, list: Vec<DeviceAssignment>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = list;
    }

    pub fn update(&self, change: impl FnOnce(&mut Vec<DeviceAssignment>)) {
        change(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }

    pub fn get(&self) -> Vec<DeviceAssignment> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl DeviceAssignments for SharedAssignments {
    fn assignments(&self) -> BoxFuture<'_, Result<Vec<DeviceAssignment>, String>> {
        let list = self.get();
        Box::pin(async move { Ok(list) })
    }
}

/// Wall-clock time that follows tokio's clock: the wall time when the agent started plus
/// tokio's elapsed time. Timeouts compare it with timestamps in status, and tests that pause
/// tokio's clock drive the agent's sense of time with it.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall: Timestamp,
    start: tokio::time::Instant,
}

impl Clock {
    pub fn start() -> Clock {
        Clock { wall: Timestamp::now(), start: tokio::time::Instant::now() }
    }

    pub fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.start.elapsed()).unwrap_or(SignedDuration::MAX);
        self.wall.checked_add(elapsed).unwrap_or(Timestamp::MAX)
    }

    /// Time from now until `t` (zero when it is past).
    pub fn until(&self, t: Timestamp) -> Duration {
        Duration::try_from(t.duration_since(self.now())).unwrap_or(Duration::ZERO)
    }
}

/// A point in the agent's work where a hook runs: right after a step was written to status
/// (recorded, not yet taken), and right after it was taken.
#[derive(Debug, Clone, PartialEq)]
pub enum StepPoint {
    Recorded(AgentStep),
    Taken(AgentStep),
}

/// Called at every [`StepPoint`]; the agent awaits the future before going on. Tests use it to
/// stop the agent at an exact step boundary (a future that never completes, then dropping the
/// agent's task, is a kill at that point).
pub type StepHook = Arc<dyn Fn(&StepPoint) -> BoxFuture<'static, ()> + Send + Sync>;
