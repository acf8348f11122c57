//! PodGroups (gangs) on the real control plane: without a gang scheduler's CRD the
//! controller finds no PodGroup kind and reads none (and works on); once the scheduler-plugins
//! coscheduling CRD is installed it discovers the kind, reads each PodGroup's `minMember` with
//! its own ServiceAccount (deploy/base's RBAC), and its watch follows a change.

use std::sync::Arc;
use std::time::{Duration, Instant};

use geometer_controller::adapter::gangs::{PodGroupMin, Source};
use geometer_controller::{list_pod_groups, pod_group_kinds, Caches, OptionalKinds};
use geometer_testkit::control_plane::{start_or_skip, Identity};
use geometer_testkit::real_cluster::install;
use tokio::sync::Notify;

/// The coscheduling PodGroup CRD as far as Geometer reads it (kubernetes-sigs/scheduler-plugins
/// `manifests/coscheduling/crd.yaml`: group `scheduling.x-k8s.io`, version v1alpha1,
/// namespaced; its schema is not what this test is about, so it keeps unknown fields).
const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: podgroups.scheduling.x-k8s.io}
spec:
  group: scheduling.x-k8s.io
  scope: Namespaced
  names: {kind: PodGroup, plural: podgroups, singular: podgroup, listKind: PodGroupList}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

fn pod_group(min_member: u32) -> String {
    format!(
        "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {{name: train, namespace: default}}\nspec: {{minMember: {min_member}}}\n"
    )
}

fn train(min_members: u32) -> PodGroupMin {
    PodGroupMin {
        source: Source::Coscheduling,
        namespace: "default".into(),
        name: "train".into(),
        min_members,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_reads_and_watches_podgroups_once_their_crd_is_served() {
    let Some(cp) = start_or_skip("the_controller_reads_and_watches_podgroups_once_their_crd_is_served").await
    else {
        return;
    };
    install(&cp);
    let client = cp.client(Identity::Controller).await;
    assert!(pod_group_kinds(&client).await.is_empty(), "no gang scheduler installed");
    assert_eq!(list_pod_groups(&client).await.unwrap(), (Vec::new(), Vec::new()));

    let apply = |name: &str, yaml: &str| {
        let path = cp.dir().join(name);
        std::fs::write(&path, yaml).unwrap();
        cp.kubectl(Identity::Admin, &["apply", "-f", path.to_str().unwrap()])
            .unwrap_or_else(|e| panic!("{e}"));
    };
    apply("podgroup-crd.yaml", CRD);
    cp.kubectl(
        Identity::Admin,
        &["wait", "--for=condition=Established", "--timeout=60s", "crd/podgroups.scheduling.x-k8s.io"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = cp.kubectl(Identity::Admin, &["get", "podgroups", "-A"]) {
        assert!(Instant::now() < deadline, "podgroups never listed: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    apply("podgroup.yaml", &pod_group(3));

    let kinds = pod_group_kinds(&client).await;
    let versions: Vec<&str> = kinds.iter().map(|k| k.api_version.as_str()).collect();
    assert_eq!(versions, ["scheduling.x-k8s.io/v1alpha1"]);
    assert_eq!(list_pod_groups(&client).await.unwrap(), (vec![train(3)], Vec::new()));

    // The controller's cache of them follows a change to the group's minimum.
    let optional = OptionalKinds { pod_groups: kinds.clone(), ..OptionalKinds::default() };
    let (caches, _watches) = Caches::start(&client, Arc::new(Notify::new()), &optional);
    caches.ready().await;
    let min_member = |caches: &Caches| -> Vec<u64> {
        caches.pod_groups[0].1.state().iter().filter_map(|g| g.data["spec"]["minMember"].as_u64()).collect()
    };
    assert_eq!(min_member(&caches), [3]);
    apply("podgroup.yaml", &pod_group(5));
    let deadline = Instant::now() + Duration::from_secs(30);
    while min_member(&caches) != [5] {
        assert!(Instant::now() < deadline, "the watch never saw minMember 5: {:?}", min_member(&caches));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
