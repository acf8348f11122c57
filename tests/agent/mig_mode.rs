//! Turning MIG mode on: only on an idle GPU, and a change pending a GPU reset is reported.

use geometer_testkit::agent as agent_support;

use agent_support::{recording_hook, Harness, SimGpuOptions};
use geometer_agent::nvml::sim::SimReset;
use geometer_agent::nvml::NvmlBackend;
use geometer_api::StepAction::*;
use serde_json::json;

const MIG_OFF: SimGpuOptions = SimGpuOptions::MIG_OFF;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_mode_is_turned_on_only_after_the_pod_holding_the_gpu_left() {
    let h = Harness::new_with(&[("H100-80GB", &[], MIG_OFF)]).await;
    let uuid = h.sim.devices().unwrap()[0].uuid.clone();
    h.run_whole_gpu_pod("whole", 0, &uuid);
    let (hook, steps) = recording_hook(h.server.clone());
    let agent = h.spawn_agent(h.config(), Some(hook));
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.wait_ready(generation).await;
    agent.abort();

    assert_eq!(
        *steps.lock().unwrap(),
        vec![
            Cordon,
            Evict,
            EnableMigMode,
            CreateGpuInstance,
            CreateGpuInstance,
            CreateComputeInstance,
            CreateComputeInstance,
            Verify,
            RestartDevicePlugin,
            WaitForAllocatable,
            Uncordon,
        ]
    );
    assert!(!h.pod_exists("whole"));
    assert!(h.sim.devices().unwrap()[0].mig_mode.unwrap().current);
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert_eq!(h.cordon_state(), (false, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_time_sharing_the_whole_gpu_leaves_before_mig_mode_is_turned_on() {
    let h = Harness::new_with(&[("H100-80GB", &[], MIG_OFF)]).await;
    let uuid = h.sim.devices().unwrap()[0].uuid.clone();
    h.run_whole_gpu_pod_as("replica-0", 0, &uuid, &format!("{uuid}::0"));
    h.run_whole_gpu_pod_as("replica-1", 0, &uuid, &format!("{uuid}::1"));
    let (hook, steps) = recording_hook(h.server.clone());
    let agent = h.spawn_agent(h.config(), Some(hook));
    let generation = h.set_spec(&[(0, &[("7g.80gb", 0)])]).await;
    h.wait_ready(generation).await;
    agent.abort();

    assert!(!h.pod_exists("replica-0") && !h.pod_exists("replica-1"));
    let evictions = steps.lock().unwrap().iter().filter(|s| **s == Evict).count();
    assert_eq!(evictions, 1, "both replicas are known from the start and drained together");
    assert!(h.sim.devices().unwrap()[0].mig_mode.unwrap().current);
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mig_mode_pending_a_reset_is_reported_then_picked_up_after_the_reset() {
    let h = Harness::new_with(&[("A100-40GB", &[], MIG_OFF)]).await;
    let agent = h.spawn_agent(h.config(), None);
    let generation = h.set_spec(&[(0, &[("7g.40gb", 0)])]).await;

    let failed = h.wait_for("Failed: MigModePendingReset", Harness::failed_condition).await;
    assert_eq!(failed.reason, "MigModePendingReset");
    assert!(failed.message.contains("nvidia-smi -r -i 0"), "{}", failed.message);
    assert!(
        failed.message.contains("on Ampere") && failed.message.contains("dcgm-exporter"),
        "{}",
        failed.message
    );
    assert!(failed.message.contains("stays cordoned by Geometer"), "{}", failed.message);
    assert!(
        failed.message.contains("GPU 0 has [], target [7g.40gb@0]"),
        "the unfinished GPU is named: {}",
        failed.message
    );
    assert_eq!(h.cordon_state(), (true, true), "cordoned, with a condition saying why");
    assert!(h.geometry(0).is_empty());

    h.sim.reset_gpu(0).unwrap();
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["7g.40gb@0"]);
    assert_eq!(h.cordon_state(), (false, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_outside_kubernetes_keeps_mig_mode_off_until_it_ends() {
    let h = Harness::new_with(&[("H100-80GB", &[], MIG_OFF)]).await;
    let pid = h.sim.start_gpu_process(0).unwrap();
    let agent = h.spawn_agent(h.config(), None);
    let generation = h.set_spec(&[(0, &[("7g.80gb", 0)])]).await;

    let failed = h.wait_for("Failed: InstanceInUse", Harness::failed_condition).await;
    assert_eq!(failed.reason, "InstanceInUse");
    assert!(failed.message.contains(&format!("pids {pid}")), "{}", failed.message);
    assert!(
        !h.sim.calls().iter().any(|c| c.call == geometer_agent::nvml::NvmlCall::SetMigMode),
        "MIG mode is not touched while NVML reports a process on the GPU"
    );

    h.sim.stop_process(pid);
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_hopper_a_client_holding_the_gpu_is_named_and_the_change_completes_once_it_lets_go() {
    let h = Harness::new_with(&[("H100-80GB", &[], MIG_OFF)]).await;
    h.sim.open_client(0, "dcgm-exporter").unwrap();
    let agent = h.spawn_agent(h.config(), None);
    let generation = h.set_spec(&[(0, &[("7g.80gb", 0)])]).await;

    let failed = h.wait_for("Failed: MigModePendingReset", Harness::failed_condition).await;
    assert!(failed.message.contains("another NVML client holds the GPU"), "{}", failed.message);
    assert!(!failed.message.contains("on Ampere"), "{}", failed.message);

    h.sim.close_client(0, "dcgm-exporter").unwrap();
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
}

fn resetting(h: &Harness) -> (geometer_agent::AgentConfig, SimReset) {
    let reset = SimReset::new(h.sim.clone());
    let mut cfg = h.config();
    cfg.gpu_reset = Some(std::sync::Arc::new(reset.clone()));
    (cfg, reset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_resets_allowed_only_the_ampere_gpu_that_changes_is_reset_and_its_neighbour_keeps_working() {
    let busy = SimGpuOptions::default();
    let h = Harness::new_with(&[("A100-40GB", &[], MIG_OFF), ("A100-40GB", &[("7g.40gb", 0)], busy)]).await;
    let target = h.sim.devices().unwrap()[0].uuid.clone();
    h.run_pod("neighbour", 1, "7g.40gb", 0, &[], &[]);
    h.seed_policy(json!({"allowGpuReset": true}));
    let (cfg, reset) = resetting(&h);
    let agent = h.spawn_agent(cfg, None);
    let generation = h.set_spec(&[(0, &[("7g.40gb", 0)])]).await;
    h.wait_ready(generation).await;
    agent.abort();

    assert_eq!(h.geometry(0), vec!["7g.40gb@0"]);
    assert_eq!(*reset.resets.lock().unwrap(), vec![target], "only the GPU whose mode changes");
    assert_eq!(h.geometry(1), vec!["7g.40gb@0"], "the neighbour is left as it is");
    assert!(h.running().contains(&"neighbour".to_string()), "and its pod keeps running");
    assert_eq!(h.events_with_reason("GpuReset").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reset_undoes_the_pending_mode_so_no_later_reboot_flips_the_gpu() {
    let h = Harness::new_with(&[("A100-40GB", &[], MIG_OFF)]).await;
    let (cfg, reset) = resetting(&h);
    reset.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    // Stopped between two rounds before the GPU is read: a retry in progress (it sets the
    // pending mode again before it resets) finishes, undo included.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = h.agent(cfg.clone(), std::sync::Arc::new(h.sim.clone()));
    let agent = tokio::spawn(agent.run_until(async { stopped.await.unwrap_or_default() }));
    let generation = h.set_spec(&[(0, &[("7g.40gb", 0)])]).await;

    let failed = h.wait_for("a GpuResetFailed event", |h| h.events_with_reason("GpuResetFailed").pop()).await;
    stop.send(()).unwrap();
    agent.await.unwrap();
    let note = failed.note.unwrap_or_default();
    assert!(note.contains("undone") && note.contains("not supported"), "{note}");
    let mode = h.sim.devices().unwrap()[0].mig_mode.unwrap();
    assert!(!mode.current && !mode.pending, "nothing pending after the failure: {mode:?}");

    reset.fail.store(false, std::sync::atomic::Ordering::SeqCst);
    let agent = h.spawn_agent(cfg, None);
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["7g.40gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_does_not_allow_resets_keeps_the_agent_from_resetting() {
    let h = Harness::new_with(&[("A100-40GB", &[], MIG_OFF)]).await;
    h.seed_policy(json!({"allowGpuReset": false}));
    let (cfg, reset) = resetting(&h);
    let agent = h.spawn_agent(cfg, None);
    h.set_spec(&[(0, &[("7g.40gb", 0)])]).await;

    let failed = h.wait_for("Failed: MigModePendingReset", Harness::failed_condition).await;
    agent.abort();
    assert_eq!(failed.reason, "MigModePendingReset");
    assert!(reset.resets.lock().unwrap().is_empty(), "never reset");
}
