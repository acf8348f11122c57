//! A cluster for the real controller on the in-memory API server, without agents: Nodes and
//! MigNodes whose agent reports Ready, and pending pods as the scheduler leaves them.

use std::sync::Arc;
use std::time::Duration;

use geometer_api::{MigNode, MigPlan, MigPolicy};
use geometer_apiserver::ApiServer;
use geometer_controller::Health;
use geometer_controller::LeaseSettings;
use geometer_controller::Metrics;
use geometer_controller::{self as controller, Settings};
use geometer_solver::catalog::Catalog;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

pub struct World {
    pub server: ApiServer,
}

/// A running controller and what it reports.
pub struct Running {
    pub metrics: Arc<Metrics>,
    pub task: JoinHandle<Result<(), controller::RunError>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Running {
    /// Value of a counter or gauge line of `/metrics`, e.g. `geometer_rounds_total{outcome="unchanged"}`.
    pub fn metric(&self, series: &str) -> f64 {
        self.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0.0)
    }

    /// Waits until the controller has finished `passes` more passes over the cluster than when
    /// called (`geometer_passes_total`): a test that checks that nothing happens checks it after
    /// the controller had its chances to act.
    pub async fn wait_for_passes(&self, passes: u64) {
        let target = self.metrics.passes() + passes;
        wait_for(&format!("{passes} more controller passes"), || {
            (self.metrics.passes() >= target).then_some(())
        })
        .await
    }
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl World {
    pub fn new() -> World {
        let server = ApiServer::new();
        for crd in geometer_api::crds() {
            server.seed(&crd).expect("CRD");
        }
        server
            .seed(&serde_json::from_value::<Namespace>(json!({"metadata": {"name": "ml"}})).unwrap())
            .unwrap();
        World { server }
    }

    /// A node in `pool` with one H100-80GB per entry of `gpus`, each a list of
    /// `(profile, start, pod using it)`.
    pub fn node(&self, name: &str, pool: &str, gpus: &[&[(&str, u8, Option<&str>)]]) {
        self.server
            .seed_value(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"pool": pool}},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}, "capacity": {"cpu": "64", "memory": "512Gi"}}}))
            .expect("node");
        let inventory: Vec<Value> = gpus
            .iter()
            .enumerate()
            .map(|(index, instances)| {
                json!({"index": index, "uuid": format!("GPU-{name}-{index}"), "model": "H100-80GB", "pciDeviceId": "0x233010DE",
                    "migMode": {"current": true, "pending": true},
                    "instances": instances.iter().enumerate().map(|(i, (profile, start, pod))| json!({
                        "profile": profile, "start": start, "size": 1, "gpuInstanceId": i, "pod": pod})).collect::<Vec<_>>()})
            })
            .collect();
        self.server
            .seed_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode",
                "metadata": {"name": name, "generation": 1},
                "spec": {"gpus": []},
                "status": {"gpus": inventory, "gpuCount": gpus.len(), "phase": "Ready", "observedGeneration": 1}}))
            .expect("mignode");
    }

    pub fn policy(&self, name: &str, mode: &str, extra: Value) {
        let mut spec = json!({"mode": mode, "nodeSelector": {"matchLabels": {"pool": name}},
            "batching": {"idleSeconds": 1, "maxSeconds": 2}, "stabilisationSeconds": 0});
        if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        self.server
            .seed_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": name}, "spec": spec}))
            .expect("policy");
    }

    /// A pending pod the scheduler could not place, wanting one `profile` slice.
    pub fn pending(&self, name: &str, profile: &str) {
        self.server
            .seed_value(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {"containers": [{"name": "main", "image": "x",
                    "resources": {"limits": {format!("nvidia.com/mig-{profile}"): "1"}}}]},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}))
            .expect("pod");
    }

    pub fn start(&self, lease: Option<&str>) -> Running {
        let identity = lease.unwrap_or("controller-0");
        let mut settings = Settings::new(identity, Arc::new(Catalog::builtin().clone()));
        settings.resync = Duration::from_millis(500);
        settings.lease = lease.map(|id| LeaseSettings {
            duration_seconds: 2,
            grace_seconds: 1,
            ..LeaseSettings::new("default", id)
        });
        let metrics = Arc::new(Metrics::new());
        let task = tokio::spawn(controller::run(
            self.server.client(),
            settings,
            metrics.clone(),
            Arc::new(Health::default()),
            std::future::pending(),
        ));
        Running { metrics, task }
    }

    pub fn plans(&self) -> Vec<MigPlan> {
        let mut plans = self.server.objects::<MigPlan>();
        plans.sort_by_key(|p| p.metadata.name.clone());
        plans
    }

    pub fn mignode(&self, name: &str) -> MigNode {
        self.server.object::<MigNode>("", name).expect("mignode")
    }

    pub fn pod(&self, name: &str) -> Pod {
        self.server.object::<Pod>("ml", name).expect("pod")
    }

    pub fn node_object(&self, name: &str) -> Node {
        self.server.object::<Node>("", name).expect("node")
    }

    pub fn policy_object(&self, name: &str) -> MigPolicy {
        self.server.object::<MigPolicy>("", name).expect("policy")
    }
}

pub use crate::wait::wait_for;
