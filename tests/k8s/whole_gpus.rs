//! Whole GPUs on the real control plane: a training Deployment asking for `nvidia.com/gpu`
//! arrives on a fleet fully in MIG mode with idle slices; GPUs leave MIG mode for it and the real
//! scheduler places its pods on the whole GPUs the device plugin now advertises; later slice
//! demand returns and the GPUs go back to MIG.

use geometer_api::PolicyMode;
use geometer_simcluster::MigPod;
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::NS;
use geometer_testkit::wait::wait_until;

use crate::support::{operator, running, two_nodes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_training_deployment_takes_gpus_out_of_mig_and_slice_demand_brings_them_back() {
    let Some(k8s) = operator("whole gpus", &two_nodes(), &policy(PolicyMode::Auto, false)).await else {
        return;
    };
    assert_eq!(k8s.whole_gpus(), 0, "every GPU starts in MIG mode");
    k8s.deploy("train", 2, MigPod::new(NS, "train").gpus(1).build()).await;
    running(&k8s, "train", 2).await;
    k8s.succeeded_plan().await;
    assert_eq!(k8s.whole_gpus(), 2, "exactly the GPUs the training pods needed left MIG mode");
    let nodes = k8s.nodes().await;
    let whole: i64 = nodes
        .iter()
        .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get("nvidia.com/gpu")?.0.parse::<i64>().ok())
        .sum();
    assert_eq!(whole, 2, "the nodes advertise the whole GPUs to the real scheduler");

    k8s.delete_deployment("train").await;
    k8s.deploy("infer", 4, MigPod::new(NS, "infer").slice("7g.80gb", 1).build()).await;
    running(&k8s, "infer", 4).await;
    assert_eq!(k8s.whole_gpus(), 0, "the idle whole GPUs went back to MIG");
    wait_until("nodes settled and uncordoned", || async { k8s.settled().await.then_some(()) }, || k8s.logs())
        .await;
    assert!(k8s.pods_without_devices().is_empty());
    assert!(k8s.evicted().is_empty(), "{:?}", k8s.evicted());
}
