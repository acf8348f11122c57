//! The agent's steps, in order, against the in-memory API server and simulated GPUs.

use geometer_testkit::agent as agent_support;

use std::collections::BTreeMap;

use agent_support::{recording_hook, Harness, NODE};
use geometer_api::{MigNodeStatus, StepAction::*};
use k8s_openapi::api::core::v1::Node;

fn mig_allocatable(node: &Node) -> BTreeMap<String, String> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| k.starts_with("nvidia.com/mig-") && v.0 != "0")
        .map(|(k, v)| (k, v.0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_without_eviction_takes_every_step_in_order() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    let (hook, steps) = recording_hook(h.server.clone());
    let agent = h.spawn_agent(h.config(), Some(hook));
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)])]).await;
    let mignode = h.wait_ready(generation).await;

    // The free 7g.80gb is advertised, so the node is cordoned before it goes; nothing to drain.
    assert_eq!(
        *steps.lock().unwrap(),
        vec![
            Cordon,
            DestroyComputeInstance,
            DestroyGpuInstance,
            CreateGpuInstance,
            CreateGpuInstance,
            CreateGpuInstance,
            CreateComputeInstance,
            CreateComputeInstance,
            CreateComputeInstance,
            Verify,
            RestartDevicePlugin,
            WaitForAllocatable,
            Uncordon,
        ]
    );
    assert_eq!(h.geometry(0), vec!["1g.10gb@6", "2g.20gb@4", "3g.40gb@0"]);
    assert_eq!(h.cordon_state(), (false, false), "our cordon is lifted, mark and all");
    assert_eq!(
        mig_allocatable(&h.node()),
        BTreeMap::from([
            ("nvidia.com/mig-1g.10gb".to_string(), "1".to_string()),
            ("nvidia.com/mig-2g.20gb".to_string(), "1".to_string()),
            ("nvidia.com/mig-3g.40gb".to_string(), "1".to_string()),
        ])
    );
    let status = mignode.status.unwrap();
    assert_eq!(status.step, None);
    assert!(!status.cordoned_by_geometer);
    assert_eq!(status.gpus[0].instances.len(), 3);
    assert!(status.gpus[0].instances.iter().all(|i| i.uuid.is_some()), "every instance is a MIG device");
    for (t, want) in [
        (MigNodeStatus::READY, "True"),
        (MigNodeStatus::RECONFIGURING, "False"),
        (MigNodeStatus::FAILED, "False"),
    ] {
        let c = status.conditions.iter().find(|c| c.type_ == t).unwrap_or_else(|| panic!("condition {t}"));
        assert_eq!(c.status, want, "{t}: {c:?}");
    }
    // The Ready event follows the Ready status.
    h.wait_for("the Ready event", |h| (!h.events_with_reason("Ready").is_empty()).then_some(())).await;
    // Only now: aborting the agent between its Ready status and its Ready event loses the event.
    agent.abort();
    for reason in ["Cordoned", "Repartitioned", "Uncordoned"] {
        let all: Vec<_> = h.events().into_iter().map(|e| (e.reason, e.note)).collect();
        assert!(!h.events_with_reason(reason).is_empty(), "event {reason} among {all:?}");
    }
    assert_eq!(h.evictions(), 0);
    assert_eq!(h.plugin_restarts(), 1, "the device plugin is restarted once, by eviction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_created_largest_first_at_their_planned_placements() {
    let h = Harness::new(&[("H100-80GB", &[])]).await;
    let steps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = steps.clone();
    let hook: geometer_agent::StepHook = std::sync::Arc::new(move |p: &geometer_agent::StepPoint| {
        if let geometer_agent::StepPoint::Recorded(s) = p {
            if s.action == CreateGpuInstance {
                log.lock().unwrap().push(s.instance.clone().unwrap().to_string());
            }
        }
        Box::pin(async {})
    });
    let agent = h.spawn_agent(h.config(), Some(hook));
    let generation =
        h.set_spec(&[(0, &[("1g.10gb", 1), ("3g.40gb", 4), ("1g.10gb", 0), ("2g.20gb", 2)])]).await;
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(*steps.lock().unwrap(), vec!["3g.40gb@4", "2g.20gb@2", "1g.10gb@0", "1g.10gb@1"]);
    assert_eq!(h.geometry(0), vec!["1g.10gb@0", "1g.10gb@1", "2g.20gb@2", "3g.40gb@4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_slices_to_free_space_needs_no_cordon_and_leaves_pods_alone() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0)])]).await;
    h.run_pod("trainer", 0, "3g.40gb", 0, &[], &[]);
    let (hook, steps) = recording_hook(h.server.clone());
    let agent = h.spawn_agent(h.config(), Some(hook));
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    let mignode = h.wait_ready(generation).await;
    agent.abort();

    assert_eq!(
        *steps.lock().unwrap(),
        vec![CreateGpuInstance, CreateComputeInstance, Verify, RestartDevicePlugin, WaitForAllocatable]
    );
    assert!(h.events_with_reason("Cordoned").is_empty(), "the node was never cordoned");
    assert_eq!(h.cordon_state(), (false, false));
    assert_eq!(h.running(), vec!["trainer"]);
    let kept = &h.devices[&(0, "3g.40gb@0".to_string())];
    let status = mignode.status.unwrap();
    let instance = status.gpus[0]
        .instances
        .iter()
        .find(|i| i.uuid.as_ref() == Some(kept))
        .expect("the pod's device still exists");
    assert_eq!(instance.pod.as_deref(), Some("ml/trainer"));
    assert_eq!(h.evictions(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_needs_eviction_evicts_only_pods_on_instances_that_go() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.run_pod("keeper", 0, "3g.40gb", 0, &[], &[]);
    h.run_pod("mover", 0, "3g.40gb", 4, &[], &[]);
    let (hook, steps) = recording_hook(h.server.clone());
    let agent = h.spawn_agent(h.config(), Some(hook));
    let generation =
        h.set_spec(&[(0, &[("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.20gb", 6)])]).await;
    h.wait_ready(generation).await;
    agent.abort();

    let steps = steps.lock().unwrap().clone();
    let mut expected = vec![Cordon, Evict, DestroyComputeInstance, DestroyGpuInstance];
    expected.extend([CreateGpuInstance; 3]);
    expected.extend([CreateComputeInstance; 3]);
    expected.extend([Verify, RestartDevicePlugin, WaitForAllocatable, Uncordon]);
    assert_eq!(steps, expected);
    assert!(!h.pod_exists("mover"), "the pod on the instance that goes was evicted");
    assert!(h.pod_exists("keeper"));
    assert_eq!(h.running(), vec!["keeper"]);
    let evictions: Vec<_> = h
        .server
        .requests()
        .into_iter()
        .filter(|r| r.resource.as_deref() == Some("pods/eviction") && r.namespace.as_deref() == Some("ml"))
        .collect();
    assert_eq!(evictions.len(), 1, "{evictions:?}");
    assert_eq!(evictions[0].name.as_deref(), Some("mover"));
    assert_eq!(h.geometry(0), vec!["1g.10gb@4", "1g.10gb@5", "1g.20gb@6", "3g.40gb@0"]);
    assert_eq!(h.cordon_state(), (false, false));
    assert!(!h.events_with_reason("Evicted").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cordoned_by_a_person_stays_cordoned() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.cordon_by_hand();
    let (hook, steps) = recording_hook(h.server.clone());
    let agent = h.spawn_agent(h.config(), Some(hook));
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    let mignode = h.wait_ready(generation).await;
    agent.abort();

    let steps = steps.lock().unwrap().clone();
    assert!(!steps.contains(&Cordon) && !steps.contains(&Uncordon), "{steps:?}");
    assert_eq!(h.cordon_state(), (true, false), "still cordoned, and never claimed as ours");
    assert!(!mignode.status.unwrap().cordoned_by_geometer);
    assert!(h.events_with_reason("Cordoned").is_empty() && h.events_with_reason("Uncordoned").is_empty());
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_creates_its_mignode_and_publishes_the_inventory() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0)]), ("A100-40GB", &[])]).await;
    h.run_pod("trainer", 0, "3g.40gb", 0, &[], &[]);
    let agent = h.spawn_agent(h.config(), None);
    let mignode = h.wait_ready(1).await;
    agent.abort();
    assert_eq!(mignode.metadata.owner_references.unwrap()[0].name, NODE);
    let status = mignode.status.unwrap();
    assert_eq!(status.gpu_count, 2);
    assert_eq!(status.gpus[0].model, "H100-80GB");
    assert_eq!(status.gpus[1].model, "A100-40GB");
    assert_eq!(status.gpus[0].instances[0].pod.as_deref(), Some("ml/trainer"));
    assert_eq!(status.gpus[0].instances[0].processes, 1);
}
