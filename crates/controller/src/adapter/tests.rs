//! Building snapshots from Lists: demand, whole GPUs, nodes the DRA driver advertises, MigNodes
//! an older agent wrote, and the snapshot's invariants.

use super::*;
use proptest::prelude::*;

/// The snapshot of a List's text, with no policy, at the epoch.
fn snapshot_of(text: &str) -> Built {
    build_snapshot(&parse_objects(text).unwrap(), Catalog::builtin(), None, jiff::Timestamp::UNIX_EPOCH)
        .unwrap()
}

pub(super) const LIST: &str = r#"
apiVersion: v1
kind: List
items:
- kind: Node
  metadata:
    name: n1
    labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb, nvidia.com/gpu.count: "2", nvidia.com/mig.config: all-balanced}
  status:
    allocatable: {cpu: "8", memory: 32Gi}
    capacity: {nvidia.com/mig-1g.5gb: "4", nvidia.com/mig-2g.10gb: "2", nvidia.com/mig-3g.20gb: "2"}
- kind: Pod
  metadata: {name: user, namespace: ml}
  spec:
    nodeName: n1
    containers: [{name: c, resources: {requests: {cpu: "3", nvidia.com/mig-3g.20gb: "1"}}}]
  status: {phase: Running}
- kind: Pod
  metadata: {name: waiting, namespace: ml}
  spec:
    containers: [{name: c, resources: {limits: {nvidia.com/mig-1g.5gb: "2"}}}]
  status:
    phase: Pending
    conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]
- kind: Pod
  metadata: {name: fresh, namespace: ml}
  spec:
    containers: [{name: c, resources: {limits: {nvidia.com/mig-1g.5gb: "1"}}}]
  status: {phase: Pending}
- kind: Service
  metadata: {name: s}
"#;

/// A MigNode's GPUs with MIG off are the instance `whole`, held by the pod the agent read
/// from PodResources; pods asking for `nvidia.com/gpu` are demand; a pod sharing a whole GPU
/// with others (time-slicing) is never planned as evictable.
#[test]
fn whole_gpus_from_a_mignode_and_whole_gpu_demand() {
    let pod = |name: &str, node: &str| {
        let bound = if node.is_empty() { String::new() } else { format!("nodeName: {node}, ") };
        let phase = if node.is_empty() {
            "{phase: Pending, conditions: [{type: PodScheduled, status: \"False\", reason: Unschedulable}]}"
        } else {
            "{phase: Running}"
        };
        format!(
                "- kind: Pod\n  metadata: {{name: {name}, namespace: ml}}\n  spec: {{{bound}containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: \"1\"}}}}}}]}}\n  status: {phase}\n"
            )
    };
    let gpu = |index: u32, pods: &str| {
        format!("    - {{index: {index}, uuid: GPU-{index}, model: H100-80GB, pciDeviceId: \"0x233010DE\", migMode: {{current: false, pending: false}}, {pods}}}\n")
    };
    let text = format!(
            "apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata: {{name: n1}}\n  status: {{allocatable: {{cpu: \"8\", memory: 32Gi}}}}\n\
             - apiVersion: geometer.dev/v1alpha1\n  kind: MigNode\n  metadata: {{name: n1}}\n  spec: {{}}\n  status:\n    gpus:\n{}{}{}{}{}{}",
            gpu(0, "pod: ml/train"),
            gpu(1, "pod: ml/a, sharedWith: [ml/b]"),
            pod("train", "n1"),
            pod("a", "n1"),
            pod("b", "n1"),
            pod("wait", ""),
        );
    let built = snapshot_of(&text);
    let s = &built.snapshot;
    assert_eq!(s.nodes.len(), 1, "{text}\n{:?} {:?}", built.warnings, built.skipped);
    let instances: Vec<_> = s.nodes[0].gpus.iter().map(|g| g.instances.clone()).collect();
    assert_eq!(instances[0].len(), 1, "{:?}", built.warnings);
    assert_eq!((instances[0][0].profile.as_str(), instances[0][0].start), ("whole", 0));
    assert_eq!(instances[0][0].pod.as_ref().map(PodKey::as_str), Some("ml/train"));
    assert_eq!(s.pending.len(), 1);
    assert_eq!(s.pending[0].requests, BTreeMap::from([("whole".to_string(), 1)]));
    let running: BTreeMap<String, bool> =
        s.running.iter().map(|p| (p.key().to_string(), p.do_not_disrupt)).collect();
    assert_eq!(running, BTreeMap::from([("ml/a".to_string(), true), ("ml/train".to_string(), false)]));
}

/// A MigNode an older agent wrote (no `spec`, instances without `size`) is read with
/// what can be derived, so its node stays managed; one lacking what cannot be derived
/// leaves its node out with a warning naming the field.
#[test]
fn an_older_mignode_keeps_its_node_managed() {
    let text = |instance: &str| {
        format!(
                "kind: List\nitems:\n- kind: Node\n  metadata: {{name: n1}}\n\
                 - apiVersion: geometer.dev/v1alpha1\n  kind: MigNode\n  metadata: {{name: n1}}\n  status:\n    gpus:\n\
                 \x20   - {{index: 0, uuid: GPU-0, model: H100-80GB, pciDeviceId: \"0x233010DE\", migMode: {{current: true, pending: true}}, instances: [{instance}]}}\n"
            )
    };
    let built = snapshot_of(&text("{profile: 3g.40gb, start: 4, gpuInstanceId: 2}"));
    assert_eq!(built.snapshot.nodes.len(), 1, "{:?}", built.warnings);
    let instance = &built.snapshot.nodes[0].gpus[0].instances[0];
    assert_eq!((instance.profile.as_str(), instance.start), ("3g.40gb", 4));

    let built = snapshot_of(&text("{profile: 3g.40gb, start: 4}"));
    assert!(built.snapshot.nodes.is_empty());
    let skipped: Vec<String> = built.skipped.iter().map(ToString::to_string).collect();
    assert!(skipped.iter().any(|s| s.contains("MigNode n1") && s.contains("gpuInstanceId")), "{skipped:?}");
}

/// A node NVIDIA's DRA driver advertises (its ResourceSlice) is left as it is, with a
/// warning naming the mode; one the device plugin advertises as well is refused as
/// giving each GPU out twice; the other nodes are planned.
#[test]
fn nodes_the_dra_driver_advertises_are_left_unchanged_and_said_so() {
    let node = |name: &str, allocatable: &str| {
        format!(
                "- kind: Node\n  metadata: {{name: {name}, labels: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: \"1\", nvidia.com/mig.config: all-1g.10gb}}}}\n  status: {{allocatable: {{cpu: \"8\", {allocatable}}}}}\n"
            )
    };
    let slice = |name: &str, node: &str, extra: &str| {
        format!("- apiVersion: resource.k8s.io/v1\n  kind: ResourceSlice\n  metadata: {{name: {name}}}\n  spec: {{driver: gpu.nvidia.com, nodeName: {node}, pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}{extra}}}\n")
    };
    let text = format!(
        "kind: List\nitems:\n{}{}{}{}{}{}",
        node("plugin", "nvidia.com/mig-1g.10gb: \"7\""),
        node("dra", "memory: 1Gi"),
        node("dynamic", "memory: 1Gi"),
        node("both", "nvidia.com/mig-1g.10gb: \"7\""),
        slice("s1", "dra", ""),
        slice(
            "s2",
            "dynamic",
            ", sharedCounters: [{name: gpu-0-counter-set, counters: {memory-slice-0: {value: \"1\"}}}]"
        ) + &slice("s3", "both", ""),
    );
    let built = snapshot_of(&text);
    let planned: Vec<&str> = built.snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(planned, ["plugin"], "{:?}", built.warnings);
    let said = |node: &str, words: &str| {
        built
            .warnings
            .iter()
            .any(|w| w.starts_with(&format!("node {node}: left unchanged")) && w.contains(words))
    };
    assert!(said("dra", "DRA driver advertises its GPUs (static MIG)"), "{:?}", built.warnings);
    assert!(said("dynamic", "(DynamicMIG)"), "{:?}", built.warnings);
    assert!(said("both", "given out twice"), "{:?}", built.warnings);

    // A pod waiting for a claim whose template is not in the List is said not planned.
    let claiming = "- kind: Pod\n  metadata: {name: claims, namespace: ml}\n  spec: {resourceClaims: [{name: gpu, resourceClaimTemplateName: mig-3g}], containers: [{name: c, resources: {claims: [{name: gpu}]}}]}\n  status: {phase: Pending, conditions: [{type: PodScheduled, status: \"False\", reason: Unschedulable}]}\n";
    let built = snapshot_of(&format!("{text}{claiming}"));
    assert!(built.snapshot.pending.is_empty());
    let expected = "DRA: pod ml/claims not planned: ResourceClaimTemplate ml/mig-3g does not exist";
    assert!(built.warnings.iter().any(|w| w == expected), "{:?}", built.warnings);
}

/// The static-MIG example: a device an allocated claim names is held (by the claim while no
/// pod is reserved, else by the pod), the running pod holding one counts it as its request.
#[test]
fn allocated_claims_hold_their_instances_before_their_pods_run() {
    let built = snapshot_of(DRA_EXAMPLE);
    let node = built.snapshot.nodes.iter().find(|n| n.name == "dra-1").expect("dra-1 planned");
    let holders: Vec<(u8, Option<String>)> =
        node.gpus[0].instances.iter().map(|i| (i.start, i.pod.as_ref().map(|p| p.to_string()))).collect();
    assert_eq!(
        holders,
        [(0, Some("ml/claim:trainer-0-gpu".into())), (1, Some("ml/notebook-0".into())), (5, None)]
    );
    assert_eq!(node.labels.get(dra::STACK_LABEL).map(String::as_str), Some(dra::DRA_STACK));
    let notebook = built.snapshot.running.iter().find(|p| p.name == "notebook-0").expect("running");
    assert_eq!(notebook.requests, BTreeMap::from([("1g.10gb".to_string(), 1)]));
    let train = built.snapshot.pending.iter().find(|p| p.name == "train-0").expect("demand");
    assert_eq!(train.node_selector.get(dra::STACK_LABEL).map(String::as_str), Some(dra::DRA_STACK));
}

/// A static-MIG node is planned only with an inventory from an agent that knows the DRA stack,
/// a complete pool, and no allocated claim naming a device the driver no longer lists.
#[test]
fn a_dra_node_is_left_unchanged_until_its_devices_can_be_matched_and_trusted() {
    let left = |text: &str, words: &str| {
        let built = snapshot_of(text);
        assert!(built.snapshot.nodes.iter().all(|n| n.name != "dra-1"), "{:?}", built.warnings);
        assert!(
            built.warnings.iter().any(|w| w.starts_with("node dra-1: left unchanged") && w.contains(words)),
            "{words}: {:?}",
            built.warnings
        );
    };
    let (before, after) =
        DRA_EXAMPLE.split_once("- apiVersion: geometer.dev/v1alpha1\n  kind: MigNode").unwrap();
    let (_, after_mignode) = after.split_once("- apiVersion: resource.k8s.io/v1").unwrap();
    left(&format!("{before}- apiVersion: resource.k8s.io/v1{after_mignode}"), "no MigNode inventory");
    left(&DRA_EXAMPLE.replace("    deviceStack: DraStaticMig\n", ""), "does not report the DRA stack");
    left(&DRA_EXAMPLE.replace("resourceSliceCount: 1", "resourceSliceCount: 2"), "new pool generation");
    left(
        &DRA_EXAMPLE.replace("device: gpu-0-mig-1g10gb-19-0}", "device: gpu-0-mig-2g20gb-14-2}"),
        "claim ml/trainer-0-gpu names device gpu-0-mig-2g20gb-14-2, which the driver no longer lists",
    );
}

const DRA_EXAMPLE: &str = include_str!("../../../../examples/dra-static-mig.yaml");

/// A DynamicMIG node is never planned, and each pending claim that fits none of its GPUs now
/// is named with what blocks it: fragmentation (the 3g.40gb) or capacity (the 7g.80gb); the
/// 1g.10gb fits now and is not.
#[test]
fn claims_a_dynamic_mig_node_cannot_take_now_are_named_with_what_blocks_them() {
    let built = snapshot_of(include_str!("../../../../examples/dra-dynamic-mig.yaml"));
    assert!(built.snapshot.nodes.iter().all(|n| n.name != "dyn-1"), "never planned");
    let blocked: Vec<(String, &str, bool)> = built
        .blocked_claims
        .iter()
        .map(|b| (b.pod.to_string(), b.profile.as_str(), b.by_fragmentation))
        .collect();
    assert_eq!(blocked, [("ml/big-0".into(), "7g.80gb", false), ("ml/train-0".into(), "3g.40gb", true)]);
}

#[test]
fn infers_gpus_from_labels_and_capacity() {
    let objects = parse_objects(LIST).unwrap();
    assert_eq!(objects.ignored.get("Service"), Some(&1));
    let built = build_snapshot(&objects, Catalog::builtin(), None, jiff::Timestamp::UNIX_EPOCH).unwrap();
    let s = &built.snapshot;
    assert!(s.placements_inferred);
    let node = &s.nodes[0];
    assert_eq!(node.free_cpu_millis, Some(5000));
    assert_eq!(node.gpus.len(), 2);
    for gpu in &node.gpus {
        // all-balanced: the same share on both GPUs.
        let mut profiles: Vec<&str> = gpu.instances.iter().map(|i| i.profile.as_str()).collect();
        profiles.sort();
        assert_eq!(profiles, ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]);
    }
    let used: Vec<&str> = node
        .gpus
        .iter()
        .flat_map(|g| &g.instances)
        .filter_map(|i| i.pod.as_ref().map(PodKey::as_str))
        .collect();
    assert_eq!(used, ["ml/user"]);
    assert_eq!(s.running.len(), 1);
    assert_eq!(s.pending.len(), 1);
    assert_eq!(s.pending[0].requests["1g.5gb"], 2);
    assert!(
        built.warnings.iter().any(|w| w.contains("ml/fresh") && w.contains("Unschedulable")),
        "{:?}",
        built.warnings
    );
    s.validate(Catalog::builtin()).unwrap();
}

#[test]
fn policy_selector_limits_managed_nodes() {
    let objects = parse_objects(LIST).unwrap();
    let err = parse_policy("kind: MigPolicy\nmetadata: {name: p}\nspec: {nodeSelector: {pool: other}}")
        .unwrap_err()
        .to_string();
    assert!(err.contains("spec.nodeSelector.pool") && err.contains("matchLabels"), "{err}");
    let in_list = "kind: List\nitems:\n- {apiVersion: geometer.dev/v1alpha1, kind: MigPolicy, metadata: {name: p}, spec: {nodeSelector: {pool: other}}}";
    let skipped = parse_objects(in_list).unwrap().skipped;
    let err = skipped[0].to_string();
    assert!(err.contains("spec.nodeSelector.pool"), "the same refusal inside a snapshot List: {err}");
    let policy = parse_policy(
        "kind: MigPolicy\nmetadata: {name: p}\nspec: {nodeSelector: {matchLabels: {pool: other}}}",
    )
    .unwrap();
    let built =
        build_snapshot(&objects, Catalog::builtin(), Some(policy), jiff::Timestamp::UNIX_EPOCH).unwrap();
    assert!(built.snapshot.nodes.is_empty());
    let plain = parse_policy("evictionAllowed: true\nmaxGpusChanged: 3").unwrap();
    assert!(plain.policy.eviction_allowed);
    let err = parse_policy("evictionAllowed: maybe").unwrap_err().to_string();
    assert!(err.contains("maybe") || err.contains("evictionAllowed"), "{err}");
}

#[test]
fn a_node_without_gpu_count_is_skipped_and_named() {
    let text = LIST.replace("nvidia.com/gpu.count: \"2\", ", "");
    let built = snapshot_of(&text);
    assert!(built.snapshot.nodes.iter().all(|n| n.name != "n1"));
    let err = built.skipped[0].to_string();
    assert!(err.contains("nvidia.com/gpu.count") && err.contains("Node n1"), "{err}");
}

#[test]
fn manifests_separated_by_dashes_read_as_one_list() {
    // A Node, then a PodList whose items omit their kind, then one Pod: as
    // `kubectl get node n1 -o yaml; echo ---; kubectl get pods -o yaml` writes them.
    let text = "kind: Node\nmetadata: {name: n1, labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB, nvidia.com/gpu.count: \"1\"}}\n\
            ---\n# comment-only documents and empty ones are skipped\n---\n\
            kind: PodList\nitems:\n- metadata: {name: a, namespace: ml}\n  spec: {containers: [{name: c}]}\n\
            ---\nkind: Pod\nmetadata: {name: b, namespace: ml}\nspec: {containers: [{name: c}]}\n";
    let objects = parse_objects(text).unwrap();
    assert_eq!(objects.nodes.len(), 1);
    let pods: Vec<&str> = objects.pods.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    assert_eq!(pods, ["a", "b"]);
    assert!(objects.skipped.is_empty(), "{:?}", objects.skipped);
    let err = parse_objects("kind: Node\nmetadata: {name: n1}\n---\nkind: PodList\nitems: 7\n").unwrap_err();
    assert!(err.to_string().contains("document 2 (PodList)") && err.to_string().contains("items"), "{err}");
}

#[test]
fn a_second_object_of_the_same_name_is_refused_not_silently_used() {
    let text = format!("{LIST}- kind: Node\n  metadata: {{name: n1, labels: {{}}}}\n");
    let objects = parse_objects(&text).unwrap();
    assert_eq!(objects.nodes.len(), 1);
    let err = objects.skipped[0].to_string();
    assert!(err.contains("Node n1") && err.contains("second object") && err.contains("items[0]"), "{err}");
}

#[test]
fn hostile_counts_are_refused_by_field_and_never_sized_into_memory() {
    let huge = LIST.replace("nvidia.com/gpu.count: \"2\"", "nvidia.com/gpu.count: \"4000000000\"");
    let built = snapshot_of(&huge);
    let err = built.skipped[0].to_string();
    assert!(err.contains("4000000000") && err.contains("at most 16"), "{err}");
    let pods = r#"
kind: List
items:
- kind: Node
  metadata: {name: n1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: "1", nvidia.com/mig-1g.10gb.count: "7"}}
  status: {allocatable: {cpu: "8", memory: 64Gi}}
- kind: Pod
  metadata: {name: hog, namespace: ml}
  spec: {nodeName: n1, containers: [{name: c, resources: {limits: {nvidia.com/mig-1g.10gb: "4294967295"}}}]}
  status: {phase: Running}
- kind: Pod
  metadata: {name: half, namespace: ml}
  spec: {containers: [{name: c, resources: {limits: {nvidia.com/mig-1g.10gb: "1.5"}}}]}
  status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]}
- kind: Pod
  metadata: {name: fine, namespace: ml}
  spec: {containers: [{name: c, resources: {limits: {nvidia.com/mig-3g.40gb: "1"}}}]}
  status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]}
"#;
    let built = snapshot_of(pods);
    let skipped: Vec<String> = built.skipped.iter().map(|e| e.to_string()).collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0].contains("Pod ml/hog") && skipped[0].contains("at most 256"), "{}", skipped[0]);
    assert!(skipped[1].contains("Pod ml/half") && skipped[1].contains("whole number"), "{}", skipped[1]);
    let pending: Vec<&str> = built.snapshot.pending.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(pending, ["fine"], "the good pod is still demand");
}

proptest! {
    #[test]
    fn parsers_never_panic(text in ".{0,300}") {
        if let Ok(objects) = parse_objects(&text) {
            let _ = build_snapshot(&objects, Catalog::builtin(), None, jiff::Timestamp::UNIX_EPOCH);
        }
        let _ = parse_policy(&text);
    }

    #[test]
    fn near_valid_lists_never_panic(count in "[0-9a-z-]{0,4}", cpu in "[0-9a-zA-Z.]{0,5}", profile in "[0-9a-z.+]{0,8}") {
        let text = LIST
            .replace("gpu.count: \"2\"", &format!("gpu.count: {count:?}"))
            .replace("cpu: \"3\"", &format!("cpu: {cpu:?}"))
            .replace("mig-2g.10gb: \"2\"", &format!("mig-{profile}: \"1\""));
        if let Ok(objects) = parse_objects(&text) {
            let _ = build_snapshot(&objects, Catalog::builtin(), None, jiff::Timestamp::UNIX_EPOCH);
        }
    }
}
