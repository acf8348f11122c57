//! Devices the device plugin shares (time-slicing, MPS) and devices the agent cannot place:
//! both count as in use, and nothing is destroyed under them; nor under another NVML client.

use geometer_testkit::agent as agent_support;

use std::time::Duration;

use agent_support::Harness;
use geometer_agent::pod_resources::DeviceAssignment;

fn failed(h: &Harness) -> Option<(String, String)> {
    h.failed_condition().map(|c| (c.reason, c.message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_on_a_time_sliced_device_leaves_before_its_instance_goes() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.run_pod("first", 0, "3g.40gb", 4, &[], &[]);
    h.run_pod("second", 0, "3g.40gb", 4, &[], &[]);
    // The device plugin advertised replicas `<MIG uuid>::<n>`; the kubelet reports those.
    h.assignments.update(|list| {
        for (n, a) in list.iter_mut().enumerate() {
            a.device_id = format!("{}::{n}", a.device_id);
        }
    });
    let agent = h.spawn_agent(h.config(), None);
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("1g.10gb", 4)])]).await;
    h.wait_ready(generation).await;
    agent.abort();

    assert!(!h.pod_exists("first") && !h.pod_exists("second"), "both pods sharing the device left");
    assert_eq!(h.geometry(0), vec!["1g.10gb@4", "3g.40gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_the_agent_cannot_place_blocks_every_destroy_until_it_is_gone() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    let unknown = DeviceAssignment {
        namespace: "ml".into(),
        pod: "mystery".into(),
        container: "main".into(),
        resource: "nvidia.com/mig-3g.40gb".into(),
        device_id: "MIG-00000000-0000-0000-0000-00000000beef".into(),
        claim: None,
    };
    h.assignments.update(|list| list.push(unknown.clone()));
    let mut cfg = h.config();
    cfg.backoff = geometer_agent::Backoff::new(Duration::from_millis(200), Duration::from_millis(400));
    let agent = h.spawn_agent(cfg, None);
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("1g.10gb", 4)])]).await;

    let (reason, message) = h.wait_for("Failed: UnknownDeviceInUse", failed).await;
    assert_eq!(reason, "UnknownDeviceInUse");
    assert!(message.contains(&unknown.device_id) && message.contains("ml/mystery"), "{message}");
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"], "nothing was destroyed");

    h.assignments.update(|list| list.retain(|a| a.pod != "mystery"));
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["1g.10gb@4", "3g.40gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroy_refused_by_another_nvml_client_says_so_and_completes_once_it_lets_go() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    // DCGM holds the GPU: no process shows on the instance, but NVML answers IN_USE.
    h.sim.open_client(0, "nv-hostengine").unwrap();
    let mut cfg = h.config();
    cfg.backoff = geometer_agent::Backoff::new(Duration::from_millis(200), Duration::from_millis(400));
    let agent = h.spawn_agent(cfg, None);
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("1g.10gb", 4)])]).await;

    let (reason, message) = h.wait_for("Failed: GpuHeldByClient", failed).await;
    assert_eq!(reason, "GpuHeldByClient");
    assert!(
        message.contains("another NVML client holds the GPU") && message.contains("dcgm-exporter"),
        "{message}"
    );
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);

    h.sim.close_client(0, "nv-hostengine").unwrap();
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["1g.10gb@4", "3g.40gb@0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_instance_split_into_compute_instances_is_rebuilt_as_one_full_size_one() {
    use geometer_agent::nvml::NvmlBackend;
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    let device = h.sim.mig_devices(0).unwrap().into_iter().next().unwrap();
    let gi = device.gpu_instance_id;
    h.sim.destroy_compute_instance(0, gi, device.compute_instance_id).unwrap();
    h.sim.add_small_compute_instance(0, gi).unwrap();
    h.sim.add_small_compute_instance(0, gi).unwrap();
    let agent = h.spawn_agent(h.config(), None);
    // The target is the geometry the GPU already has; only the split instance is not it.
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    let node = h.wait_ready(generation).await;
    agent.abort();

    let gpu = &node.status.unwrap().gpus[0];
    assert!(gpu.instances.iter().all(|i| i.rebuild.is_none()), "{:?}", gpu.instances);
    for i in &gpu.instances {
        assert_eq!(h.sim.compute_instances(0, i.gpu_instance_id).unwrap().len(), 1, "{i:?}");
    }
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
}
