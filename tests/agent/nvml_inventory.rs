//! The inventory joins NVML (simulated) with the kubelet's PodResources (a real gRPC server on
//! a unix socket): which pod holds which MIG device, which instances run processes, and where
//! NVML disagrees with the catalog.

use std::sync::{Arc, Mutex};

use geometer_agent::catalog_check::{self, nvml_model};
use geometer_agent::nvml::sim::{Fault, SimError, SimGpuOptions, SimNvml};
use geometer_agent::nvml::{NvmlBackend, NvmlCall, NvmlProfileId, Placement, Reason};
use geometer_agent::pod_resources::proto::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use geometer_agent::pod_resources::proto::*;
use geometer_agent::pod_resources::{DeviceAssignment, PodResourcesClient, PodResourcesError};
use geometer_agent::{check_catalog, read_inventory};
use geometer_solver::catalog::Catalog;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// A kubelet that answers List with whatever the test put in.
#[derive(Clone, Default)]
struct FakeKubelet {
    pods: Arc<Mutex<Vec<PodResources>>>,
}

#[tonic::async_trait]
impl PodResourcesLister for FakeKubelet {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(ListPodResourcesResponse { pod_resources: self.pods.lock().unwrap().clone() }))
    }
    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("not needed by Geometer"))
    }
    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("not needed by Geometer"))
    }
}

/// Serves the fake kubelet on `kubelet.sock` in a fresh temp dir.
async fn serve(kubelet: FakeKubelet) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(kubelet))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await
            .unwrap();
    });
    (dir, socket)
}

fn pod(namespace: &str, name: &str, resource: &str, ids: &[&str]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: "main".into(),
            devices: vec![
                ContainerDevices {
                    resource_name: resource.into(),
                    device_ids: ids.iter().map(|s| s.to_string()).collect(),
                    topology: None,
                },
                // Other device plugins' resources are not Geometer's business.
                ContainerDevices {
                    resource_name: "example.com/fpga".into(),
                    device_ids: vec!["fpga0".into()],
                    topology: None,
                },
            ],
            ..Default::default()
        }],
    }
}

#[tokio::test]
async fn client_lists_nvidia_devices_per_pod_over_the_socket() {
    let kubelet = FakeKubelet::default();
    kubelet.pods.lock().unwrap().push(pod(
        "ml",
        "infer-a",
        "nvidia.com/mig-1g.10gb",
        &["MIG-aaa", "MIG-bbb"],
    ));
    let (_dir, socket) = serve(kubelet.clone()).await;
    let mut client = PodResourcesClient::connect(&socket).await.unwrap();
    let got = client.nvidia_assignments().await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].pod_ref(), "ml/infer-a");
    assert_eq!(got[0].mig_profile(), Some("1g.10gb"));
    assert_eq!((got[0].device_id.as_str(), got[1].device_id.as_str()), ("MIG-aaa", "MIG-bbb"));
    kubelet.pods.lock().unwrap().clear();
    assert!(client.nvidia_assignments().await.unwrap().is_empty(), "each call asks the kubelet again");
}

#[tokio::test]
async fn a_missing_socket_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("kubelet.sock");
    let err = PodResourcesClient::connect(&missing).await.unwrap_err();
    assert!(matches!(err, PodResourcesError::Connect { .. }));
    let text = err.to_string();
    assert!(text.contains(&missing.display().to_string()) && text.contains("pod-resources"), "{text}");
}

#[tokio::test]
async fn inventory_names_the_pod_on_each_mig_device() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    sim.add_gpu("H100-80GB").unwrap();
    let gpu0 = sim.set_geometry(0, &[("3g.40gb", 4), ("1g.10gb", 0), ("1g.10gb", 1)]).unwrap();
    let gpu1 = sim.set_geometry(1, &[("7g.80gb", 0)]).unwrap();
    let gpu0_uuid = sim.devices().unwrap()[0].uuid.clone();
    let (big, small_a, small_b) = (&gpu0[0], &gpu0[1], &gpu0[2]);
    // A process outside Kubernetes also makes an instance busy.
    sim.start_process(0, &small_b.uuid).unwrap();

    let kubelet = FakeKubelet::default();
    {
        let mut pods = kubelet.pods.lock().unwrap();
        pods.push(pod("ml", "big", "nvidia.com/mig-3g.40gb", &[&big.uuid]));
        // The device plugin's legacy id form for MIG devices.
        let legacy = format!("MIG-{}/{}/{}", gpu0_uuid, small_a.gpu_instance_id, small_a.compute_instance_id);
        pods.push(pod("ml", "small", "nvidia.com/mig-1g.10gb", &[&legacy]));
        // The `index` id strategy: <gpu index>:<MIG device index>.
        pods.push(pod("ml", "whole", "nvidia.com/mig-7g.80gb", &[&format!("1:{}", gpu1[0].index)]));
        pods.push(pod(
            "ml",
            "ghost",
            "nvidia.com/mig-1g.10gb",
            &["MIG-00000000-0000-0000-0000-000000000000"],
        ));
    }
    let (_dir, socket) = serve(kubelet).await;
    let assignments = PodResourcesClient::connect(&socket).await.unwrap().nvidia_assignments().await.unwrap();

    let inventory = read_inventory(&sim, Catalog::builtin(), &assignments).unwrap();
    assert_eq!(inventory.gpus.len(), 2);
    let g0 = &inventory.gpus[0];
    assert_eq!((g0.model.as_str(), g0.pci_device_id.as_str()), ("H100-80GB", "0x233010DE"));
    let summary: Vec<(String, u8, Option<String>, u32)> =
        g0.instances.iter().map(|i| (i.profile.clone(), i.start, i.pod.clone(), i.processes)).collect();
    assert_eq!(
        summary,
        [
            ("1g.10gb".to_string(), 0, Some("ml/small".to_string()), 0),
            ("1g.10gb".to_string(), 1, None, 1),
            ("3g.40gb".to_string(), 4, Some("ml/big".to_string()), 0),
        ]
    );
    assert!(
        g0.instances.iter().all(|i| i.in_use()) && g0.instances[2].uuid.as_deref() == Some(big.uuid.as_str())
    );
    assert_eq!(inventory.gpus[1].instances[0].pod.as_deref(), Some("ml/whole"));
    let unmatched: Vec<&DeviceAssignment> = inventory.unmatched.iter().collect();
    assert_eq!(unmatched.len(), 1);
    assert_eq!(unmatched[0].pod, "ghost");
    assert!(inventory.in_use());
}

#[test]
fn replicas_of_a_shared_device_are_matched_and_every_pod_on_it_is_listed() {
    // Time-slicing and MPS: the device plugin advertises `<id>::<n>` per replica.
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    let device = sim.set_geometry(0, &[("7g.80gb", 0)]).unwrap().remove(0);
    let replica = |pod: &str, n: u32| DeviceAssignment {
        namespace: "ml".into(),
        pod: pod.into(),
        container: "main".into(),
        resource: "nvidia.com/mig-7g.80gb".into(),
        device_id: format!("{}::{n}", device.uuid),
        claim: None,
    };
    let assignments = [replica("a", 0), replica("b", 3), replica("b", 4)];
    let inventory = read_inventory(&sim, Catalog::builtin(), &assignments).unwrap();
    let instance = &inventory.gpus[0].instances[0];
    assert_eq!(instance.pod.as_deref(), Some("ml/a"));
    assert_eq!(instance.shared_with, ["ml/b"]);
    assert!(inventory.unmatched.is_empty(), "{:?}", inventory.unmatched);
    assert!(instance.in_use());
}

#[test]
fn every_pod_time_sharing_a_whole_gpu_is_listed() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu_with("H100-80GB", SimGpuOptions::MIG_OFF).unwrap();
    let uuid = sim.devices().unwrap()[0].uuid.clone();
    let replica = |pod: &str, n: u32| DeviceAssignment {
        namespace: "ml".into(),
        pod: pod.into(),
        container: "main".into(),
        resource: "nvidia.com/gpu".into(),
        device_id: format!("{uuid}::{n}"),
        claim: None,
    };
    let assignments = [replica("a", 0), replica("b", 1), replica("c", 2)];
    let inventory = read_inventory(&sim, Catalog::builtin(), &assignments).unwrap();
    let gpu = &inventory.gpus[0];
    assert_eq!(gpu.pod.as_deref(), Some("ml/a"));
    assert_eq!(gpu.shared_with, ["ml/b", "ml/c"]);
    assert!(inventory.unmatched.is_empty() && inventory.in_use());
}

#[test]
fn the_inventory_says_what_the_device_plugin_will_advertise_each_profile_as() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    let inventory = read_inventory(&sim, Catalog::builtin(), &[]).unwrap();
    let advertised = &inventory.gpus[0].advertised_as;
    assert_eq!(advertised["1g.10gb"], "nvidia.com/mig-1g.10gb");
    assert_eq!(advertised["7g.80gb"], "nvidia.com/mig-7g.80gb");
    assert_eq!(advertised["1g.10gb+me"], "nvidia.com/mig-1g.10gb+me");

    // A driver reporting other memory for a profile: the device plugin names it from that
    // memory (go-nvlib MigProfile.String()), not from the catalog's profile name.
    sim.override_profile(0, "1g.10gb", |r| r.info.memory_mib = 19968).unwrap();
    let inventory = read_inventory(&sim, Catalog::builtin(), &[]).unwrap();
    assert_eq!(inventory.gpus[0].advertised_as["1g.10gb"], "nvidia.com/mig-1g.20gb");
}

#[test]
fn a_gpu_instance_of_a_profile_nvml_does_not_list_is_an_inventory_error_not_a_free_slice() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    sim.set_geometry(0, &[("1g.10gb", 0), ("3g.40gb", 4)]).unwrap();
    sim.hide_profile(0, "1g.10gb").unwrap();
    let err = read_inventory(&sim, Catalog::builtin(), &[]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("GPU 0") && text.contains("profile id 19"), "{text}");
    assert!(text.contains("not among the profiles NVML lists"), "{text}");
}

#[test]
fn a_planned_profile_name_resolves_to_the_driver_profile_id() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    let model = Catalog::builtin().find("H100-80GB").unwrap();
    let profiles = sim.gpu_instance_profiles(0).unwrap();
    let info = catalog_check::nvml_profile_for(model, &profiles, "3g.40gb").unwrap();
    assert_eq!(info.id, NvmlProfileId(9));
    sim.create_gpu_instance(0, info.id, Placement { start: 4, size: 4 }).unwrap();
    assert!(catalog_check::nvml_profile_for(model, &profiles, "5g.50gb").is_none());
}

#[test]
fn half_built_instances_show_without_a_uuid() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("A100-40GB").unwrap();
    let profiles = sim.gpu_instance_profiles(0).unwrap();
    let p = profiles.iter().find(|p| p.name.as_deref() == Some("3g.20gb")).unwrap();
    sim.create_gpu_instance(0, p.id, Placement { start: 4, size: 4 }).unwrap();
    let inventory = read_inventory(&sim, Catalog::builtin(), &[]).unwrap();
    let i = &inventory.gpus[0].instances[0];
    assert_eq!((i.profile.as_str(), i.start, i.size), ("3g.20gb", 4, 4));
    assert_eq!((i.compute_instance_id, i.uuid.as_deref()), (None, None));
    assert!(!i.in_use());
}

#[test]
fn catalog_agrees_with_a_simulated_gpu_until_nvml_says_otherwise() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    assert_eq!(check_catalog(&sim, Catalog::builtin()).unwrap(), []);

    sim.override_profile(0, "3g.40gb", |r| {
        r.placements = vec![Placement { start: 4, size: 4 }];
        r.info.memory_mib = 40000;
    })
    .unwrap();
    sim.hide_profile(0, "1g.20gb").unwrap();
    let found = check_catalog(&sim, Catalog::builtin()).unwrap();
    let fields: Vec<(Option<&str>, &str, &str, &str)> = found
        .iter()
        .map(|d| (d.profile.as_deref(), d.field.as_str(), d.catalog.as_str(), d.nvml.as_str()))
        .collect();
    assert!(fields.contains(&(Some("3g.40gb"), "placements", "0,4 (size 4)", "4 (size 4)")), "{fields:?}");
    assert!(fields.contains(&(Some("3g.40gb"), "memoryMib", "40448", "40000")), "{fields:?}");
    assert!(
        fields.iter().any(|f| f.0 == Some("1g.20gb") && f.1 == "offered" && f.3 == "not offered"),
        "{fields:?}"
    );
    assert_eq!(found.len(), 3, "{fields:?}");

    // NVML wins: the corrected model allows only what NVML allows.
    let model = Catalog::builtin().find("H100-80GB").unwrap();
    let corrected = nvml_model(model, &catalog_check::read_profiles(&sim, 0).unwrap());
    let p3 = corrected.profile("3g.40gb").unwrap();
    assert_eq!(corrected.profiles[p3].starts, [4]);
    assert_eq!(corrected.profiles[p3].memory_mib, 40000);
    assert!(corrected.profiles[corrected.profile("1g.20gb").unwrap()].starts.is_empty());
    // And the simulated driver enforces it.
    let refused = sim.set_geometry(0, &[("3g.40gb", 0)]).unwrap_err();
    assert!(
        matches!(&refused, SimError::Nvml(e) if e.reason() == Some(&Reason::InvalidArgument)),
        "start 0 is no placement NVML lists: {refused}"
    );
    assert!(sim.set_geometry(0, &[("3g.40gb", 4)]).is_ok());
}

#[test]
fn a_profile_whose_placements_nvml_will_not_give_is_skipped_and_reported_not_fatal() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    // The second profile's placements fail; every other profile still reads.
    sim.inject(Fault::on(NvmlCall::PossiblePlacements).nth(2).reason(Reason::InvalidArgument));
    let reported = catalog_check::read_profiles(&sim, 0).unwrap();
    let broken: Vec<_> = reported.iter().filter(|p| p.placements_error.is_some()).collect();
    assert_eq!(broken.len(), 1);
    assert!(reported.iter().filter(|p| p.placements_error.is_none()).all(|p| !p.placements.is_empty()));
    let name = broken[0].info.name.clone().unwrap();

    let model = Catalog::builtin().find("H100-80GB").unwrap();
    let disagreements = catalog_check::compare(model, 0, &reported);
    assert!(
        disagreements.iter().any(|d| d.profile.as_deref() == Some(name.as_str())
            && d.field == "placements"
            && d.nvml.starts_with("unreadable: ")),
        "{disagreements:?}"
    );
    let corrected = nvml_model(model, &reported);
    assert!(corrected.profiles[corrected.profile(&name).unwrap()].starts.is_empty(), "not used on this GPU");
}

/// A 3g.40gb GPU instance at 0 split into two one-slice compute instances.
fn split_gpu_instance(sim: &SimNvml) -> (u32, Vec<geometer_agent::nvml::MigDeviceInfo>) {
    let device = sim.set_geometry(0, &[("3g.40gb", 0), ("3g.40gb", 4)]).unwrap().remove(0);
    sim.destroy_compute_instance(0, device.gpu_instance_id, device.compute_instance_id).unwrap();
    let parts = (0..2).map(|_| sim.add_small_compute_instance(0, device.gpu_instance_id).unwrap()).collect();
    (device.gpu_instance_id, parts)
}

#[test]
fn a_gpu_instance_of_several_compute_instances_counts_all_of_them_and_needs_rebuilding() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    let (gi, parts) = split_gpu_instance(&sim);
    sim.start_process(0, &parts[1].uuid).unwrap();
    let on_second = DeviceAssignment {
        namespace: "ml".into(),
        pod: "second".into(),
        container: "main".into(),
        resource: "nvidia.com/mig-1c.3g.40gb".into(),
        device_id: parts[1].uuid.clone(),
        claim: None,
    };
    let inventory = read_inventory(&sim, Catalog::builtin(), &[on_second]).unwrap();
    let split = inventory.gpus[0].instances.iter().find(|i| i.gpu_instance_id == gi).unwrap();
    assert_eq!(split.pod.as_deref(), Some("ml/second"), "the pod on the second compute instance is seen");
    assert_eq!(split.processes, 1);
    assert!(inventory.unmatched.is_empty());
    assert!(
        split.rebuild.as_deref().is_some_and(|r| r.contains("2 compute instances")),
        "{:?}",
        split.rebuild
    );
    let whole = inventory.gpus[0].instances.iter().find(|i| i.gpu_instance_id != gi).unwrap();
    assert_eq!(whole.rebuild, None);
}

/// The MigNode shows where a new instance could still go: the placement units no instance
/// covers. After churn an H100 with 1g.10gb at 0, 1 and 5 has five free units in two runs, and
/// no 3g.40gb placement (0-3 or 4-7) among them.
#[test]
fn the_inventory_lists_each_gpus_free_placement_runs() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    sim.set_geometry(0, &[("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 5)]).unwrap();
    let inventory = read_inventory(&sim, Catalog::builtin(), &[]).unwrap();
    let runs: Vec<(u8, u8)> = inventory.gpus[0].free_placements.iter().map(|r| (r.start, r.size)).collect();
    assert_eq!(runs, [(2, 3), (6, 2)]);
    sim.add_gpu_with("H100-80GB", SimGpuOptions::MIG_OFF).unwrap();
    let inventory = read_inventory(&sim, Catalog::builtin(), &[]).unwrap();
    assert!(inventory.gpus[1].free_placements.is_empty(), "MIG off: no placements at all");
}
