//! Whole GPUs end to end on the simulated cluster: training pods asking for `nvidia.com/gpu`
//! arrive on a fleet fully in MIG mode with idle slices; GPUs leave MIG mode for them, the
//! device plugin advertises them whole and the pods run; later slice demand returns and the
//! idle whole GPUs go back to MIG, while a GPU a training pod runs on never changes mode.

use geometer_testkit::e2e as e2e_support;

use e2e_support::{policy, wait_for, E2e, NS};
use geometer_api::PolicyMode;
use geometer_simcluster::{ClusterSpec, MigPod, NodeSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::Api;

const FULL: &[(&str, u8)] = &[("7g.80gb", 0)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_leave_mig_for_training_pods_and_come_back_for_slices() {
    let spec = ClusterSpec::new(vec![
        NodeSpec::new("gpu-1", "H100-80GB", 2, FULL),
        NodeSpec::new("gpu-2", "H100-80GB", 2, FULL),
    ]);
    let e2e = E2e::new(&spec, policy(PolicyMode::Auto, false)).await;
    assert_eq!(e2e.cluster.whole_gpus(), 0, "every GPU starts in MIG mode");

    // A training job of two pods, one whole GPU each.
    let training = ["train-0", "train-1"];
    for name in training {
        e2e.submit(MigPod::new(NS, name).gpus(1).run_seconds(3600.0).build()).await;
    }
    wait_for("the training pods running", || e2e.running(&training).then_some(())).await;
    wait_for("nodes settled", || e2e.settled().then_some(())).await;
    assert_eq!(e2e.cluster.whole_gpus(), 2, "exactly the GPUs the training pods needed left MIG mode");
    for name in training {
        let pod = e2e.server.object::<Pod>(NS, name).unwrap();
        let node = pod.spec.unwrap().node_name.unwrap();
        let advertised = e2e.cluster.node(&node).unwrap().advertised();
        assert!(advertised.contains_key("nvidia.com/gpu"), "{node} advertises whole GPUs: {advertised:?}");
    }
    let events = e2e.server.objects::<k8s_openapi::api::core::v1::Event>();
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("MigModeDisabled")), "the agent said so");

    // Slice demand for every GPU: the two idle MIG GPUs serve two pods; the GPUs the training
    // pods hold keep their mode (eviction is off), so two pods wait.
    let inference = ["infer-0", "infer-1", "infer-2", "infer-3"];
    for name in inference {
        e2e.submit(MigPod::new(NS, name).slice("7g.80gb", 1).run_seconds(3600.0).build()).await;
    }
    wait_for("two inference pods running", || {
        (inference.iter().filter(|p| e2e.running(&[p])).count() == 2).then_some(())
    })
    .await;
    assert_eq!(e2e.cluster.whole_gpus(), 2, "a GPU with a running whole-GPU pod never changes mode");
    assert!(e2e.running(&training));

    // Training ends: the whole GPUs are idle and go back to MIG for the waiting pods.
    let pods = Api::<Pod>::namespaced(e2e.server.client(), NS);
    for name in training {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_for("every inference pod running", || e2e.running(&inference).then_some(())).await;
    wait_for("nodes settled", || e2e.settled().then_some(())).await;
    assert_eq!(e2e.cluster.whole_gpus(), 0, "the idle whole GPUs went back to MIG");
    for node in ["gpu-1", "gpu-2"] {
        assert!(e2e.cluster.node(node).unwrap().pods_without_devices().is_empty());
    }
    assert!(e2e.evictions().is_empty(), "{:?}", e2e.evictions());
}
