//! Crash safety: the agent killed at every step boundary and at every NVML call, and NVML
//! failing at every call, always converges to the target with nothing in use destroyed and no
//! cordon left behind.

mod agent_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agent_support::nvml::{AuditedNvml, KillAt};
use agent_support::Harness;
use geometer::agent::nvml::sim::Fault;
use geometer::agent::nvml::NvmlBackend;
use geometer::agent::reconcile::{StepHook, StepPoint};

const TARGET: &[(&str, u8)] = &[("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.20gb", 6)];

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

/// Progress is driven by watch events only (the poll is long), so no NVML call happens after
/// the agent reports Ready: every kill or fault position counted here lies inside the change.
fn config(h: &Harness) -> geometer::agent::reconcile::AgentConfig {
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
    assert_eq!(keeper.and_then(|i| i.pod.as_deref()), Some("ml/keeper"), "{what}: the kept instance is the same device");
    assert_eq!(h.cordon_state(), (false, false), "{what}: no stray cordon");
    assert!(h.sim.gpu_instances_without_compute(0).unwrap().is_empty(), "{what}: nothing half built");
    assert_eq!(h.mignode().metadata.generation, Some(generation));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_step_boundary_converges() {
    let mut k = 1;
    loop {
        let (h, generation, keeper) = scenario().await;
        let (tx, mut killed) = tokio::sync::mpsc::unbounded_channel();
        let seen = Arc::new(AtomicUsize::new(0));
        let hook: StepHook = Arc::new(move |_: &StepPoint| {
            if seen.fetch_add(1, Ordering::SeqCst) + 1 == k {
                let _ = tx.send(());
                // Never returns: the agent is dropped right here, as if killed.
                return Box::pin(std::future::pending());
            }
            Box::pin(async {})
        });
        let agent = h.spawn_agent(config(&h), Some(hook));
        let was_killed = tokio::select! {
            _ = killed.recv() => true,
            _ = h.wait_ready(generation) => false,
        };
        agent.abort();
        let _ = agent.await;
        if !was_killed {
            assert!(k > 20, "the scenario has every kind of step ({k} boundaries)");
            break;
        }
        let (nvml, _, _) = AuditedNvml::new(h.sim.clone(), h.assignments.clone(), None);
        let again = tokio::spawn(h.agent(config(&h), nvml.clone()).run());
        h.wait_ready(generation).await;
        again.abort();
        assert_converged(&h, generation, &keeper, &nvml.violations.lock().unwrap(), &format!("killed at step boundary {k}"));
        k += 1;
    }
}

async fn kill_at_every_nvml_call(at: fn(u64) -> KillAt) {
    let mut k = 1;
    loop {
        let (h, generation, keeper) = scenario().await;
        let (nvml, mut killed, release) = AuditedNvml::new(h.sim.clone(), h.assignments.clone(), Some(at(k)));
        let agent = tokio::spawn(h.agent(config(&h), nvml.clone() as Arc<dyn NvmlBackend>).run());
        let was_killed = tokio::select! {
            _ = killed.recv() => true,
            _ = h.wait_ready(generation) => false,
        };
        agent.abort();
        let _ = agent.await;
        release.release();
        if !was_killed {
            assert!(k > 50, "the scenario makes many NVML calls ({k})");
            break;
        }
        let (fresh, _, _) = AuditedNvml::new(h.sim.clone(), h.assignments.clone(), None);
        let again = tokio::spawn(h.agent(config(&h), fresh.clone()).run());
        h.wait_ready(generation).await;
        again.abort();
        let mut violations = nvml.violations.lock().unwrap().clone();
        violations.extend(fresh.violations.lock().unwrap().iter().cloned());
        assert_converged(&h, generation, &keeper, &violations, &format!("killed at NVML call {:?}", at(k)));
        k += 1;
    }
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
    let mut k = 1;
    loop {
        let (h, generation, keeper) = scenario().await;
        let fault = Fault::any_call().nth(k);
        h.sim.inject(if after_effect { fault.after_effect() } else { fault });
        let (nvml, _, _) = AuditedNvml::new(h.sim.clone(), h.assignments.clone(), None);
        let agent = tokio::spawn(h.agent(config(&h), nvml.clone()).run());
        h.wait_ready(generation).await;
        let what = format!("NVML call {k} failing (after effect: {after_effect})");
        assert_converged(&h, generation, &keeper, &nvml.violations.lock().unwrap(), &what);
        let struck = h.sim.calls().into_iter().find(|c| c.faulted);
        let Some(struck) = struck else {
            agent.abort();
            assert!(k > 50, "the scenario makes many NVML calls ({k})");
            break;
        };
        // The fault may strike in a round just after Ready was written; the agent reports and
        // retries it all the same, so wait for the report and the Ready that follows.
        h.wait_for(&format!("{what}: the failure of {:?} reported with a retry", struck.call), |h| {
            h.events_with_reason("NvmlError")
                .into_iter()
                .filter_map(|e| e.note)
                .any(|note| note.contains("injected fault") && note.contains("Retrying in"))
                .then_some(())
        })
        .await;
        h.wait_ready(generation).await;
        let failed = h.mignode().status.unwrap().conditions.into_iter().find(|c| c.type_ == "Failed").expect("Failed condition");
        assert_eq!(failed.status, "False", "{what}: cleared once the retry succeeded");
        agent.abort();
        k += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nvml_failure_at_every_call_is_reported_and_retried() {
    fail_every_nvml_call(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nvml_failure_after_every_call_took_effect_is_reported_and_retried() {
    fail_every_nvml_call(true).await;
}
