//! Gangs end to end on the simulated cluster: five workers of a Kueue pod group (total count 5)
//! ask for 3g.40gb slices where two GPUs hold four at most. Nothing changes for them: no GPU is
//! repartitioned, no pod evicted, and each worker's event says why. The same five pods without the group get
//! the four slices there are.

use geometer_testkit::e2e as e2e_support;

use e2e_support::{policy, wait_for, E2e, NS};
use geometer_api::{DemandGang, MigPlan, PolicyMode};
use geometer_simcluster::{ClusterSpec, MigPod, NodeSpec};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::DeleteParams;
use kube::Api;

const FULL: &[(&str, u8)] = &[("7g.80gb", 0)];

fn worker(name: &str, in_gang: bool) -> Pod {
    member(name, in_gang.then_some(("train", 5)))
}

/// A 3g.40gb pod, in the Kueue pod group `(name, total count)` if given.
fn member(name: &str, group: Option<(&str, u32)>) -> Pod {
    let pod = MigPod::new(NS, name).slice("3g.40gb", 1).run_seconds(3600.0);
    let pod = match group {
        Some((group, total)) => pod
            .label("kueue.x-k8s.io/pod-group-name", group)
            .annotation("kueue.x-k8s.io/pod-group-total-count", &total.to_string()),
        None => pod,
    };
    pod.build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_cannot_be_completed_changes_nothing_while_lone_pods_get_slices() {
    let spec = ClusterSpec::new(vec![NodeSpec::new("gpu-1", "H100-80GB", 2, FULL)]);
    let e2e = E2e::new(&spec, policy(PolicyMode::Auto, true)).await;
    let workers: Vec<String> = (0..5).map(|i| format!("worker-{i}")).collect();
    for name in &workers {
        e2e.submit(worker(name, true)).await;
    }
    let note = "gang ml/train: no geometry of the eligible GPUs could ever hold it: 5 members x 1 3g.40gb need 5, and the 2 eligible GPUs hold at most 4";
    wait_for("each worker told why its gang waits", || {
        let events = e2e.server.objects::<Event>();
        let told = |pod: &str| {
            events.iter().any(|e| {
                e.involved_object.name.as_deref() == Some(pod)
                    && e.message.as_deref().is_some_and(|m| m.contains(note))
            })
        };
        workers.iter().all(|w| told(w)).then_some(())
    })
    .await;
    e2e.wait_for_controller_passes(3).await;
    for gpu in 0..2 {
        assert_eq!(e2e.geometry("gpu-1", gpu), ["7g.80gb@0"], "no GPU changes for the gang");
    }
    assert!(e2e.evictions().is_empty());
    assert!(workers.iter().all(|w| e2e.phase(w).as_deref() == Some("Pending")));

    // The same pods on their own: four of them get slices.
    let pods = Api::<Pod>::namespaced(e2e.server.client(), NS);
    for name in &workers {
        pods.delete(name, &DeleteParams::default().grace_period(0)).await.unwrap();
    }
    let lone: Vec<String> = (0..5).map(|i| format!("lone-{i}")).collect();
    for name in &lone {
        e2e.submit(worker(name, false)).await;
    }
    wait_for("four lone pods running", || {
        (lone.iter().filter(|p| e2e.running(&[p.as_str()])).count() == 4).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_plan_lists_each_gang_with_the_members_it_places() {
    let spec = ClusterSpec::new(vec![NodeSpec::new("gpu-1", "H100-80GB", 2, FULL)]);
    let e2e = E2e::new(&spec, policy(PolicyMode::Auto, true)).await;
    for name in ["pair-0", "pair-1"] {
        e2e.submit(member(name, Some(("pair", 2)))).await;
    }
    let gangs = wait_for("a MigPlan listing gang ml/pair", || {
        e2e.server.objects::<MigPlan>().into_iter().map(|p| p.spec.demand.gangs).find(|g| !g.is_empty())
    })
    .await;
    assert_eq!(
        gangs,
        [DemandGang { gang: format!("{NS}/pair"), min_members: 2, members: 2, reason: None }],
        "kubectl describe migplan shows the gang whole"
    );
    wait_for("the pair running", || e2e.running(&["pair-0", "pair-1"]).then_some(())).await;
}
