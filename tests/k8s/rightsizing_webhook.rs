//! The right-sizing webhook on the real control plane: the real kube-apiserver calls the
//! controller's HTTPS webhook (its certificate issued by the controller, its CA written by the
//! controller into the MutatingWebhookConfiguration of `deploy/base`, as the controller's
//! ServiceAccount with RBAC enforced). A Deployment of whole-GPU pods that opted in is measured;
//! its next pods are admitted asking for the recommended slice and land on slices the planner
//! created; so is a replica of a namespace that opted in. With the controller down, pods are
//! created unchanged (`failurePolicy: Ignore`).
//!
//! Both webhooks are pointed at the controller by URL: this control plane has no Service
//! network (no kube-proxy, no cluster DNS), so the `geometer-webhook` Service of deploy/base
//! and the certificate's `*.svc` name are not exercised here (tests/deploy/render.rs checks
//! that the Service reaches the controller's webhook port).

use geometer_api::{PolicyMode, Rightsizing, RightsizingMode};
use geometer_controller::rightsizing::admission::{OPT_IN, RIGHTSIZED};
use geometer_simcluster::MigPod;
use geometer_testkit::control_plane::{promtool, tool_or_skip};
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{limits, loopback_port, RealCluster, NS};
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::{geometer, two_nodes};

const CONFIGURATION: &str = "geometer-rightsizing";

/// Points both webhooks of deploy/base's configuration at `port` on this machine (the API
/// server runs here; in a cluster they name the geometer-webhook Service).
async fn webhook_at(k8s: &RealCluster, port: u16) {
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/webhooks/0/clientConfig", "value": {"url": format!("https://127.0.0.1:{port}/rightsize/pod")}},
        {"op": "replace", "path": "/webhooks/1/clientConfig", "value": {"url": format!("https://127.0.0.1:{port}/rightsize/namespace")}},
    ]))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(k8s.admin.clone())
        .patch(CONFIGURATION, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .expect("the webhook configuration of deploy/base");
}

/// `pod` as the API server admits it (created, then deleted again).
async fn admitted_while(pods: &Api<Pod>, pod: &Pod) -> Pod {
    let created = pods.create(&PostParams::default(), pod).await.expect("created, never refused");
    pods.delete(&created.name_any(), &Default::default()).await.expect("deleted");
    created
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opted_in_pods_are_admitted_asking_for_their_measured_slice() {
    let mut policy = policy(PolicyMode::Auto, false);
    policy.spec.rightsizing =
        Some(Rightsizing { mode: RightsizingMode::Enforce, headroom_percent: 20, min_samples: 3 });
    let Some(mut k8s) = RealCluster::start("rightsizing-webhook", geometer(), &two_nodes(), &policy).await
    else {
        return;
    };
    let port = loopback_port();
    webhook_at(&k8s, port).await;
    k8s.start_agents();
    k8s.start_controller_with(
        "controller-0",
        &[format!("--webhook-addr=127.0.0.1:{port}"), "--webhook-names=127.0.0.1".into()],
    );
    k8s.webhooks_trusted().await;

    // A chat model using 7,000 MiB and 5% of an 80 GB GPU, asking for the whole GPU, opted in.
    let template = MigPod::new(NS, "chat").gpus(1).uses(7_000, 5).label(OPT_IN.0, OPT_IN.1).build();
    k8s.deploy("chat", 2, template).await;
    wait_until(
        "2 chat pods running on whole GPUs (nothing measured yet: admitted unchanged)",
        || async {
            let running = k8s.running_limits("chat").await;
            (running.len() == 2 && running.iter().all(|(_, r)| r == &["nvidia.com/gpu"])).then_some(())
        },
        || k8s.logs(),
    )
    .await;
    wait_until(
        "the agents measured both pods 3 times",
        || async {
            let usage = k8s.usage().await;
            (usage.len() == 2 && usage.iter().all(|u| u.samples >= 3)).then_some(())
        },
        || k8s.logs(),
    )
    .await;

    // The next pods of the Deployment are admitted asking for the slice.
    k8s.scale("chat", 4).await;
    wait_until(
        "2 more chat pods running on 1g.10gb slices",
        || async {
            k8s.check_alive();
            let running = k8s.running_limits("chat").await;
            let sliced = running.iter().filter(|(_, r)| r == &["nvidia.com/mig-1g.10gb"]).count();
            (running.len() == 4 && sliced == 2).then_some(())
        },
        || k8s.logs(),
    )
    .await;
    let pods = Api::<Pod>::namespaced(k8s.admin.clone(), NS);
    let all = pods.list(&ListParams::default().labels("app=chat")).await.expect("pods").items;
    let notes: Vec<&String> = all.iter().filter_map(|p| p.annotations().get(RIGHTSIZED)).collect();
    assert_eq!(notes.len(), 2, "the two right-sized pods say so");
    for note in notes {
        assert!(note.starts_with("nvidia.com/gpu=1 -> nvidia.com/mig-1g.10gb=1 (deployment/chat measured on H100-80GB: peak 7000 MiB"), "{note}");
    }
    assert!(k8s.pods_without_devices().is_empty());

    // A namespace that opted in: a replica without the pod label goes through the other webhook.
    let namespaces = Api::<Namespace>::all(k8s.admin.clone());
    let label = json!({"metadata": {"labels": {OPT_IN.0: OPT_IN.1}}});
    namespaces.patch(NS, &PatchParams::default(), &Patch::Merge(&label)).await.expect("label the namespace");
    let sibling =
        all.iter().find(|p| p.annotations().contains_key(RIGHTSIZED)).expect("a right-sized replica");
    let mut replica = MigPod::new(NS, "chat-by-namespace").gpus(1).build();
    replica.metadata.name = None;
    replica.metadata.generate_name = Some("chat-by-namespace-".into());
    replica.metadata.labels =
        Some([("pod-template-hash".to_string(), sibling.labels()["pod-template-hash"].clone())].into());
    replica.metadata.owner_references = sibling.metadata.owner_references.clone();
    // The API server matches namespaceSelector against its own cache of namespaces, which sees
    // the new label a moment later: until then a pod is admitted without the webhook.
    wait_until(
        "a pod of the opted-in namespace admitted asking for the slice",
        || async {
            let admitted = admitted_while(&pods, &replica).await;
            (limits(&admitted) == ["nvidia.com/mig-1g.10gb"]).then_some(())
        },
        || k8s.logs(),
    )
    .await;

    // Two replicas and the namespace's pod were right-sized. What the controller and an agent serve passes `promtool check metrics` (Prometheus'
    // naming rules), and says what happened.
    let controller = k8s.scrape("controller-0");
    let agent = k8s.scrape("gpu-1");
    assert!(
        controller.contains("geometer_rightsizing_admissions_total{outcome=\"rightsized\"} 3"),
        "{controller}"
    );
    assert!(controller.contains("geometer_mig_slices_allocated{"), "{controller}");
    assert!(agent.contains("geometer_agent_phase_seconds_bucket{"), "{agent}");
    if let Some(promtool) = tool_or_skip(promtool()) {
        for (who, text) in [("controller", &controller), ("agent", &agent)] {
            let mut child = std::process::Command::new(&promtool)
                .args(["check", "metrics"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("promtool runs");
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "promtool check metrics on the {who}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    // Geometer down: an opted-in pod is created unchanged, not refused.
    k8s.kill_controller("controller-0");
    let bare = MigPod::new(NS, "while-down").gpus(1).label(OPT_IN.0, OPT_IN.1).build();
    let created =
        pods.create(&PostParams::default(), &bare).await.expect("created although the webhook is down");
    assert_eq!(limits(&created), ["nvidia.com/gpu"]);
    assert!(created.annotations().get(RIGHTSIZED).is_none());
}
