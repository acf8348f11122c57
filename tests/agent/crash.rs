//! Crash safety: the agent killed at every step boundary and at every NVML call, and NVML
//! failing at every call, always converges to the target with nothing in use destroyed and no
//! cordon left behind.
//!
//! Each test first runs the scenario once undisturbed to count its step boundaries or NVML
//! calls, then runs it again for every position, a few at a time (each run has its own API
//! server and GPUs).

use geometer_testkit::agent as agent_support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agent_support::nvml::{AuditedNvml, KillAt};
use agent_support::Harness;
use futures::StreamExt;
use geometer_agent::nvml::sim::Fault;
use geometer_agent::{AgentConfig, StepHook, StepPoint};

const TARGET: &[(&str, u8)] = &[("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.20gb", 6)];

/// Runs at a time.
const PARALLEL: usize = 4;

/// One pod stays on 3g.40gb@0, one must leave 3g.40gb@4, which is replaced by three slices.
/// The spec is written before the agent starts, so every run does the same work.
async fn scenario() -> (Harness, i64, String) {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.run_pod("keeper", 0, "3g.40gb", 0, &[], &[]);
    h.run_pod("mover", 0, "3g.40gb", 4, &[], &[]);
    let keeper_device = h.devices[&(0, "3g.40gb@0".to_string())].clone();
    let generation = h.set_spec(&[(0, TARGET)]).await;
    (h, generation, keeper_device)
}

/// Progress is driven by watch events (the poll is long), so the positions counted in the
/// undisturbed run are the same work in every run.
fn config(h: &Harness) -> AgentConfig {
    let mut cfg = h.config();
    cfg.poll_interval = std::time::Duration::from_secs(5);
    cfg
}

/// The end state every run must reach, whatever happened on the way.
fn assert_converged(h: &Harness, generation: i64, keeper_device: &str, violations: &[String], what: &str) {
    assert!(violations.is_empty(), "{what}: destroyed in use: {violations:?}");
    assert_eq!(h.geometry(0), vec!["1g.10gb@4", "1g.10gb@5", "1g.20gb@6", "3g.40gb@0"], "{what}");
    assert!(h.running().contains(&"keeper".to_string()), "{what}: the pod that stays keeps running");
    assert!(!h.pod_exists("mover"), "{what}");
    let status = h.mignode().status.unwrap();
    let keeper = status.gpus[0].instances.iter().find(|i| i.uuid.as_deref() == Some(keeper_device));
    assert_eq!(
        keeper.and_then(|i| i.pod.as_deref()),
        Some("ml/keeper"),
        "{what}: the kept instance is the same device"
    );
    assert_eq!(h.cordon_state(), (false, false), "{what}: no stray cordon");
    assert!(h.sim.gpu_instances_without_compute(0).unwrap().is_empty(), "{what}: nothing half built");
    assert_eq!(h.mignode().metadata.generation, Some(generation));
}

async fn for_each_position<F: Future<Output = ()>>(positions: u64, run: impl Fn(u64) -> F) {
    futures::stream::iter(1..=positions).for_each_concurrent(PARALLEL, run).await;
}

/// A fresh agent after a kill must finish the job.
async fn restart_and_converge(h: &Harness, generation: i64, keeper: &str, earlier: &[String], what: &str) {
    let (nvml, _, _) = AuditedNvml::new(h.sim.clone(), h.assignments.clone(), None);
    let again = tokio::spawn(h.agent(config(h), nvml.clone()).run());
    h.wait_ready(generation).await;
    again.abort();
    let mut violations = earlier.to_vec();
    violations.extend(nvml.violations.lock().unwrap().iter().cloned());
    assert_converged(h, generation, keeper, &violations, what);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_step_boundary_converges() {
    let counting_hook = |seen: Arc<AtomicUsize>,
                         kill_at: usize,
                         killed: tokio::sync::mpsc::UnboundedSender<()>|
     -> StepHook {
        Arc::new(move |_: &StepPoint| {
            if seen.fetch_add(1, Ordering::SeqCst) + 1 == kill_at {
                let _ = killed.send(());
                // Never returns: the agent is dropped right here, as if killed.
                return Box::pin(std::future::pending());
            }
            Box::pin(async {})
        })
    };
    let (h, generation, _) = scenario().await;
    let seen = Arc::new(AtomicUsize::new(0));
    let agent = h.spawn_agent(
        config(&h),
        Some(counting_hook(seen.clone(), 0, tokio::sync::mpsc::unbounded_channel().0)),
    );
    h.wait_ready(generation).await;
    agent.abort();
    let boundaries = seen.load(Ordering::SeqCst) as u64;
    assert!(boundaries >= 28, "every step is recorded and taken: {boundaries} boundaries");

    for_each_position(boundaries, |k| async move {
        let (h, generation, keeper) = scenario().await;
        let (tx, mut killed) = tokio::sync::mpsc::unbounded_channel();
        let agent =
            h.spawn_agent(config(&h), Some(counting_hook(Arc::new(AtomicUsize::new(0)), k as usize, tx)));
        tokio::select! {
            _ = killed.recv() => {}
            _ = h.wait_ready(generation) => {}
        }
        agent.abort();
        let _ = agent.await;
        restart_and_converge(&h, generation, &keeper, &[], &format!("killed at step boundary {k}")).await;
    })
    .await;
}

async fn kill_at_every_nvml_call(at: fn(u64) -> KillAt) {
    let (h, generation, _) = scenario().await;
    let (nvml, _, _) = AuditedNvml::new(h.sim.clone(), h.assignments.clone(), None);
    let agent = tokio::spawn(h.agent(config(&h), nvml.clone()).run());
    h.wait_ready(generation).await;
    agent.abort();
    let calls = nvml.calls();
    assert!(calls > 50, "the scenario makes many NVML calls ({calls})");

    for_each_position(calls, |k| async move {
        let (h, generation, keeper) = scenario().await;
        let (nvml, mut killed, release) = AuditedNvml::new(h.sim.clone(), h.assignments.clone(), Some(at(k)));
        let agent = tokio::spawn(h.agent(config(&h), nvml.clone()).run());
        tokio::select! {
            _ = killed.recv() => {}
            _ = h.wait_ready(generation) => {}
        }
        agent.abort();
        let _ = agent.await;
        release.release();
        let earlier = nvml.violations.lock().unwrap().clone();
        restart_and_converge(&h, generation, &keeper, &earlier, &format!("killed at NVML call {:?}", at(k)))
            .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_before_every_nvml_call_converges() {
    kill_at_every_nvml_call(KillAt::Before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_every_nvml_call_takes_effect_converges() {
    kill_at_every_nvml_call(KillAt::After).await;
}

async fn fail_every_nvml_call(after_effect: bool) {
    let (h, generation, _) = scenario().await;
    let agent = h.spawn_agent(config(&h), None);
    h.wait_ready(generation).await;
    agent.abort();
    let calls = h.sim.call_count();
    assert!(calls > 50, "the scenario makes many NVML calls ({calls})");

    for_each_position(calls, |k| async move {
        let (h, generation, keeper) = scenario().await;
        let fault = Fault::any_call().nth(k);
        h.sim.inject(if after_effect { fault.after_effect() } else { fault });
        let (nvml, _, _) = AuditedNvml::new(h.sim.clone(), h.assignments.clone(), None);
        let agent = tokio::spawn(h.agent(config(&h), nvml.clone()).run());
        h.wait_ready(generation).await;
        let what = format!("NVML call {k} failing (after effect: {after_effect})");
        if let Some(struck) = h.sim.calls().into_iter().find(|c| c.faulted) {
            // The fault may strike in a round just after Ready was written; the agent reports
            // and retries it all the same, so wait for the report and the Ready that follows.
            h.wait_for(&format!("{what}: the failure of {:?} reported with a retry", struck.call), |h| {
                h.events_with_reason("NvmlError")
                    .into_iter()
                    .filter_map(|e| e.note)
                    .any(|note| note.contains("injected fault") && note.contains("Retrying in"))
                    .then_some(())
            })
            .await;
            h.wait_ready(generation).await;
            let failed = h
                .mignode()
                .status
                .unwrap()
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Failed")
                .expect("Failed condition");
            assert_eq!(failed.status, "False", "{what}: cleared once the retry succeeded");
        }
        agent.abort();
        assert_converged(&h, generation, &keeper, &nvml.violations.lock().unwrap(), &what);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nvml_failure_at_every_call_is_reported_and_retried() {
    fail_every_nvml_call(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nvml_failure_after_every_call_took_effect_is_reported_and_retried() {
    fail_every_nvml_call(true).await;
}
