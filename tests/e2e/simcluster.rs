//! The simulated cluster on its own: device plugin, scheduler and kubelet; then with a real
//! agent reconfiguring a node under a waiting pod.

use geometer_testkit::simcluster as sim_support;

use std::collections::BTreeMap;

use geometer_agent::nvml::NvmlBackend;
use geometer_api::{GpuGeometry, MigNode, MigNodeSpec, PlacedInstance};
use geometer_simcluster::{ClusterSpec, Ending, MigPod, NodeSpec, DEVICE_PLUGIN_NAMESPACE};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use sim_support::*;

const A100_MIXED: &[(&str, u8)] = &[("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)];
const TWO_HALVES: &[(&str, u8)] = &[("3g.40gb", 0), ("3g.40gb", 4)];

fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_device_plugin_advertises_each_nodes_slices() {
    let spec = ClusterSpec::new(vec![
        NodeSpec::new("a100-1", "A100-80GB", 2, A100_MIXED),
        NodeSpec::new(
            "h100-1",
            "H100-80GB",
            1,
            &[("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3)],
        ),
    ]);
    let (server, _cluster) = cluster(&spec).await;
    assert_eq!(
        mig_allocatable(&server, "a100-1"),
        strings(&[
            ("nvidia.com/mig-1g.10gb", "2"),
            ("nvidia.com/mig-2g.20gb", "2"),
            ("nvidia.com/mig-3g.40gb", "2")
        ])
    );
    assert_eq!(mig_allocatable(&server, "h100-1"), strings(&[("nvidia.com/mig-1g.10gb", "4")]));
    let node = server.object::<Node>("", "h100-1").unwrap();
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["nvidia.com/mig.strategy"], "mixed");
    assert!(labels["nvidia.com/gpu.product"].contains("H100"), "{labels:?}");
    // One running, ready plugin pod per node, found by the label the agent uses.
    let plugins = Api::<Pod>::namespaced(server.client(), DEVICE_PLUGIN_NAMESPACE)
        .list(&kube::api::ListParams::default().labels("app=nvidia-device-plugin-daemonset"))
        .await
        .unwrap();
    assert_eq!(plugins.items.len(), 2);
    for p in plugins.items {
        assert!(geometer_agent::plugin_ready(&p), "{:?}", p.metadata.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_on_free_slices_and_the_rest_are_unschedulable() {
    let (server, cluster) =
        cluster(&ClusterSpec::new(vec![NodeSpec::new("gpu-1", "A100-80GB", 1, TWO_HALVES)])).await;
    for name in ["p1", "p2", "p3"] {
        create(&server, MigPod::new(NS, name).slice("3g.40gb", 1).build()).await;
    }
    create(&server, MigPod::new(NS, "small").slice("1g.10gb", 1).build()).await;
    wait_for("p1 and p2 running", || {
        (phase(&server, "p1")? == "Running" && phase(&server, "p2")? == "Running").then_some(())
    })
    .await;
    let (reason, message) = wait_for("p3 unschedulable", || unschedulable(&server, "p3")).await;
    assert_eq!(reason, "Unschedulable");
    assert_eq!(message, "0/1 nodes are available: 1 Insufficient nvidia.com/mig-3g.40gb.");
    let (_, message) = wait_for("small unschedulable", || unschedulable(&server, "small")).await;
    assert_eq!(message, "0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.10gb.");

    // Each running pod holds a different MIG device, with a process on it, and PodResources says so.
    let held = cluster.assignments("gpu-1").unwrap().get();
    let mut pods: Vec<&str> = held.iter().map(|a| a.pod.as_str()).collect();
    pods.sort();
    assert_eq!(pods, vec!["p1", "p2"]);
    assert_ne!(held[0].device_id, held[1].device_id);
    let nvml = cluster.nvml("gpu-1").unwrap();
    for a in &held {
        assert_eq!(a.resource, "nvidia.com/mig-3g.40gb");
        assert_eq!(nvml.processes(0, &a.device_id).unwrap().len(), 1, "a process runs on {}", a.device_id);
    }
    assert_eq!(phase(&server, "p3").as_deref(), Some("Pending"));
    assert_eq!(node_name(&server, "p3"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_ends_after_its_run_time_and_the_next_one_gets_its_slice() {
    let (server, cluster) =
        cluster(&ClusterSpec::new(vec![NodeSpec::new("gpu-1", "A100-80GB", 1, &[("7g.80gb", 0)])])).await;
    create(&server, MigPod::new(NS, "first").slice("7g.80gb", 1).run_seconds(0.05).build()).await;
    wait_for("first running", || (phase(&server, "first")? == "Running").then_some(())).await;
    create(&server, MigPod::new(NS, "second").slice("7g.80gb", 1).build()).await;
    wait_for("first succeeded", || (phase(&server, "first")? == "Succeeded").then_some(())).await;
    wait_for("second running", || (phase(&server, "second")? == "Running").then_some(())).await;

    let first = pod(&server, "first");
    let terminated =
        first.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (0, Some("Completed")));
    let held = cluster.assignments("gpu-1").unwrap().get();
    assert_eq!(held.iter().map(|a| a.pod.as_str()).collect::<Vec<_>>(), vec!["second"]);
    let runs = cluster.ledger().runs();
    let ended: Vec<_> = runs.values().filter(|r| r.pod == "ml/first").map(|r| r.ended.map(|e| e.1)).collect();
    assert_eq!(ended, vec![Some(Ending::Succeeded)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selectors_taints_and_cpu_decide_where_pods_go() {
    let spec = ClusterSpec::new(vec![
        NodeSpec::new("open", "A100-80GB", 1, &[("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2)])
            .label("zone", "a")
            .resources("4", "64Gi"),
        NodeSpec::new("team-b", "A100-80GB", 1, &[("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2)]).taint(
            "dedicated",
            "team-b",
            "NoSchedule",
        ),
    ]);
    let (server, _cluster) = cluster(&spec).await;
    create(&server, MigPod::new(NS, "zoned").slice("1g.10gb", 1).node_selector("zone", "a").build()).await;
    create(&server, MigPod::new(NS, "big-cpu").slice("1g.10gb", 1).resources("8", "1Gi").build()).await;
    create(
        &server,
        MigPod::new(NS, "big-cpu-tolerant")
            .slice("1g.10gb", 1)
            .resources("8", "1Gi")
            .toleration("dedicated", "team-b", "NoSchedule")
            .build(),
    )
    .await;
    create(&server, MigPod::new(NS, "nowhere").slice("1g.10gb", 1).node_selector("zone", "b").build()).await;

    wait_for("zoned bound", || node_name(&server, "zoned")).await;
    assert_eq!(node_name(&server, "zoned").as_deref(), Some("open"));
    assert_eq!(wait_for("tolerant bound", || node_name(&server, "big-cpu-tolerant")).await, "team-b");
    let (_, message) = wait_for("big-cpu unschedulable", || unschedulable(&server, "big-cpu")).await;
    assert_eq!(
        message,
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: team-b}."
    );
    let (_, message) = wait_for("nowhere unschedulable", || unschedulable(&server, "nowhere")).await;
    assert!(message.contains("2 node(s) didn't match Pod's node affinity/selector"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_frees_the_slice_and_a_restarted_plugin_advertises_what_the_gpus_have_now() {
    let spec = ClusterSpec::new(vec![NodeSpec {
        gpus: vec![
            geometer_simcluster::GpuSpec::new("H100-80GB", &[("7g.80gb", 0)]),
            geometer_simcluster::GpuSpec::new("H100-80GB", &[]),
        ],
        ..NodeSpec::new("gpu-1", "H100-80GB", 0, &[])
    }]);
    let (server, cluster) = cluster(&spec).await;
    create(&server, MigPod::new(NS, "whole").slice("7g.80gb", 1).build()).await;
    wait_for("whole running", || (phase(&server, "whole")? == "Running").then_some(())).await;
    let nvml = cluster.nvml("gpu-1").unwrap();
    let uuid = cluster.assignments("gpu-1").unwrap().get()[0].device_id.clone();
    assert_eq!(nvml.processes(0, &uuid).unwrap().len(), 1);

    Api::<Pod>::namespaced(server.client(), NS).delete("whole", &DeleteParams::default()).await.unwrap();
    wait_for("slice released", || cluster.assignments("gpu-1").unwrap().get().is_empty().then_some(())).await;
    assert!(nvml.processes(0, &uuid).unwrap().is_empty(), "the pod's process stopped");

    // A person creates instances on the empty GPU: nothing is advertised until the plugin restarts.
    nvml.set_geometry(1, &[("3g.40gb", 0), ("3g.40gb", 4)]).unwrap();
    assert_eq!(mig_allocatable(&server, "gpu-1"), strings(&[("nvidia.com/mig-7g.80gb", "1")]));
    let plugins: Api<Pod> = Api::namespaced(server.client(), DEVICE_PLUGIN_NAMESPACE);
    plugins.delete("nvidia-device-plugin-gpu-1-0", &DeleteParams::default()).await.unwrap();
    wait_for("new slices advertised", || (mig_allocatable(&server, "gpu-1").len() == 2).then_some(())).await;
    assert_eq!(
        mig_allocatable(&server, "gpu-1"),
        strings(&[("nvidia.com/mig-3g.40gb", "2"), ("nvidia.com/mig-7g.80gb", "1")])
    );
    let replacement = wait_for("plugin pod back", || {
        server
            .object::<Pod>(DEVICE_PLUGIN_NAMESPACE, "nvidia-device-plugin-gpu-1-1")
            .filter(geometer_agent::plugin_ready)
    })
    .await;
    assert_eq!(replacement.spec.unwrap().node_name.as_deref(), Some("gpu-1"));
    assert_eq!(cluster.node("gpu-1").unwrap().plugin_starts(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_agent_reconfigures_a_node_and_the_waiting_pod_runs() {
    let (server, cluster) =
        cluster(&ClusterSpec::new(vec![NodeSpec::new("gpu-1", "H100-80GB", 1, &[("7g.80gb", 0)])])).await;
    let mut cfg = cluster.agent_config("gpu-1");
    cfg.poll_interval = std::time::Duration::from_millis(50);
    let agent = cluster.spawn_agent("gpu-1", cfg);
    create(&server, MigPod::new(NS, "small").slice("1g.10gb", 1).build()).await;
    wait_for("small unschedulable", || unschedulable(&server, "small")).await;

    let geometry: Vec<PlacedInstance> = (0..7).map(|s| PlacedInstance::new("1g.10gb", s)).collect();
    let spec = MigNodeSpec {
        plan: Some("by-hand".into()),
        gpus: vec![GpuGeometry { index: 0, geometry }],
        compaction: None,
    };
    let mignodes: Api<MigNode> = Api::all(server.client());
    match mignodes.create(&PostParams::default(), &MigNode::new("gpu-1", spec.clone())).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            mignodes
                .patch("gpu-1", &PatchParams::default(), &Patch::Merge(json!({ "spec": spec })))
                .await
                .unwrap();
        }
        Err(e) => panic!("MigNode: {e}"),
    }
    wait_for("small running", || (phase(&server, "small")? == "Running").then_some(())).await;
    agent.abort();
    assert_eq!(mig_allocatable(&server, "gpu-1"), strings(&[("nvidia.com/mig-1g.10gb", "7")]));
    let node = server.object::<Node>("", "gpu-1").unwrap();
    assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true), "the agent uncordoned the node");
    assert_eq!(cluster.node("gpu-1").unwrap().plugin_starts(), 2, "the agent restarted the plugin once");
}
