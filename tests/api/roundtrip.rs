//! The CRD types read what a person writes (with defaults filled in) and survive a round trip
//! through YAML and JSON unchanged, with the field names the CRD schema uses.

use geometer_api::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

#[test]
fn a_minimal_policy_gets_safe_defaults() {
    let policy: MigPolicy = serde_saphyr::from_str(
        "apiVersion: geometer.dev/v1alpha1\nkind: MigPolicy\nmetadata:\n  name: default\nspec: {}\n",
    )
    .unwrap();
    let spec = &policy.spec;
    assert_eq!(spec.mode, PolicyMode::DryRun, "a policy must not act before someone chooses to");
    assert!(!spec.disruption.eviction_allowed);
    assert_eq!(spec.disruption.do_not_disrupt_annotations, DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS);
    assert_eq!(spec.disruption.max_nodes_reconfiguring, 1);
    assert!(spec.batching.idle_seconds <= spec.batching.max_seconds);
    assert_eq!(
        spec,
        &MigPolicySpec {
            node_selector: Default::default(),
            mode: PolicyMode::DryRun,
            allowed_profiles: vec![],
            headroom: Default::default(),
            allowed_modes: Vec::new(),
            min_whole_gpus: None,
            forecast_window_seconds: 0,
            batching: Batching::default(),
            stabilisation_seconds: 600,
            shape_empty_gpus: true,
            disruption: Disruption::default(),
            solver: SolverLimits::default(),
            rightsizing: None,
            dynamic_mig: None,
        }
    );
}

#[test]
fn a_full_policy_round_trips_with_camel_case_fields() {
    let text = r#"
apiVersion: geometer.dev/v1alpha1
kind: MigPolicy
metadata:
  name: inference
spec:
  nodeSelector:
    matchLabels:
      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
  mode: Approve
  allowedProfiles: ["1g.10gb", "3g.40gb"]
  headroom:
    1g.10gb: 2
  batching: {idleSeconds: 10, maxSeconds: 60}
  stabilisationSeconds: 120
  shapeEmptyGpus: false
  disruption:
    evictionAllowed: true
    doNotDisruptAnnotations: [example.com/keep]
    maxNodesReconfiguring: 2
    drainTimeoutSeconds: 300
  solver: {timeLimitMs: 2000, maxGpusChanged: 8}
"#;
    let policy: MigPolicy = serde_saphyr::from_str(text).unwrap();
    assert_eq!(policy.spec.mode, PolicyMode::Approve);
    assert_eq!(policy.spec.headroom.get("1g.10gb"), Some(&2));
    assert_eq!(policy.spec.solver.max_gpus_changed, Some(8));
    assert_eq!(policy.spec.solver.max_nodes_changed, None);
    let json = serde_json::to_value(&policy).unwrap();
    assert_eq!(json["spec"]["disruption"]["doNotDisruptAnnotations"][0], "example.com/keep");
    assert_eq!(json["spec"]["stabilisationSeconds"], 120);
    assert_eq!(json["spec"]["shapeEmptyGpus"], false);
    let again: MigPolicy = serde_saphyr::from_str(&serde_saphyr::to_string(&policy).unwrap()).unwrap();
    assert_eq!(again, policy);
}

#[test]
fn unknown_mode_is_rejected_with_its_value() {
    let err = serde_saphyr::from_str::<MigPolicySpec>("mode: Yolo\n").unwrap_err().to_string();
    assert!(err.contains("Yolo"), "error does not name the bad value: {err}");
}

fn sample_plan() -> MigPlan {
    let mut spec = MigPlanSpec {
        policy: "inference".into(),
        approved: false,
        nodes: vec![NodeChange {
            node: "gpu-1".into(),
            gpus: vec![
                GpuChange {
                    index: 0,
                    model: "H100-80GB".into(),
                    from: vec![PlacedInstance::new("7g.80gb", 0)],
                    to: vec![PlacedInstance::new("3g.40gb", 4), PlacedInstance::new("1g.10gb", 0)],
                    operations: GpuOperations {
                        destroy: vec![PlacedInstance::new("7g.80gb", 0)],
                        create: vec![PlacedInstance::new("3g.40gb", 4), PlacedInstance::new("1g.10gb", 0)],
                    },
                },
                GpuChange {
                    index: 1,
                    model: "H100-80GB".into(),
                    from: vec![PlacedInstance::new("7g.80gb", 0)],
                    to: vec![PlacedInstance::new("7g.80gb", 0)],
                    operations: GpuOperations::default(),
                },
            ],
        }],
        evictions: vec![Eviction {
            namespace: "ml".into(),
            name: "trainer-0".into(),
            node: "gpu-1".into(),
            reason: "uses 7g.80gb@0 on GPU 0, which the plan replaces".into(),
        }],
        demand: Demand {
            met: vec![
                DemandMet { pod: "ml/infer-a".into(), profile: "1g.10gb".into(), node: "gpu-1".into() },
                DemandMet { pod: "ml/infer-b".into(), profile: "3g.40gb".into(), node: "gpu-1".into() },
            ],
            unmet: vec![DemandUnmet {
                pod: "ml/huge".into(),
                profile: "7g.80gb".into(),
                reason: "no free GPU matches the pod's node selector".into(),
            }],
            gangs: vec![geometer_api::DemandGang {
                gang: "ml/train".into(),
                min_members: 8,
                members: 7,
                reason: Some("7 of 8 placeable on eligible nodes; needs 8".into()),
            }],
        },
        objective: 2001.5,
        bound: Some(2003.0),
        solve_ms: 42,
        summary: PlanSummary::default(),
    };
    spec.summary = spec.summarize();
    let mut plan = MigPlan::new("inference-20250101-000000", spec);
    plan.status = Some(MigPlanStatus {
        phase: MigPlanPhase::Applying,
        nodes: vec![NodeProgress {
            node: "gpu-1".into(),
            phase: NodeProgressPhase::Applying,
            message: None,
            started_at: Some(Time(jiff::Timestamp::from_second(1_700_000_000).unwrap())),
            finished_at: None,
        }],
        message: Some("1 of 1 nodes applying".into()),
        conditions: vec![],
    });
    plan
}

#[test]
fn plan_summary_counts_what_kubectl_shows() {
    let plan = sample_plan();
    let s = plan.spec.summary;
    assert_eq!((s.pods_helped, s.pods_unmet, s.evictions), (2, 1, 1));
    assert_eq!(s.gpus_changed, 1, "GPU 1 keeps its geometry and must not count as changed");
    assert_eq!(s.nodes_changed, 1);
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["spec"]["summary"]["podsHelped"], 2);
    assert_eq!(json["spec"]["summary"]["gpusChanged"], 1);
    assert_eq!(json["status"]["phase"], "Applying");
    assert_eq!(json["spec"]["solveMs"], 42);
}

#[test]
fn plan_round_trips_through_yaml_and_json() {
    let plan = sample_plan();
    let yaml = serde_saphyr::to_string(&plan).unwrap();
    assert_eq!(serde_saphyr::from_str::<MigPlan>(&yaml).unwrap(), plan);
    let json = serde_json::to_string(&plan).unwrap();
    assert_eq!(serde_json::from_str::<MigPlan>(&json).unwrap(), plan);
    assert!(!MigPlanPhase::Applying.is_final());
    assert!(MigPlanPhase::Superseded.is_final());
}

#[test]
fn node_status_round_trips_and_knows_what_is_in_use() {
    let mut node = MigNode::new(
        "gpu-1",
        MigNodeSpec {
            plan: Some("inference-20250101-000000".into()),
            gpus: vec![GpuGeometry { index: 0, geometry: vec![PlacedInstance::new("3g.40gb", 4)] }],
            compaction: None,
        },
    );
    let busy = MigInstance {
        profile: "1g.10gb".into(),
        start: 0,
        size: 1,
        gpu_instance_id: 9,
        compute_instance_id: Some(0),
        uuid: Some("MIG-1".into()),
        pod: Some("ml/infer-a".into()),
        processes: 0,
        shared_with: Vec::new(),
        rebuild: None,
    };
    let idle =
        MigInstance { pod: None, gpu_instance_id: 10, start: 1, uuid: Some("MIG-2".into()), ..busy.clone() };
    let running = MigInstance { processes: 3, ..idle.clone() };
    assert!(busy.in_use() && !idle.in_use() && running.in_use());
    node.status = Some(MigNodeStatus {
        gpus: vec![GpuInventory {
            index: 0,
            uuid: "GPU-0".into(),
            model: "H100-80GB".into(),
            pci_device_id: "0x233010DE".into(),
            mig_mode: MigModeStatus { current: true, pending: true },
            instances: vec![busy, idle],
            pod: None,
            shared_with: vec![],
            advertised_as: [("1g.10gb".to_string(), "nvidia.com/mig-1g.10gb".to_string())].into(),
            free_placements: vec![PlacementRun { start: 2, size: 6 }],
        }],
        gpu_count: 1,
        phase: MigNodePhase::Repartitioning,
        step: Some(AgentStep {
            action: StepAction::CreateGpuInstance,
            generation: 3,
            gpu: Some(0),
            instance: Some(PlacedInstance::new("3g.40gb", 4)),
            pod: None,
            attempt: 2,
            started_at: Time(jiff::Timestamp::from_second(1_700_000_100).unwrap()),
        }),
        conditions: vec![],
        catalog_disagreements: vec![],
        cordoned_by_geometer: true,
        observed_generation: Some(3),
        device_stack: Some(geometer_api::DeviceStack::DraStaticMig),
        paused_operands: Some(geometer_api::gpu_operator::PausedOperands::of(
            &[("nvidia.com/gpu.deploy.device-plugin".to_string(), "true".to_string())].into(),
            Time(jiff::Timestamp::from_second(1_700_000_050).unwrap()),
        )),
        usage: vec![geometer_api::PodGpuUsage {
            pod: "ml/train-0".into(),
            gpu: 1,
            model: "H100-80GB".into(),
            since: Time(jiff::Timestamp::from_second(1_700_000_000).unwrap()),
            samples: 30,
            peak_memory_mib: 7_000,
            p95_memory_mib: 6_400,
            peak_utilization_percent: 40,
            mean_utilization_percent: 12,
        }],
    });
    let json = serde_json::to_value(&node).unwrap();
    assert_eq!(json["status"]["usage"][0]["peakMemoryMib"], 7_000);
    assert_eq!(json["status"]["step"]["action"], "CreateGpuInstance");
    assert_eq!(json["status"]["cordonedByGeometer"], true);
    assert_eq!(json["status"]["gpus"][0]["migMode"]["current"], true);
    assert_eq!(json["status"]["gpus"][0]["instances"][0]["gpuInstanceId"], 9);
    let yaml = serde_saphyr::to_string(&node).unwrap();
    assert_eq!(serde_saphyr::from_str::<MigNode>(&yaml).unwrap(), node);
}
