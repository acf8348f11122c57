//! DRA on the real control plane: a simulated node advertises its MIG devices as NVIDIA's DRA
//! driver does in static MIG mode (one ResourceSlice), the real kube-scheduler allocates pods'
//! ResourceClaims against it, kube-controller-manager makes claims from templates and frees
//! them, and the simulated kubelet runs each pod on exactly the instance it was allocated.

use geometer_agent::read_inventory;
use geometer_controller::dra::selector::{CandidateDevice, Selector};
use geometer_simcluster::dra::{device_name, slice_name, DRA_DRIVER};
use geometer_simcluster::{ClusterSpec, Device, GpuSpec, NodeSpec, SimCluster};
use geometer_testkit::control_plane::{start_or_skip, ControlPlane, Identity};
use geometer_testkit::wait::wait_until;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

const NS: &str = "ml";
const NODE: &str = "dra-1";

/// NVIDIA's chart's class for MIG devices (its `mig.nvidia.com` DeviceClass).
pub(crate) fn mig_class() -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "mig.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}]},
    })
}

/// A template for one MIG device of `profile`, as the driver's examples write it.
pub(crate) fn template(profile: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": profile.replace('.', "-"), "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": format!("device.attributes['gpu.nvidia.com'].profile == '{profile}'")}}],
        }}]}}},
    })
}

pub(crate) fn pod(name: &str, template: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    })
}

pub(crate) fn object<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// Creates `value`, retrying while the namespace's ServiceAccount is not made yet.
pub(crate) async fn create<K>(api: &Api<K>, value: Value)
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = object(value);
    wait_until(
        "object created",
        || async { api.create(&PostParams::default(), &object).await.ok().map(|_| ()) },
        String::new,
    )
    .await;
}

fn logs(cp: &ControlPlane) -> String {
    format!("{}\n{}", cp.log_tail("kube-scheduler", 30), cp.log_tail("kube-controller-manager", 30))
}

/// Pod `name`, once it runs.
async fn running(pods: &Api<Pod>, name: &str) -> Option<Pod> {
    let pod = pods.get(name).await.ok()?;
    (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
}

/// The DRA device a running pod was allocated (its claim's one result).
async fn allocated(claims: &Api<ResourceClaim>, pod: &Pod) -> String {
    let name = pod.status.as_ref().unwrap().resource_claim_statuses.as_ref().unwrap()[0]
        .resource_claim_name
        .clone()
        .unwrap();
    let claim = claims.get(&name).await.unwrap();
    let results = claim.status.unwrap().allocation.unwrap().devices.unwrap().results.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!((results[0].driver.as_str(), results[0].pool.as_str()), (DRA_DRIVER, NODE));
    results[0].device.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_scheduler_allocates_a_claim_on_the_static_slice_and_the_pod_runs_on_that_instance() {
    let Some(cp) = start_or_skip("DRA static MIG").await else { return };
    let admin = cp.client(Identity::Admin).await;
    let ns: Namespace = object(json!({"metadata": {"name": NS}}));
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &ns).await.unwrap();
    let geometry = [("1g.10gb", 0), ("1g.10gb", 1), ("3g.40gb", 4)];
    let spec = ClusterSpec::new(vec![NodeSpec::new(NODE, "H100-80GB", 1, &geometry).dra()]);
    let kubelet = cp.client(Identity::Kubelet).await;
    let sim = SimCluster::join(kubelet, &spec, &cp.dir().join("nodes")).await.expect("the node joins");

    // The slice lists the three instances by the driver's names, each with its MIG UUID.
    let slice = Api::<ResourceSlice>::all(admin.clone()).get(&slice_name(NODE)).await.unwrap();
    let listed: Vec<(String, String)> = slice
        .spec
        .devices
        .iter()
        .flatten()
        .map(|d| {
            let attributes = d.attributes.as_ref().unwrap();
            (d.name.clone(), attributes["uuid"].string.clone().unwrap())
        })
        .collect();
    let h100 = sim.catalog().find("H100-80GB");
    let inventory = read_inventory(&sim.nvml(NODE).unwrap(), sim.catalog(), &[]).unwrap();
    let instances = &inventory.gpus[0].instances;
    let uuid = |i: &geometer_api::MigInstance| i.uuid.clone().unwrap();
    let mut expected: Vec<(String, String)> = instances
        .iter()
        .map(|i| {
            let device = Device { gpu: 0, start: i.start, profile: i.profile.clone(), uuid: uuid(i) };
            (device_name(h100, &device), uuid(i))
        })
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(admin.clone()).get(NODE).await.unwrap();
    let allocatable = node.status.unwrap().allocatable.unwrap();
    assert!(
        !allocatable.keys().any(|k| k.starts_with("nvidia.com/")),
        "a DRA node advertises no extended resource"
    );

    create(&Api::<DeviceClass>::all(admin.clone()), mig_class()).await;
    create(&Api::<ResourceClaimTemplate>::namespaced(admin.clone(), NS), template("3g.40gb")).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), NS);
    create(&pods, pod("first", "3g-40gb")).await;
    let first = wait_until("the claiming pod runs", || running(&pods, "first"), || logs(&cp)).await;
    let device = allocated(&claims, &first).await;
    assert_eq!(device, "gpu-0-mig-3g40gb-9-4", "the only 3g.40gb device");
    let three_g = instances.iter().find(|i| i.profile == "3g.40gb").unwrap();
    assert_eq!(slice_uuid(&admin, &device).await, uuid(three_g));
    // The kubelet reports the device it prepared for the claim by its published name.
    let held: Vec<(String, Option<String>)> = sim
        .assignments(NODE)
        .unwrap()
        .get()
        .into_iter()
        .filter(|a| a.pod == "first")
        .map(|a| (a.device_id, a.claim))
        .collect();
    let claim = first.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref()).unwrap()[0]
        .resource_claim_name
        .clone()
        .unwrap();
    assert_eq!(
        held,
        [(device.clone(), Some(format!("{NS}/{claim}")))],
        "the pod runs on the device its claim was allocated"
    );

    // A second pod for the same profile waits: the one 3g.40gb device is allocated.
    create(&pods, pod("second", "3g-40gb")).await;
    let unschedulable = || async {
        let pod = pods.get("second").await.ok()?;
        let conditions = pod.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
            .then_some(())
    };
    wait_until("the second pod is unschedulable", unschedulable, || logs(&cp)).await;

    // The first pod goes: kube-controller-manager deletes its claim, and the second pod gets
    // the same device.
    pods.delete("first", &DeleteParams::default().grace_period(0)).await.unwrap();
    let second = wait_until("the second pod runs", || running(&pods, "second"), || logs(&cp)).await;
    assert_eq!(allocated(&claims, &second).await, device);
}

/// The selectors of the agreement test: NVIDIA's examples (profile equality, memory bounds)
/// and edge cases (a list, string functions, a capacity name, another domain, nothing
/// matching, an attribute some devices lack). Each is a device class selector and a request
/// selector.
const SELECTORS: &[(&str, &str)] = &[
    (MIG, "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"),
    (MIG, "device.attributes['gpu.nvidia.com'].profile in ['2g.20gb', '3g.40gb']"),
    (MIG, "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('20Gi')) >= 0"),
    (MIG, "device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('15Gi'))"),
    (MIG, "device.attributes['gpu.nvidia.com'].profile.startsWith('1g.')"),
    (MIG, "'memorySlice6' in device.capacity['gpu.nvidia.com']"),
    (MIG, "!('model' in device.attributes['example.com'])"),
    (ANY, "device.attributes['gpu.nvidia.com'].type == 'gpu'"),
    (ANY, "device.attributes['gpu.nvidia.com'].productName.matches('H100')"),
    (MIG, "device.attributes['gpu.nvidia.com'].profile == '9g.90gb'"),
    (ANY, "device.attributes['gpu.nvidia.com'].profile == '7g.80gb'"),
];
const MIG: &str = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'";
const ANY: &str = "device.driver == 'gpu.nvidia.com'";

/// What Geometer says a claim for every device matching `class` and `request` gets: the
/// matching devices, or `None` when there are none or the expressions fail on a device (the
/// allocator then allocates nothing).
fn geometer_matches(slice: &ResourceSlice, class: &str, request: &str) -> Option<Vec<String>> {
    let (class, request) = (Selector::compile(class).unwrap(), Selector::compile(request).unwrap());
    let mut matched = Vec::new();
    for device in slice.spec.devices.iter().flatten() {
        let candidate = CandidateDevice::from_slice(DRA_DRIVER, device);
        let both = class
            .matches(&device.name, &candidate)
            .and_then(|c| Ok(c && request.matches(&device.name, &candidate)?));
        match both {
            Ok(true) => matched.push(device.name.clone()),
            Ok(false) => {}
            Err(_) => return None,
        }
    }
    (!matched.is_empty()).then(|| {
        matched.sort();
        matched
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geometer_selects_the_devices_the_real_allocator_selects() {
    let Some(cp) = start_or_skip("DRA selector agreement").await else { return };
    let admin = cp.client(Identity::Admin).await;
    let ns: Namespace = object(json!({"metadata": {"name": NS}}));
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &ns).await.unwrap();
    // One GPU per shape, so every H100 profile and a whole GPU are devices of the slice.
    let gpus = [
        (0..7).map(|start| ("1g.10gb", start)).collect(),
        vec![("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)],
        vec![("4g.40gb", 0), ("3g.40gb", 4)],
        vec![("1g.20gb", 0), ("1g.20gb", 2), ("1g.20gb", 4), ("1g.20gb", 6)],
        vec![("7g.80gb", 0)],
        vec![("whole", 0)],
    ];
    let node = NodeSpec {
        gpus: gpus.iter().map(|g| GpuSpec::new("H100-80GB", g)).collect(),
        ..NodeSpec::new(NODE, "H100-80GB", 0, &[]).dra()
    };
    let kubelet = cp.client(Identity::Kubelet).await;
    let _sim =
        SimCluster::join(kubelet, &ClusterSpec::new(vec![node]), &cp.dir().join("nodes")).await.unwrap();
    let slice = Api::<ResourceSlice>::all(admin.clone()).get(&slice_name(NODE)).await.unwrap();
    assert_eq!(slice.spec.devices.as_ref().unwrap().len(), 19);

    let classes: Api<DeviceClass> = Api::all(admin.clone());
    let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    for (i, (class, request)) in SELECTORS.iter().enumerate() {
        let class_name = format!("class-{i}");
        create(&classes, json!({"metadata": {"name": class_name}, "spec": {"selectors": [{"cel": {"expression": class}}]}})).await;
        let claim = json!({"metadata": {"name": format!("sel-{i}"), "namespace": NS}, "spec": {"devices": {"requests": [{"name": "all", "exactly": {
            "deviceClassName": class_name, "allocationMode": "All", "selectors": [{"cel": {"expression": request}}]}}]}}});
        create(&claims, claim).await;
        let probe = json!({"metadata": {"name": format!("probe-{i}"), "namespace": NS}, "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": format!("sel-{i}")}],
            "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]}});
        create(&pods, probe).await;
        let outcome = || async {
            let claim = claims.get(&format!("sel-{i}")).await.ok()?;
            if let Some(allocation) = claim.status.and_then(|s| s.allocation) {
                let mut devices: Vec<String> =
                    allocation.devices?.results?.into_iter().map(|r| r.device).collect();
                devices.sort();
                return Some(Some(devices));
            }
            let pod = pods.get(&format!("probe-{i}")).await.ok()?;
            // Unschedulable: no device matches; SchedulerError: an expression failed on a
            // device ("CEL runtime error: no such key"), and the allocator allocates nothing.
            let refused = pod.status?.conditions?.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && matches!(c.reason.as_deref(), Some("Unschedulable" | "SchedulerError"))
            });
            refused.then_some(None)
        };
        let allocated =
            wait_until(&format!("selector {request} allocated or refused"), outcome, || logs(&cp)).await;
        assert_eq!(geometer_matches(&slice, class, request), allocated, "class {class}, request {request}");
        pods.delete(&format!("probe-{i}"), &DeleteParams::default().grace_period(0)).await.unwrap();
        claims.delete(&format!("sel-{i}"), &DeleteParams::default()).await.unwrap();
        let gone = || async { claims.get_opt(&format!("sel-{i}")).await.ok()?.is_none().then_some(()) };
        wait_until(&format!("claim sel-{i} gone"), gone, || logs(&cp)).await;
    }
}

/// A device-plugin node and a DRA node side by side, each with one idle whole-GPU geometry,
/// and demand for four halves: the operator splits only the device-plugin node's GPU (two
/// pods run there) and leaves the DRA node's GPU as it is, since NVIDIA's DRA driver
/// advertises it; the other two pods wait, reported unmet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_device_plugin_nodes_a_dra_node_is_left_as_it_is() {
    use crate::support::{operator, running, WHOLE};
    use geometer_api::PolicyMode;
    use geometer_simcluster::MigPod;
    use geometer_testkit::e2e::policy;

    let spec = ClusterSpec::new(vec![
        NodeSpec::new("gpu-1", "H100-80GB", 1, WHOLE),
        NodeSpec::new(NODE, "H100-80GB", 1, WHOLE).dra(),
    ]);
    let Some(k8s) = operator("DRA beside the device plugin", &spec, &policy(PolicyMode::Auto, false)).await
    else {
        return;
    };
    k8s.deploy("infer", 4, MigPod::new(NS, "infer").slice("3g.40gb", 1).build()).await;
    running(&k8s, "infer", 2).await;
    let plan = k8s.succeeded_plan().await;
    assert_eq!(k8s.geometry("gpu-1", 0), ["3g.40gb@0", "3g.40gb@4"]);
    assert_eq!(k8s.geometry(NODE, 0), ["7g.80gb@0"], "the DRA node's GPU is left as it is");
    let changed: Vec<&str> = plan.spec.nodes.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(changed, ["gpu-1"]);
    assert_eq!(plan.spec.demand.unmet.len(), 2, "{:?}", plan.spec.demand);
    assert_eq!(k8s.running_of("infer").await.len(), 2);
}

/// Device UUIDs of a slice.
fn uuids(slice: &ResourceSlice) -> std::collections::BTreeSet<String> {
    let devices = slice.spec.devices.iter().flatten();
    devices.filter_map(|d| d.attributes.as_ref()?.get("uuid")?.string.clone()).collect()
}

/// The device sets a slice watch has seen, shared with the watch's task.
type SeenSlices = std::sync::Arc<std::sync::Mutex<Vec<std::collections::BTreeSet<String>>>>;

/// Every distinct device set the node's ResourceSlice has listed since the watch began, in order.
fn watch_slices(admin: kube::Client) -> (SeenSlices, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let api = Api::<ResourceSlice>::all(admin);
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let (watcher::Event::Apply(slice) | watcher::Event::InitApply(slice)) =
                event.unwrap_or(watcher::Event::Init)
            else {
                continue;
            };
            if slice.spec.node_name.as_deref() != Some(NODE) {
                continue;
            }
            let mut seen = record.lock().unwrap();
            let devices = uuids(&slice);
            if seen.last() != Some(&devices) {
                seen.push(devices);
            }
        }
    });
    (seen, task)
}

/// The operator on one static-MIG DRA node whose H100 has 1g.10gb instances at placements 0, 1
/// and 5 (no room for a 3g.40gb), with NVIDIA's `mig.nvidia.com` DeviceClass; `None` when the
/// test is skipped.
async fn fragmented_h100(
    test: &str,
    eviction_allowed: bool,
) -> Option<geometer_testkit::real_cluster::RealCluster> {
    use geometer_api::PolicyMode;
    use geometer_testkit::e2e::policy;

    let geometry = [("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 5)];
    let spec = ClusterSpec::new(vec![NodeSpec::new(NODE, "H100-80GB", 1, &geometry).dra()]);
    let k8s = crate::support::operator(test, &spec, &policy(PolicyMode::Auto, eviction_allowed)).await?;
    create(&Api::<DeviceClass>::all(k8s.admin.clone()), mig_class()).await;
    Some(k8s)
}

/// A pod whose claim (from a template) asks for a 3g.40gb, which the DRA node's H100 cannot
/// give with 1g.10gb instances at placements 0, 1 and 5: the operator plans the change, the agent
/// cordons, destroys the free instance, makes the 3g.40gb, restarts the driver's kubelet plugin
/// and waits for its slice to list NVML's instances, uncordons; the real scheduler then
/// allocates the claim and the pod runs on the new instance. The slice goes from the old
/// devices to the new ones in one step: never a list naming a destroyed instance beside new
/// ones, and the claim is never allocated a device that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_claim_gets_its_instance_end_to_end_and_no_slice_names_a_destroyed_one() {
    let Some(k8s) = fragmented_h100("DRA claim end to end", false).await else { return };
    let admin = k8s.admin.clone();
    let before = read_inventory(&k8s.sim.nvml(NODE).unwrap(), k8s.sim.catalog(), &[]).unwrap();
    let (slices, watch) = watch_slices(admin.clone());
    create(&Api::<ResourceClaimTemplate>::namespaced(admin.clone(), NS), template("3g.40gb")).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    create(&pods, pod("train", "3g-40gb")).await;
    // A claim pinned to one device by its UUID cannot be planned: the pod is told why.
    let pinned = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "pinned", "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].uuid == 'MIG-elsewhere'"}}]}}]}},
    });
    create(&Api::<ResourceClaim>::namespaced(admin.clone(), NS), pinned).await;
    let mut pinned_pod = pod("pinned", "");
    pinned_pod["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": "pinned"}]);
    create(&pods, pinned_pod).await;

    let runs = || async {
        k8s.check_alive();
        running(&pods, "train").await
    };
    let train = wait_until("the claiming pod runs", runs, || k8s.logs()).await;
    let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), NS);
    // Every instance was free: the plan puts 3g.40gb instances where it likes (the rest of the
    // GPU too, as headroom); the claim gets one of them.
    let geometry = k8s.geometry(NODE, 0);
    let made: Vec<String> = geometry
        .iter()
        .filter_map(|g| g.strip_prefix("3g.40gb@"))
        .map(|start| format!("gpu-0-mig-3g40gb-9-{start}"))
        .collect();
    let device = allocated(&claims, &train).await;
    assert!(made.contains(&device), "{device} among the new instances {geometry:?}");
    let plan = k8s.succeeded_plan().await;
    assert_eq!(plan.spec.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), [NODE]);
    let told = k8s.event_notes("pinned", "ClaimNotPlanned").await;
    assert!(told.iter().any(|n| n.contains("claim ml/pinned") && n.contains("no uuid")), "{told:?}");

    let after = read_inventory(&k8s.sim.nvml(NODE).unwrap(), k8s.sim.catalog(), &[]).unwrap();
    let all = |gpus: &[geometer_api::GpuInventory]| -> std::collections::BTreeSet<String> {
        gpus[0].instances.iter().filter_map(|i| i.uuid.clone()).collect()
    };
    watch.abort();
    let seen = slices.lock().unwrap().clone();
    assert_eq!(
        seen,
        [all(&before.gpus), all(&after.gpus)],
        "the slice lists the old instances, then the new ones"
    );
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(admin.clone()).get(NODE).await.unwrap();
    assert!(node.spec.and_then(|s| s.unschedulable) != Some(true), "uncordoned once done");

    // The kubelet reports the claim's device by name (PodResources `dynamic_resources`); the
    // agent finds its UUID in the slice and shows the pod on that instance.
    let uuid = slice_uuid(&admin, &device).await;
    let shown = || async {
        let mignode = Api::<geometer_api::MigNode>::all(admin.clone()).get(NODE).await.ok()?;
        let gpus = mignode.status?.gpus;
        let instance =
            gpus.iter().flat_map(|g| &g.instances).find(|i| i.uuid.as_deref() == Some(uuid.as_str()))?;
        (instance.pod.as_deref() == Some("ml/train")).then_some(())
    };
    wait_until("the MigNode shows the claim's pod on its instance", shown, || k8s.logs()).await;
}

/// The `uuid` attribute of the device `name` in the node's newest slice.
async fn slice_uuid(admin: &kube::Client, name: &str) -> String {
    let slices = Api::<ResourceSlice>::all(admin.clone()).list(&Default::default()).await.unwrap();
    let newest = slices.items.into_iter().max_by_key(|s| s.spec.pool.generation).unwrap();
    let device = newest.spec.devices.into_iter().flatten().find(|d| d.name == name).unwrap();
    device.attributes.unwrap()["uuid"].string.clone().unwrap()
}

/// A pod whose image cannot be pulled sits bound in `ImagePullBackOff`: its claim is allocated
/// and reserved for it, no process of it runs, and the kubelet reports no device for it. Two
/// pending claims then ask for a 3g.40gb each, which the H100 can give only with all three of
/// its 1g.10gb instances gone: the operator reshapes around the one the stuck pod's claim was
/// allocated, never destroying it, so one 3g.40gb claim is served and the other is told why
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocated_claim_whose_pod_is_not_running_keeps_its_instance_through_a_reshape() {
    let Some(k8s) = fragmented_h100("DRA allocated claim of a pod not running", false).await else { return };
    let admin = k8s.admin.clone();
    let templates = Api::<ResourceClaimTemplate>::namespaced(admin.clone(), NS);
    create(&templates, template("1g.10gb")).await;
    create(&templates, template("3g.40gb")).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), NS);
    let mut stuck = pod("stuck", "1g-10gb");
    stuck["spec"]["containers"][0]["image"] = json!("registry.invalid/train:1");
    create(&pods, stuck).await;
    let backing_off = || async {
        k8s.check_alive();
        let pod = pods.get("stuck").await.ok()?;
        let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
        let waiting = statuses[0].state.as_ref()?.waiting.as_ref()?;
        (waiting.reason.as_deref() == Some("ImagePullBackOff")).then_some(pod)
    };
    let stuck = wait_until("the stuck pod backs off pulling its image", backing_off, || k8s.logs()).await;
    let held = allocated(&claims, &stuck).await;
    let held_uuid = slice_uuid(&admin, &held).await;

    create(&pods, pod("train-a", "3g-40gb")).await;
    create(&pods, pod("train-b", "3g-40gb")).await;
    let one_runs = || async {
        k8s.check_alive();
        for (name, other) in [("train-a", "train-b"), ("train-b", "train-a")] {
            if running(&pods, name).await.is_some() {
                return Some((name, other));
            }
        }
        None
    };
    let (served, waiting) = wait_until("a 3g.40gb claim's pod runs", one_runs, || k8s.logs()).await;
    let told = || async {
        k8s.check_alive();
        k8s.event_notes(waiting, "NoSlicePlanned").await.pop()
    };
    let why = wait_until("the other 3g.40gb pod is told why it waits", told, || k8s.logs()).await;
    assert!(why.contains("in use"), "{why}");
    let served = running(&pods, served).await.unwrap();
    assert!(allocated(&claims, &served).await.starts_with("gpu-0-mig-3g40gb-"));
    assert!(running(&pods, waiting).await.is_none());
    let gpus = read_inventory(&k8s.sim.nvml(NODE).unwrap(), k8s.sim.catalog(), &[]).unwrap().gpus;
    let kept = gpus[0].instances.iter().any(|i| i.uuid.as_deref() == Some(held_uuid.as_str()));
    assert!(
        kept,
        "the stuck pod's instance {held} ({held_uuid}) is never destroyed: {:?}",
        k8s.geometry(NODE, 0)
    );
    assert_eq!(allocated(&claims, &stuck).await, held, "its claim still names it");
    assert!(k8s.evicted().is_empty(), "nothing is evicted: {:?}", k8s.evicted());
}

/// A pod holding a 1g.10gb through its claim, marked do-not-disrupt, and a pod asking for
/// `nvidia.com/mig-7g.80gb` as an extended resource, which the DRA driver serves through a
/// DeviceClass naming it (`extendedResourceName`): with eviction allowed, the whole-GPU slice
/// would need the holder gone, so the holder is never evicted and its instance stays while
/// the big pod waits. Once the holder ends, the GPU is reshaped and kube-scheduler serves the
/// extended resource from the new device.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_resource_through_a_device_class_waits_for_a_do_not_disrupt_holder_and_is_then_served() {
    let Some(k8s) = fragmented_h100("DRA extended resource", true).await else { return };
    let admin = k8s.admin.clone();
    let whole_slice = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "mig-7g.80gb"},
        "spec": {
            "extendedResourceName": "nvidia.com/mig-7g.80gb",
            "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '7g.80gb'"}}],
        },
    });
    create(&Api::<DeviceClass>::all(admin.clone()), whole_slice).await;
    create(&Api::<ResourceClaimTemplate>::namespaced(admin.clone(), NS), template("1g.10gb")).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let mut keeper = pod("keeper", "1g-10gb");
    keeper["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    create(&pods, keeper).await;
    let runs = |name: &'static str| {
        let (pods, k8s) = (&pods, &k8s);
        async move {
            k8s.check_alive();
            running(pods, name).await
        }
    };
    let keeper = wait_until("the holder runs", || runs("keeper"), || k8s.logs()).await;
    let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), NS);
    let held = allocated(&claims, &keeper).await;

    let big = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "cuda",
            "resources": {"limits": {"nvidia.com/mig-7g.80gb": "1"}}}]},
    });
    create(&pods, big).await;
    let unmet = || async {
        k8s.check_alive();
        k8s.event_notes("big", "NoSlicePlanned").await.pop()
    };
    let why = wait_until("the big pod said unplanned", unmet, || k8s.logs()).await;
    assert!(why.contains("instances in use"), "{why}");
    assert!(k8s.evicted().is_empty(), "the do-not-disrupt holder is never evicted: {:?}", k8s.evicted());
    let slice = Api::<ResourceSlice>::all(admin.clone()).get(&slice_name(NODE)).await.unwrap();
    assert!(slice.spec.devices.iter().flatten().any(|d| d.name == held), "its instance stays: {held}");
    assert!(running(&pods, "keeper").await.is_some());

    pods.delete("keeper", &DeleteParams::default().grace_period(0)).await.unwrap();
    let big = wait_until("the big pod runs", || runs("big"), || k8s.logs()).await;
    assert_eq!(k8s.geometry(NODE, 0), ["7g.80gb@0"]);
    let made = big.status.and_then(|s| s.extended_resource_claim_status).map(|c| c.resource_claim_name);
    let claim =
        claims.get(&made.expect("the scheduler made a claim for the extended resource")).await.unwrap();
    let results = claim.status.unwrap().allocation.unwrap().devices.unwrap().results.unwrap();
    assert_eq!(results[0].device, "gpu-0-mig-7g80gb-0-0");
}
