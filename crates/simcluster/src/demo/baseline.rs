//! The same workload replayed, at the same time, on a second simulated cluster that keeps its
//! initial layout: what the cluster does without Geometer. The summary puts the two side by
//! side (pods served, waits, memory slices in use), so the gain shows in the first minute.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use geometer_apiserver::ApiServer;
use k8s_openapi::api::core::v1::Namespace;
use tokio::task::JoinHandle;

use super::scenario::Scenario;
use super::summary::{self, Summary, UsageSample};
use super::workload::{self, Arrival, Submissions};
use super::{DemoError, DemoOptions, NAMESPACE};
use crate::SimCluster;

const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// The replay while it runs; dropping it stops it.
pub(super) struct Baseline {
    cluster: Arc<SimCluster>,
    submissions: Submissions,
    samples: Arc<Mutex<Vec<UsageSample>>>,
    tasks: Vec<JoinHandle<()>>,
    _server: ApiServer,
}

impl Drop for Baseline {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts the replay of `arrivals` on a fresh copy of the scenario's cluster, with no
/// controller and no agents: no GPU ever changes.
pub(super) async fn start(
    scenario: &Scenario,
    options: &DemoOptions,
    arrivals: &[Arrival],
) -> Result<Baseline, DemoError> {
    let server = ApiServer::new();
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}})).expect("namespace");
    server.seed(&ns).map_err(|e| DemoError::Setup(e.to_string()))?;
    let cluster = Arc::new(SimCluster::start(&server, &scenario.cluster).await?);
    let client = server.client();
    workload::start_chat(&client, NAMESPACE).await.map_err(DemoError::Setup)?;
    let submissions = Submissions::default();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let play = tokio::spawn(workload::play(
        client,
        NAMESPACE.to_string(),
        arrivals.to_vec(),
        options.speed,
        cluster.ledger().clone(),
        submissions.clone(),
    ));
    let sampler = {
        let (cluster, samples) = (cluster.clone(), samples.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SAMPLE_EVERY).await;
                let usage = cluster.slice_usage();
                let sample = UsageSample { at: Instant::now(), used: usage.used, total: usage.total };
                samples.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
            }
        })
    };
    Ok(Baseline { cluster, submissions, samples, tasks: vec![play, sampler], _server: server })
}

impl Baseline {
    /// What the replay served, and its mean memory-slice use until `last_arrival`.
    pub(super) fn finish(self, last_arrival: Instant) -> Summary {
        let mut summary = summary::summarize(&self.submissions.all(), &self.cluster.ledger().runs());
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
        summary.utilisation_before = summary::mean_utilisation(&samples, None, Some(last_arrival));
        summary
    }
}
