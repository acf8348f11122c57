//! Right-sizing's measurement on the simulated cluster: the agents publish what each pod holding
//! a whole GPU alone uses of it, as the simulated NVML reports the workload's footprint, and
//! recommendations follow from those summaries.

use geometer_controller::adapter::PodView;
use geometer_testkit::e2e as e2e_support;

use e2e_support::{policy, wait_for, E2e, NS};
use geometer_api::PolicyMode;
use geometer_controller::rightsizing::recommend::{recommend, Settings, Verdict};
use geometer_simcluster::{ClusterSpec, MigPod, NodeSpec};
use geometer_solver::catalog::Catalog;
use geometer_testkit::wait::wait_for_or;
use k8s_openapi::api::core::v1::Pod;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_gpu_pods_are_measured_and_recommended_a_slice() {
    let spec = ClusterSpec::new(vec![NodeSpec::new("gpu-1", "H100-80GB", 2, &[("whole", 0)])]);
    let e2e = E2e::new(&spec, policy(PolicyMode::Auto, false)).await;
    e2e.submit(MigPod::new(NS, "chat").gpus(1).uses(7_000, 5).build()).await;
    e2e.submit(MigPod::new(NS, "train").gpus(1).uses(70_000, 95).build()).await;
    wait_for("both pods running", || e2e.running(&["chat", "train"]).then_some(())).await;
    let usage = wait_for_or(
        "both pods measured 3 times",
        || {
            let usage = e2e.mignode("gpu-1")?.status?.usage;
            (usage.len() == 2 && usage.iter().all(|u| u.samples >= 3)).then_some(usage)
        },
        || format!("{:#?}", e2e.mignode("gpu-1").and_then(|m| m.status)),
    )
    .await;
    let chat = usage.iter().find(|u| u.pod == format!("{NS}/chat")).unwrap();
    assert_eq!((chat.peak_memory_mib, chat.model.as_str()), (7_000, "H100-80GB"));
    assert_eq!(chat.mean_utilization_percent, 5);

    let pods = e2e.server.objects::<Pod>();
    let pods: Vec<PodView> = pods.iter().map(PodView::from).collect();
    let pods: Vec<&PodView> = pods.iter().collect();
    let settings = Settings { min_samples: 3, ..Settings::default() };
    let recommendations = recommend(&usage, &pods, Catalog::builtin(), &settings);
    let verdict = |name: &str| recommendations.iter().find(|r| r.owner.name == name).unwrap().verdict.clone();
    assert!(matches!(verdict("chat"), Verdict::Slice { profile, .. } if profile == "1g.10gb"));
    assert!(matches!(verdict("train"), Verdict::WholeGpu { .. }), "a training pod keeps its GPU");
}
