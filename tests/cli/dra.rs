//! `geometer plan` on a kubectl List from a cluster where NVIDIA's DRA driver (static MIG)
//! advertises some nodes: pending claims become the geometry they need, allocated devices are
//! kept, claims and device-plugin requests each go to the nodes that can serve them, and what
//! cannot be planned is said.

use serde_json::Value;

use crate::plan::{example, notes, plan_json, pod};

fn gpu<'v>(plan: &'v Value, node: &str) -> &'v Value {
    plan["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["node"] == node)
        .unwrap_or_else(|| panic!("{node} changes"))
}

fn instances(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|i| format!("{}@{}", i["profile"].as_str().unwrap(), i["start"]))
        .collect()
}

/// The example with `extra` items appended, in a temporary file.
fn with_items(extra: &str) -> (tempfile::TempDir, String) {
    let text = std::fs::read_to_string(example("dra-static-mig.yaml")).unwrap();
    let (items, policy) = text.split_once("- apiVersion: geometer.dev/v1alpha1\n  kind: MigPolicy").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    std::fs::write(
        &path,
        format!("{items}{extra}- apiVersion: geometer.dev/v1alpha1\n  kind: MigPolicy{policy}"),
    )
    .unwrap();
    let path = path.display().to_string();
    (dir, path)
}

#[test]
fn pending_claims_get_the_geometry_they_need_and_allocated_devices_stay() {
    let plan = plan_json(&["--snapshot", &example("dra-static-mig.yaml")]);
    let dra = gpu(&plan, "dra-1");
    let after = instances(&dra["to"]);
    // 1g.10gb@0 is held by an allocated claim whose pod is not running, @1 by a running pod.
    for kept in ["1g.10gb@0", "1g.10gb@1"] {
        assert!(after.contains(&kept.to_string()), "{kept} kept: {after:?}");
    }
    assert_eq!(instances(&dra["destroy"]), ["1g.10gb@5"], "only the free instance goes");
    assert!(plan["evictions"].as_array().unwrap().is_empty());

    let train = pod(&plan, "ml/train-0");
    assert_eq!(
        (train["node"].as_str(), &train["requests"]),
        (Some("dra-1"), &serde_json::json!({"3g.40gb": 1}))
    );
    // firstAvailable: no B200 in the cluster, so the cheapest slice with at least 15 GiB.
    let eval = pod(&plan, "ml/eval-0");
    assert_eq!(
        (eval["node"].as_str(), &eval["requests"]),
        (Some("dra-1"), &serde_json::json!({"1g.20gb": 1}))
    );
    assert_eq!(
        pod(&plan, "media/render-0")["node"],
        "plugin-1",
        "the device-plugin pod goes to the device plugin"
    );

    let notes = notes(&plan);
    let said = |words: &[&str]| notes.iter().any(|n| words.iter().all(|w| n.contains(w)));
    assert!(said(&["ml/train-0", "from template ml/mig-3g", "1 x 3g.40gb"]), "{notes:?}");
    assert!(said(&["ml/eval-0", "claim ml/eval-0-gpu", "1 x 1g.20gb"]), "{notes:?}");
    assert!(said(&["ops/probe-0 not planned", "allocationMode All"]), "{notes:?}");
    assert!(said(&["1 node(s)", "DRA driver advertises (static MIG)", "dra-1"]), "{notes:?}");
    assert!(plan["pods"].as_array().unwrap().iter().all(|p| p["pod"] != "ops/probe-0"), "never guessed");
}

#[test]
fn a_device_plugin_request_goes_to_a_dra_node_only_through_a_device_class() {
    let pod_asking = "- apiVersion: v1\n  kind: Pod\n  metadata: {name: legacy-0, namespace: ml}\n  spec:\n    priority: 1000\n    containers: [{name: c, resources: {limits: {nvidia.com/mig-1g.20gb: \"1\"}}}]\n  status:\n    phase: Pending\n    conditions: [{type: PodScheduled, status: \"False\", reason: Unschedulable}]\n";
    let (_dir, path) = with_items(pod_asking);
    let plan = plan_json(&["--snapshot", &path]);
    // Only the H100 on the DRA node has 1g.20gb, and no DeviceClass maps the resource there: even
    // first in line, the pod gets nothing.
    assert!(pod(&plan, "ml/legacy-0")["node"].is_null(), "{}", pod(&plan, "ml/legacy-0"));

    let class = "- apiVersion: resource.k8s.io/v1\n  kind: DeviceClass\n  metadata: {name: mig-1g.20gb}\n  spec:\n    extendedResourceName: nvidia.com/mig-1g.20gb\n    selectors:\n    - cel: {expression: \"device.attributes['gpu.nvidia.com'].profile == '1g.20gb'\"}\n";
    let (_dir, path) = with_items(&format!("{pod_asking}{class}"));
    let plan = plan_json(&["--snapshot", &path]);
    assert_eq!(pod(&plan, "ml/legacy-0")["node"], "dra-1");
}

#[test]
fn a_class_named_extended_resource_is_read_through_its_class() {
    let pod_asking = "- apiVersion: v1\n  kind: Pod\n  metadata: {name: implicit-0, namespace: ml}\n  spec:\n    containers: [{name: c, resources: {limits: {deviceclass.resource.kubernetes.io/mig.nvidia.com: \"2\"}}}]\n  status:\n    phase: Pending\n    conditions: [{type: PodScheduled, status: \"False\", reason: Unschedulable}]\n";
    let (_dir, path) = with_items(pod_asking);
    let plan = plan_json(&["--snapshot", &path]);
    let implicit = pod(&plan, "ml/implicit-0");
    assert_eq!(implicit["requests"], serde_json::json!({"1g.10gb": 2}), "the cheapest MIG device, twice");
}

/// A pending pod `ml/<name>` with a claim of its own name, whose `devices` are `body`.
fn claim(name: &str, body: &str) -> String {
    format!(
        "- apiVersion: resource.k8s.io/v1\n  kind: ResourceClaim\n  metadata: {{name: {name}, namespace: ml}}\n  spec:\n    devices:\n{body}\n- apiVersion: v1\n  kind: Pod\n  metadata: {{name: {name}, namespace: ml}}\n  spec:\n    resourceClaims: [{{name: gpu, resourceClaimName: {name}}}]\n    containers: [{{name: c, resources: {{claims: [{{name: gpu}}]}}}}]\n  status:\n    phase: Pending\n    conditions: [{{type: PodScheduled, status: \"False\", reason: Unschedulable}}]\n"
    )
}

/// Two MIG devices (requests `a` and `b`) and one constraint across them.
fn two_devices(constraint: &str) -> String {
    format!("      requests:\n      - name: a\n        exactly: {{deviceClassName: mig.nvidia.com}}\n      - name: b\n        exactly: {{deviceClassName: mig.nvidia.com}}\n      constraints:\n      - {constraint}")
}

/// `matchAttribute` on the parent GPU puts a claim's devices on one GPU, `distinctAttribute`
/// each on its own; the only node with DRA has one GPU, so the second cannot be served there.
#[test]
fn a_constraint_on_the_parent_gpu_is_planned_as_the_gpus_the_devices_share() {
    let extra = [
        claim("same-gpu", &two_devices("matchAttribute: gpu.nvidia.com/parentUUID")),
        claim("own-gpus", &two_devices("distinctAttribute: gpu.nvidia.com/parentUUID")),
        claim(
            "part",
            "      requests:\n      - name: a\n        exactly: {deviceClassName: mig.nvidia.com}\n      - name: b\n        exactly: {deviceClassName: mig.nvidia.com}\n      - name: c\n        exactly: {deviceClassName: mig.nvidia.com}\n      constraints:\n      - matchAttribute: gpu.nvidia.com/parentUUID\n        requests: [a, b]",
        ),
    ]
    .concat();
    let (_dir, path) = with_items(&extra);
    let plan = plan_json(&["--snapshot", &path]);
    let same = pod(&plan, "ml/same-gpu");
    assert_eq!(
        (same["node"].as_str(), &same["requests"]),
        (Some("dra-1"), &serde_json::json!({"1g.10gb": 2}))
    );
    let own = pod(&plan, "ml/own-gpus");
    assert!(own["node"].is_null(), "{own}");
    assert!(own["reason"].to_string().contains("each on its own GPU"), "{own}");
    let notes = notes(&plan);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("ml/part not planned") && n.contains("covers 2 of the pod's 3 devices")),
        "{notes:?}"
    );
}

#[test]
fn claims_that_cannot_be_planned_are_said_why_and_never_guessed() {
    let one_device = "      requests:\n      - name: gpu\n        exactly:\n          deviceClassName: mig.nvidia.com\n          selectors:\n          - cel: {expression: \"device.attributes['gpu.nvidia.com'].uuid == 'MIG-dra-1-0-5'\"}";
    let no_class =
        "      requests:\n      - name: gpu\n        exactly: {deviceClassName: mig-2g.nvidia.com}";
    let same_model = two_devices("matchAttribute: gpu.nvidia.com/productName");
    let broken = "      requests:\n      - name: gpu\n        exactly:\n          deviceClassName: mig.nvidia.com\n          selectors:\n          - cel: {expression: \"device.attributes['gpu.nvidia.com'].profile ==\"}";
    let extra =
        [("one-device", one_device), ("no-class", no_class), ("same-model", &same_model), ("broken", broken)]
            .iter()
            .map(|(n, b)| claim(n, b))
            .collect::<String>();
    let (_dir, path) = with_items(&extra);
    let plan = plan_json(&["--snapshot", &path]);
    let notes = notes(&plan);
    for (pod_name, why) in [
        ("ml/one-device", "no uuid or parentUUID until it exists"),
        ("ml/no-class", "DeviceClass mig-2g.nvidia.com does not exist"),
        ("ml/same-model", "constraint on gpu.nvidia.com/productName across 2 devices; only the parent GPU"),
        ("ml/broken", "does not compile"),
    ] {
        assert!(
            notes.iter().any(|n| n.contains(&format!("{pod_name} not planned")) && n.contains(why)),
            "{pod_name}: {why}: {notes:?}"
        );
        assert!(
            plan["pods"].as_array().unwrap().iter().all(|p| p["pod"] != pod_name),
            "{pod_name} not demand"
        );
    }
    // A claim for another driver's device is none of Geometer's business: not even a note.
    let nic = claim(
        "nic",
        "      requests:\n      - name: port\n        exactly: {deviceClassName: sriov.example.com}",
    );
    let (_dir, path) = with_items(&nic);
    let nic_plan = plan_json(&["--snapshot", &path]);
    let said = crate::plan::notes(&nic_plan);
    assert!(said.iter().all(|n| !n.contains("ml/nic")), "{said:?}");
    // The rest is planned as before.
    assert_eq!(pod(&plan, "ml/train-0")["node"], "dra-1");
}

/// A node whose H100 is whole (MIG mode off) publishes it as a device with no `profile`. A class
/// whose selector reads `profile` without checking `type` first fails on it, and kube-scheduler
/// then refuses every pod asking through that class: Geometer says so instead of planning a
/// slice the pod could never be given. Guarded, the same class is planned.
#[test]
fn a_class_whose_selector_fails_on_a_published_device_is_said_to_stop_its_pods() {
    let whole_node = "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: dra-2\n    labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: \"1\"}\n  status:\n    allocatable: {cpu: \"32\", memory: 256Gi}\n- apiVersion: geometer.dev/v1alpha1\n  kind: MigNode\n  metadata: {name: dra-2}\n  spec: {}\n  status:\n    deviceStack: DraStaticMig\n    gpus:\n    - {index: 0, uuid: GPU-dra-2-0, model: H100-80GB, pciDeviceId: \"0x233010DE\", migMode: {current: false, pending: false}, instances: []}\n- apiVersion: resource.k8s.io/v1\n  kind: ResourceSlice\n  metadata: {name: dra-2-gpu.nvidia.com}\n  spec:\n    driver: gpu.nvidia.com\n    nodeName: dra-2\n    pool: {name: dra-2, generation: 1, resourceSliceCount: 1}\n    devices:\n    - name: gpu-0\n      attributes:\n        type: {string: gpu}\n        uuid: {string: GPU-dra-2-0}\n        productName: {string: NVIDIA H100 80GB HBM3}\n";
    let pod_asking = "- apiVersion: v1\n  kind: Pod\n  metadata: {name: legacy-0, namespace: ml}\n  spec:\n    priority: 1000\n    containers: [{name: c, resources: {limits: {nvidia.com/mig-1g.20gb: \"1\"}}}]\n  status:\n    phase: Pending\n    conditions: [{type: PodScheduled, status: \"False\", reason: Unschedulable}]\n";
    let class = |expression: &str| {
        format!("- apiVersion: resource.k8s.io/v1\n  kind: DeviceClass\n  metadata: {{name: mig-1g.20gb}}\n  spec:\n    extendedResourceName: nvidia.com/mig-1g.20gb\n    selectors:\n    - cel: {{expression: \"{expression}\"}}\n")
    };
    let unguarded = class("device.attributes['gpu.nvidia.com'].profile == '1g.20gb'");
    let (_dir, path) = with_items(&format!("{whole_node}{pod_asking}{unguarded}"));
    let plan = plan_json(&["--snapshot", &path]);
    assert!(plan["pods"].as_array().unwrap().iter().all(|p| p["pod"] != "ml/legacy-0"), "not demand");
    let said = notes(&plan).into_iter().find(|n| n.contains("ml/legacy-0")).unwrap_or_default();
    assert!(said.contains("No such key: profile") && said.contains("guard it"), "{said}");

    let guarded =
        class("device.attributes['gpu.nvidia.com'].type == 'mig' && device.attributes['gpu.nvidia.com'].profile == '1g.20gb'");
    let (_dir, path) = with_items(&format!("{whole_node}{pod_asking}{guarded}"));
    let plan = plan_json(&["--snapshot", &path]);
    assert!(pod(&plan, "ml/legacy-0")["node"].is_string(), "{}", pod(&plan, "ml/legacy-0"));
}
