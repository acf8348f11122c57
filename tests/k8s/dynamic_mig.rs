//! DynamicMIG on the real control plane: a simulated node advertises its H100 as NVIDIA's DRA
//! driver does in DynamicMIG mode (a counter set, and a device for every profile at every
//! placement drawing the memory slices it covers), the real kube-scheduler allocates claims
//! first-fit against it, and the simulated kubelet makes each pod's instance when it starts and
//! destroys it when it stops. Churn leaves 1g.10gb instances at placements 0, 1 and 5, as on
//! the H100 in the driver's issue tracker: a 3g.40gb claim then cannot be allocated with five
//! slices free. With compaction off Geometer says so and changes nothing; with it on
//! (MigPolicy `spec.dynamicMig.compact`) it guards the placement to open with DeviceTaintRules,
//! the node's agent evicts the cheapest pods in the way, their Deployments bring them back
//! elsewhere, and the claim gets the opened placement.

use geometer_api::{DynamicMig, MigNode, PlacementRun, PolicyMode};
use geometer_simcluster::{ClusterSpec, NodeSpec};
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{RealCluster, NS};
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;

use crate::dra::{create, mig_class, pod, template};
use crate::support::operator;

const NODE: &str = "dyn-1";

/// Waits until `name` runs.
async fn running(k8s: &RealCluster, pods: &Api<Pod>, name: &str) {
    let runs = || async {
        k8s.check_alive();
        let pod = pods.get(name).await.ok()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    };
    wait_until(&format!("pod {name} running"), runs, || k8s.logs()).await;
}

/// Waits until the node's GPU has exactly `instances`.
async fn geometry(k8s: &RealCluster, instances: &[&str]) {
    let settled = || async { (k8s.geometry(NODE, 0) == instances).then_some(()) };
    wait_until(&format!("the GPU's instances {instances:?}"), settled, || {
        format!("{:?}", k8s.geometry(NODE, 0))
    })
    .await;
}

/// The operator on one DynamicMIG node, 1g.10gb pods churned to placements 0, 1 and 5: bare
/// pods `chat-<i>` when `compact` is off; with it on, each the one replica of Deployment
/// `chat-<i>` (so that a moved pod comes back), `protected` ones annotated do-not-disrupt.
async fn fragmented(test: &str, compact: bool, protected: &[usize]) -> Option<(RealCluster, Api<Pod>)> {
    let spec = ClusterSpec::new(vec![NodeSpec::new(NODE, "H100-80GB", 1, &[]).dynamic_mig()]);
    let mut policy = policy(PolicyMode::Auto, true);
    policy.spec.dynamic_mig = Some(DynamicMig { compact });
    let k8s = operator(test, &spec, &policy).await?;
    let admin = k8s.admin.clone();
    create(&Api::<DeviceClass>::all(admin.clone()), mig_class()).await;
    let templates = Api::<ResourceClaimTemplate>::namespaced(admin.clone(), NS);
    for profile in ["1g.10gb", "3g.40gb", "7g.80gb"] {
        create(&templates, template(profile)).await;
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    // One at a time, so that first-fit gives each the next placement.
    for i in 0..6 {
        let name = format!("chat-{i}");
        if compact {
            let mut template: Pod = serde_json::from_value(pod(&name, "1g-10gb")).unwrap();
            if protected.contains(&i) {
                template.metadata.annotations =
                    Some([("karpenter.sh/do-not-disrupt".to_string(), "true".to_string())].into());
            }
            k8s.deploy(&name, 1, template).await;
            crate::support::running(&k8s, &name, 1).await;
        } else {
            create(&pods, pod(&name, "1g-10gb")).await;
            running(&k8s, &pods, &name).await;
        }
    }
    geometry(&k8s, &["1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5"]).await;
    for i in 2..5 {
        let name = format!("chat-{i}");
        match compact {
            true => k8s.delete_deployment(&name).await,
            false => drop(pods.delete(&name, &DeleteParams::default()).await.unwrap()),
        }
    }
    geometry(&k8s, &["1g.10gb@0", "1g.10gb@1", "1g.10gb@5"]).await;
    Some((k8s, pods))
}

/// The device the claim of running pod `pod` was allocated.
async fn allocated(k8s: &RealCluster, pod: &Pod) -> String {
    let claims = Api::<ResourceClaim>::namespaced(k8s.admin.clone(), NS);
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.clone()).unwrap_or_default();
    let name = statuses[0].resource_claim_name.clone().unwrap();
    let claim = claims.get(&name).await.unwrap();
    let results = claim.status.unwrap().allocation.unwrap().devices.unwrap().results.unwrap();
    results[0].device.clone()
}

/// Waits until the pod `train` runs, and returns it.
async fn train_runs(k8s: &RealCluster, pods: &Api<Pod>) -> Pod {
    running(k8s, pods, "train").await;
    pods.get("train").await.unwrap()
}

/// Waits until no DeviceTaintRule and no compaction request is left.
async fn compaction_cleared(k8s: &RealCluster) {
    let rules = Api::<DeviceTaintRule>::all(k8s.admin.clone());
    let mignodes = Api::<MigNode>::all(k8s.admin.clone());
    let cleared = || async {
        let left = rules.list(&ListParams::default()).await.ok()?.items.len();
        let request = mignodes.get(NODE).await.ok()?.spec.compaction;
        (left == 0 && request.is_none()).then_some(())
    };
    wait_until("the compaction's rules and request removed", cleared, || k8s.logs()).await;
}

/// The pods of Deployment `app` the API server evicted.
fn evicted_of(k8s: &RealCluster, app: &str) -> Vec<String> {
    let prefix = format!("{app}-");
    k8s.cp
        .evictions()
        .into_iter()
        .filter(|e| e.granted() && e.pod.starts_with(&prefix))
        .map(|e| e.pod)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_moves_the_cheapest_pod_and_the_claim_gets_the_opened_placement_even_after_a_controller_kill(
) {
    let Some((mut k8s, pods)) = fragmented("DynamicMIG compaction", true, &[]).await else { return };
    create(&pods, pod("train", "3g-40gb")).await;
    // The rules come first; the controller is killed once they exist, and another replica
    // carries the compaction to its end and removes them.
    let rules = Api::<DeviceTaintRule>::all(k8s.admin.clone());
    let guarded =
        || async { (!rules.list(&ListParams::default()).await.ok()?.items.is_empty()).then_some(()) };
    wait_until("the placement guarded", guarded, || k8s.logs()).await;
    let taints = rules.list(&ListParams::default()).await.unwrap().items;
    assert!(taints.iter().all(|r| r.spec.taint.effect == "NoSchedule"), "never NoExecute: {taints:?}");
    k8s.kill_controller("controller-0");
    k8s.start_controller("controller-1");

    let train = train_runs(&k8s, &pods).await;
    assert_eq!(allocated(&k8s, &train).await, "gpu-0-mig-3g40gb-9-4", "the opened placement");
    assert_eq!(evicted_of(&k8s, "chat-5").len(), 1, "one pod moved: the one at 5");
    for app in ["chat-0", "chat-1"] {
        assert!(evicted_of(&k8s, app).is_empty(), "{app} stayed");
    }
    crate::support::running(&k8s, "chat-5", 1).await;
    geometry(&k8s, &["1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "3g.40gb@4"]).await;
    compaction_cleared(&k8s).await;
    k8s.check_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_not_disrupt_pod_is_never_moved_and_the_room_opens_around_it() {
    let Some((k8s, pods)) = fragmented("DynamicMIG compaction around a protected pod", true, &[5]).await
    else {
        return;
    };
    create(&pods, pod("train", "3g-40gb")).await;
    let train = train_runs(&k8s, &pods).await;
    assert_eq!(
        allocated(&k8s, &train).await,
        "gpu-0-mig-3g40gb-9-0",
        "0-3 opened: 4-7 holds the protected pod"
    );
    assert!(evicted_of(&k8s, "chat-5").is_empty(), "the do-not-disrupt pod stayed");
    for app in ["chat-0", "chat-1"] {
        assert_eq!(evicted_of(&k8s, app).len(), 1, "{app} moved");
        crate::support::running(&k8s, app, 1).await;
    }
    // The moved pods came back outside 0-3 (its 1g.10gb placements were guarded).
    geometry(&k8s, &["1g.10gb@4", "1g.10gb@5", "1g.10gb@6", "3g.40gb@0"]).await;
    compaction_cleared(&k8s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_blocked_by_fragmentation_is_reported_on_the_pod_and_nothing_changes_on_the_node() {
    let Some((k8s, pods)) = fragmented("DynamicMIG fragmentation report", false, &[]).await else { return };
    create(&pods, pod("train", "3g-40gb")).await;
    create(&pods, pod("big", "7g-80gb")).await;

    let told = |name: &'static str, reason: &'static str| {
        let k8s = &k8s;
        move || async move { k8s.event_notes(name, reason).await.pop() }
    };
    let fragmented = wait_until(
        "train told it is blocked by fragmentation",
        told("train", "BlockedByFragmentation"),
        || k8s.logs(),
    )
    .await;
    assert!(fragmented.contains("3g.40gb"), "{fragmented}");
    let capacity =
        wait_until("big told it is blocked by capacity", told("big", "BlockedByCapacity"), || k8s.logs())
            .await;
    assert!(capacity.contains("7g.80gb"), "{capacity}");

    // The agent reports the free runs and leaves the driver's instances alone.
    let mignodes = Api::<MigNode>::all(k8s.admin.clone());
    let free = || async {
        let status = mignodes.get(NODE).await.ok()?.status?;
        let gpu = status.gpus.first()?;
        (!gpu.free_placements.is_empty()).then(|| gpu.free_placements.clone())
    };
    let runs = wait_until("the MigNode's free placement runs", free, || k8s.logs()).await;
    assert_eq!(runs, [PlacementRun { start: 2, size: 3 }, PlacementRun { start: 6, size: 2 }]);
    let mignode = mignodes.get(NODE).await.unwrap();
    assert!(mignode.spec.gpus.is_empty(), "no geometry is asked of a DynamicMIG node: {:?}", mignode.spec);
    assert_eq!(k8s.geometry(NODE, 0), ["1g.10gb@0", "1g.10gb@1", "1g.10gb@5"]);
    for name in ["train", "big"] {
        let phase = pods.get(name).await.unwrap().status.and_then(|s| s.phase);
        assert_eq!(phase.as_deref(), Some("Pending"), "{name} waits");
    }
    k8s.check_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_disruption_budget_holds_the_move_until_it_allows_it() {
    let Some((k8s, pods)) = fragmented("DynamicMIG compaction under a budget", true, &[]).await else {
        return;
    };
    let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "chat-5", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "chat-5"}}},
    }))
    .unwrap();
    let budgets = Api::<PodDisruptionBudget>::namespaced(k8s.admin.clone(), NS);
    budgets.create(&PostParams::default(), &budget).await.unwrap();
    let holder = k8s.running_of("chat-5").await.remove(0).0;
    create(&pods, pod("train", "3g-40gb")).await;
    // The agent is refused by the API server, and says so on the pod.
    let refused = || async {
        let refusals = k8s.cp.evictions().into_iter().filter(|e| e.pod == holder && e.code == 429).count();
        let told = k8s.event_notes(&holder, "EvictionRefused").await;
        (refusals > 0 && told.iter().any(|n| n.contains("PodDisruptionBudget"))).then_some(())
    };
    wait_until("the eviction refused by the budget", refused, || k8s.logs()).await;
    assert!(evicted_of(&k8s, "chat-5").is_empty(), "the budget holds the pod");
    let phase = pods.get("train").await.unwrap().status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Pending"));
    // Once the budget allows it, the move goes on and the claim gets the opened placement.
    budgets.delete("chat-5", &DeleteParams::default()).await.unwrap();
    let train = train_runs(&k8s, &pods).await;
    assert_eq!(allocated(&k8s, &train).await, "gpu-0-mig-3g40gb-9-4");
    assert_eq!(evicted_of(&k8s, "chat-5"), [holder]);
    compaction_cleared(&k8s).await;
}
