//! Draining: do-not-disrupt pods are never evicted, PodDisruptionBudgets are honoured, and an
//! evicted pod that still holds its instance is waited for.

use geometer_testkit::agent as agent_support;

use std::time::Duration;

use agent_support::{Harness, WORKLOADS};
use geometer_agent::nvml::NvmlCall;
use geometer_api::{MigNodePhase, MigNodeStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::json;

fn condition(h: &Harness, type_: &str) -> Option<(String, String, String)> {
    let status = h.mignode().status?;
    let c = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_not_disrupt_pod_is_never_evicted_and_the_drain_times_out_cleanly() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.run_pod("precious", 0, "3g.40gb", 4, &[("geometer.dev/do-not-disrupt", "true")], &[]);
    let mut cfg = h.config();
    cfg.drain.timeout = Duration::from_secs(1);
    // Long enough to see the failure before the retry starts a new drain.
    cfg.backoff = geometer_agent::Backoff::new(Duration::from_millis(500), Duration::from_secs(1));
    let agent = h.spawn_agent(cfg, None);
    h.set_spec(&[(0, &[("3g.40gb", 0), ("1g.10gb", 4)])]).await;

    let (_, reason, message) = h
        .wait_for("DrainBlocked", |h| condition(h, MigNodeStatus::DRAIN_BLOCKED).filter(|c| c.0 == "True"))
        .await;
    assert_eq!(reason, "DoNotDisrupt");
    assert!(message.contains("ml/precious") && message.contains("geometer.dev/do-not-disrupt"), "{message}");
    // Waiting on a protected pod does not cordon the node: nothing can move anyway.
    assert_eq!(h.cordon_state(), (false, false));

    // Phase and condition from one reading: the phase moves on when the retry starts.
    let message = h
        .wait_for("phase Failed with reason DrainTimeout", |h| {
            let status = h.mignode().status?;
            let c =
                status.conditions.iter().find(|c| c.type_ == MigNodeStatus::FAILED && c.status == "True")?;
            (status.phase == MigNodePhase::Failed && c.reason == "DrainTimeout").then(|| c.message.clone())
        })
        .await;
    assert!(message.contains("ml/precious") && message.contains("Retrying in"), "{message}");
    // It retries (backing off) and keeps refusing to evict: repeated events fold into a series.
    h.wait_for("a second drain timeout", |h| {
        let count: i32 = h
            .events_with_reason("DrainTimeout")
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        (count >= 2).then_some(())
    })
    .await;
    agent.abort();

    assert_eq!(h.evictions(), 0, "a do-not-disrupt pod is never evicted");
    assert!(h.pod_exists("precious"));
    assert_eq!(h.running(), vec!["precious"]);
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"], "nothing changed on the GPU");
    assert_eq!(h.cordon_state(), (false, false), "no cordon left behind");
    let pod_events: Vec<_> = h
        .events_with_reason("DrainBlocked")
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("precious"))
        .collect();
    assert!(!pod_events.is_empty(), "the pod itself carries an event saying why");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protection_for_a_duration_is_waited_out_then_the_pod_is_evicted() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.run_pod("short-lived-protection", 0, "7g.80gb", 0, &[("karpenter.sh/do-not-disrupt", "2s")], &[]);
    let agent = h.spawn_agent(h.config(), None);
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.wait_for("DrainBlocked", |h| {
        condition(h, MigNodeStatus::DRAIN_BLOCKED).filter(|c| c.0 == "True" && c.1 == "DoNotDisrupt")
    })
    .await;
    h.wait_ready(generation).await;
    agent.abort();
    assert!(!h.pod_exists("short-lived-protection"));
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_eq!(h.cordon_state(), (false, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_refusal_is_retried_until_the_budget_allows_it() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.run_pod("guarded", 0, "7g.80gb", 0, &[], &[("app", "guarded")]);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guarded", "namespace": WORKLOADS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }))
    .unwrap();
    h.server.seed(&pdb).unwrap();
    let agent = h.spawn_agent(h.config(), None);
    let generation = h.set_spec(&[(0, &[("4g.40gb", 0), ("3g.40gb", 4)])]).await;

    let (_, reason, message) = h
        .wait_for("DrainBlocked by the PDB", |h| {
            condition(h, MigNodeStatus::DRAIN_BLOCKED).filter(|c| c.0 == "True")
        })
        .await;
    assert_eq!(reason, "PodDisruptionBudget");
    assert!(message.contains("ml/guarded"), "{message}");
    h.wait_for("retried evictions", |h| (h.evictions() >= 3).then_some(())).await;
    assert!(h.pod_exists("guarded"));
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"], "nothing changes while the budget refuses");
    assert_eq!(h.cordon_state(), (true, true), "cordoned by us while draining");
    assert!(!h.events_with_reason("EvictionRefused").is_empty());

    Api::<PodDisruptionBudget>::namespaced(h.client.clone(), WORKLOADS)
        .delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    h.wait_ready(generation).await;
    agent.abort();
    assert!(!h.pod_exists("guarded"));
    assert_eq!(h.geometry(0), vec!["3g.40gb@4", "4g.40gb@0"]);
    assert_eq!(h.cordon_state(), (false, false));
    assert_eq!(condition(&h, MigNodeStatus::DRAIN_BLOCKED).unwrap().0, "False");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_without_evictions_is_obeyed_and_its_drain_timeout_applies() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.run_pod("ordinary", 0, "7g.80gb", 0, &[], &[]);
    h.seed_policy(json!({"evictionAllowed": false, "drainTimeoutSeconds": 1}));
    // The agent's own drain timeout is long: only the policy's can end the wait.
    let agent = h.spawn_agent(h.config(), None);
    h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;

    let (_, reason, message) = h
        .wait_for("DrainBlocked", |h| condition(h, MigNodeStatus::DRAIN_BLOCKED).filter(|c| c.0 == "True"))
        .await;
    assert_eq!(reason, "EvictionNotAllowed");
    assert!(message.contains("MigPolicy gpu-pool") && message.contains("ml/ordinary"), "{message}");
    h.wait_for("Failed: DrainTimeout", |h| {
        condition(h, MigNodeStatus::FAILED).filter(|c| c.0 == "True" && c.1 == "DrainTimeout")
    })
    .await;
    agent.abort();
    assert_eq!(h.evictions(), 0);
    assert!(h.pod_exists("ordinary"));
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
    assert_eq!(h.cordon_state(), (false, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_cannot_be_read_allows_no_eviction() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.run_pod("ordinary", 0, "7g.80gb", 0, &[], &[]);
    // Stored under an older, looser CRD: a time limit no u32 holds. Its rules cannot be
    // known, so the agent's own flags (evictions allowed) must not stand in for them.
    h.server
        .seed(&geometer_testkit::crd_bounds::looser_crd(
            "MigPolicy",
            geometer_testkit::crd_bounds::POLICY_TIME_LIMIT,
        ))
        .unwrap();
    h.seed_policy(json!({"evictionAllowed": false}));
    let mut policy = h.server.object_json::<geometer_api::MigPolicy>("", "gpu-pool").unwrap();
    policy["spec"]["solver"] = json!({"timeLimitMs": 4294967296u64});
    h.server.seed_value(policy).unwrap();
    let agent = h.spawn_agent(h.config(), None);
    h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;

    let (_, reason, message) = h
        .wait_for("DrainBlocked", |h| condition(h, MigNodeStatus::DRAIN_BLOCKED).filter(|c| c.0 == "True"))
        .await;
    agent.abort();
    assert_eq!(reason, "EvictionNotAllowed");
    assert!(message.contains("MigPolicy gpu-pool (unreadable)"), "{message}");
    assert_eq!(h.evictions(), 0);
    assert!(h.pod_exists("ordinary"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policys_do_not_disrupt_keys_replace_the_agents() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.run_pod("custom-protected", 0, "3g.40gb", 0, &[("example.com/keep", "true")], &[]);
    h.run_pod("default-key-only", 0, "3g.40gb", 4, &[("geometer.dev/do-not-disrupt", "true")], &[]);
    h.seed_policy(json!({"evictionAllowed": true, "doNotDisruptAnnotations": ["example.com/keep"]}));
    let agent = h.spawn_agent(h.config(), None);
    // Only the instance of the pod with the default key goes: under this policy it may move.
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("1g.10gb", 4)])]).await;
    h.wait_ready(generation).await;
    agent.abort();
    assert!(!h.pod_exists("default-key-only"), "the policy does not list geometer.dev/do-not-disrupt");
    assert!(h.pod_exists("custom-protected"));
    assert_eq!(h.geometry(0), vec!["1g.10gb@4", "3g.40gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_outside_kubernetes_are_waited_for_never_killed() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    let device = h.devices[&(0, "7g.80gb@0".to_string())].clone();
    let pid = h.sim.start_process(0, &device).unwrap();
    let agent = h.spawn_agent(h.config(), None);
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;

    let (_, reason, message) = h
        .wait_for("DrainBlocked by a process", |h| {
            condition(h, MigNodeStatus::DRAIN_BLOCKED).filter(|c| c.0 == "True")
        })
        .await;
    assert_eq!(reason, "ProcessesOutsideKubernetes");
    assert!(message.contains("7g.80gb@0") && message.contains("1 process"), "{message}");
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
    assert_eq!(h.cordon_state(), (true, true), "cordoned so that no pod joins the process meanwhile");

    assert!(h.sim.stop_process(pid));
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_eq!(h.cordon_state(), (false, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_pod_still_holding_its_instance_is_waited_for_before_the_instance_goes() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.run_pod("trainer", 0, "7g.80gb", 0, &[], &[]);
    // Its containers take their time to stop: once evicted it stays terminating, its process
    // still on the instance and the kubelet still reporting the device as its own.
    h.hold_termination("trainer");
    let agent = h.spawn_agent(h.config(), None);
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;

    h.wait_for("the evicted pod terminating", |h| h.terminating("trainer").then_some(())).await;
    let (blocked, _, message) = h
        .wait_for("the drain waiting for the terminating pod", |h| {
            condition(h, MigNodeStatus::DRAIN_BLOCKED).filter(|c| c.2.contains("ml/trainer (terminating)"))
        })
        .await;
    assert_eq!(blocked, "False", "a terminating pod is waited for, not a blockage: {message}");
    // Round after round, the instance the pod still holds is left alone.
    h.wait_for_agent_rounds(5).await;
    assert!(h.terminating("trainer"), "still terminating");
    assert_eq!(h.running(), vec!["trainer"], "its process still runs on the instance");
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
    let destroys =
        |h: &Harness| h.sim.calls().iter().filter(|c| c.call == NvmlCall::DestroyGpuInstance).count();
    assert_eq!(destroys(&h), 0, "no destroy is even tried while the pod holds the instance");
    assert_eq!(h.evictions(), 1, "evicted once; a terminating pod is not evicted again");
    assert_eq!(h.mignode().status.unwrap().phase, MigNodePhase::Draining);

    // Its containers stop: the kubelet deletes it and releases the device, and the change goes on.
    h.end_termination("trainer");
    h.wait_ready(generation).await;
    agent.abort();
    assert!(!h.pod_exists("trainer"));
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_eq!(destroys(&h), 1);
    assert_eq!(h.evictions(), 1);
    assert_eq!(h.cordon_state(), (false, false));
}
