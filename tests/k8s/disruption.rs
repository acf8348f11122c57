//! Evictions on the real control plane: a do-not-disrupt pod is never evicted (and the same pod
//! without the annotation is), and a PodDisruptionBudget, enforced by the real API server and
//! disruption controller, holds a drain until the Deployment has a replacement ready.

use geometer_api::PolicyMode;
use geometer_simcluster::{ClusterSpec, MigPod, NodeSpec};
use geometer_testkit::control_plane::Identity;
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::NS;
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::PostParams;
use kube::Api;

use crate::support::{fragmented, operator, running, HALVES};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_protection_the_plan_moves_a_pod_and_its_deployment_brings_it_back() {
    let Some((k8s, uids)) = fragmented("unprotected", false).await else { return };
    running(&k8s, "whole", 1).await;
    let evicted = k8s.evicted();
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    assert!(evicted[0].starts_with("a-") || evicted[0].starts_with("c-"), "{evicted:?}");
    // The ReplicaSet controller recreated the evicted pod, and it runs on the other half.
    let now: Vec<String> = [running(&k8s, "a", 1).await, running(&k8s, "c", 1).await]
        .into_iter()
        .map(|p| p[0].1.clone())
        .collect();
    assert_eq!(now.iter().filter(|u| uids.contains(u)).count(), 1, "one pod replaced: {uids:?} -> {now:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_not_disrupt_pod_is_never_evicted() {
    let Some((k8s, uids)) = fragmented("do-not-disrupt", true).await else { return };
    let whole =
        wait_until("the whole-GPU pod", || async { k8s.pods_of("whole").await.pop() }, || k8s.logs()).await;
    let name = whole.metadata.name.unwrap();
    // The controller says on the pod why it cannot help.
    let note = wait_until(
        "the waiting pod's NoSlicePlanned event",
        || async { k8s.event_notes(&name, "NoSlicePlanned").await.pop() },
        || k8s.logs(),
    )
    .await;
    assert!(note.contains("7g.80gb"), "{note}");
    assert!(k8s.evicted().is_empty(), "{:?}", k8s.evicted());
    for (app, uid) in ["a", "c"].iter().zip(&uids) {
        assert_eq!(&running(&k8s, app, 1).await[0].1, uid, "{app} kept its pod");
    }
    assert!(k8s.running_of("whole").await.is_empty());
}

/// Two nodes split in halves; both replicas of `web` on gpu-1 (gpu-2 cordoned while they
/// start), a PodDisruptionBudget of minAvailable 1 over them, then a whole-GPU pod that only
/// gpu-1 may run. Draining gpu-1 evicts one replica; the second eviction is refused (429)
/// until the first one's replacement runs on gpu-2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_disruption_budget_holds_the_drain_until_a_replacement_is_ready() {
    let spec = ClusterSpec::new(vec![
        NodeSpec::new("gpu-1", "H100-80GB", 1, HALVES),
        NodeSpec::new("gpu-2", "H100-80GB", 1, HALVES),
    ]);
    let Some(k8s) = operator("pod disruption budget", &spec, &policy(PolicyMode::Auto, true)).await else {
        return;
    };
    k8s.cp.kubectl(Identity::Admin, &["cordon", "gpu-2"]).unwrap();
    k8s.deploy("web", 2, MigPod::new(NS, "web").slice("3g.40gb", 1).build()).await;
    let first = running(&k8s, "web", 2).await;
    assert!(first.iter().all(|(_, _, node)| node == "gpu-1"), "{first:?}");
    k8s.cp.kubectl(Identity::Admin, &["uncordon", "gpu-2"]).unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(k8s.admin.clone(), NS);
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    wait_until(
        "the disruption controller allowing one disruption",
        || async {
            let status = pdbs.get("web").await.ok()?.status?;
            (status.disruptions_allowed == Some(1)).then_some(())
        },
        || k8s.logs(),
    )
    .await;

    let whole = MigPod::new(NS, "whole").slice("7g.80gb", 1).node_selector("kubernetes.io/hostname", "gpu-1");
    k8s.deploy("whole", 1, whole.build()).await;
    running(&k8s, "whole", 1).await;
    let moved = running(&k8s, "web", 2).await;
    assert!(moved.iter().all(|(_, _, node)| node == "gpu-2"), "{moved:?}");

    let evictions: Vec<_> = k8s.cp.evictions().into_iter().filter(|e| e.namespace == NS).collect();
    let granted: Vec<_> = evictions.iter().filter(|e| e.granted()).collect();
    assert_eq!(granted.len(), 2, "both replicas evicted in the end: {evictions:?}");
    let second = &granted[1].pod;
    assert!(
        evictions.iter().any(|e| &e.pod == second && e.code == 429),
        "the second eviction was refused by the budget first: {evictions:?}"
    );
    assert!(evictions.iter().all(|e| e.granted() || e.code == 429), "{evictions:?}");
    // The agent saw the refusal (a client that retried it away would leave nothing to report).
    let refused = k8s.event_notes(second, "EvictionRefused").await;
    assert!(refused.iter().any(|n| n.contains("PodDisruptionBudget")), "{refused:?}");
}
