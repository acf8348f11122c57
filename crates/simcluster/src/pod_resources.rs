//! The kubelet's PodResources API (gRPC v1 on a unix socket) of one simulated node, answered
//! from the devices the simulated kubelet assigned: what a node agent in another process reads,
//! as it reads `/var/lib/kubelet/pod-resources/kubelet.sock` on a real node. Only List, the one
//! call Geometer makes (kubernetes/kubernetes `pkg/kubelet/apis/podresources/server_v1.go`).

use std::collections::BTreeMap;
use std::path::Path;

use geometer_agent::pod_resources::proto::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use geometer_agent::pod_resources::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, CdiDevice, ClaimResource, ContainerDevices,
    ContainerResources, DynamicResource, GetPodResourcesRequest, GetPodResourcesResponse,
    ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
};
use geometer_agent::SharedAssignments;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::dra::DRA_DRIVER;

/// The node's name (its DRA pool's name) and its assignments.
struct Lister(String, SharedAssignments);

/// One container's devices: the device plugin's ids by resource name, and the DRA devices by
/// claim.
#[derive(Default)]
struct ContainerAssigned {
    devices: BTreeMap<String, Vec<String>>,
    claims: BTreeMap<String, Vec<String>>,
}

/// The assignments grouped as the kubelet answers: pod, container, then the device plugin's
/// resources (`devices`) and the DRA driver's claims (`dynamic_resources`, each device named
/// by driver, pool and name; the pool is the node, as NVIDIA's driver names it).
fn pod_resources(node: &str, assignments: &SharedAssignments) -> Vec<PodResources> {
    let mut pods: BTreeMap<(String, String), BTreeMap<String, ContainerAssigned>> = BTreeMap::new();
    for a in assignments.get() {
        let container = pods.entry((a.namespace, a.pod)).or_default().entry(a.container).or_default();
        match a.claim {
            Some(claim) => container.claims.entry(claim).or_default().push(a.device_id),
            None => container.devices.entry(a.resource).or_default().push(a.device_id),
        }
    }
    let claim_resources = |devices: Vec<String>| {
        devices
            .into_iter()
            .map(|device_name| ClaimResource {
                cdi_devices: vec![CdiDevice { name: format!("k8s.{DRA_DRIVER}/device={device_name}") }],
                driver_name: DRA_DRIVER.to_string(),
                pool_name: node.to_string(),
                device_name,
            })
            .collect()
    };
    let container = |(name, assigned): (String, ContainerAssigned)| ContainerResources {
        name,
        devices: assigned
            .devices
            .into_iter()
            .map(|(resource_name, device_ids)| ContainerDevices { resource_name, device_ids, topology: None })
            .collect(),
        dynamic_resources: assigned
            .claims
            .into_iter()
            .map(|(claim, devices)| {
                let (claim_namespace, claim_name) = claim.split_once('/').unwrap_or(("", &claim));
                DynamicResource {
                    claim_name: claim_name.to_string(),
                    claim_namespace: claim_namespace.to_string(),
                    claim_resources: claim_resources(devices),
                }
            })
            .collect(),
        ..Default::default()
    };
    pods.into_iter()
        .map(|((namespace, name), containers)| PodResources {
            name,
            namespace,
            containers: containers.into_iter().map(container).collect(),
        })
        .collect()
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(ListPodResourcesResponse { pod_resources: pod_resources(&self.0, &self.1) }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("the simulated kubelet answers List only"))
    }

    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("the simulated kubelet answers List only"))
    }
}

/// Serves the assignments of `node` on `socket` until the handle is aborted.
pub(crate) fn serve(
    socket: &Path,
    node: &str,
    assignments: SharedAssignments,
) -> std::io::Result<JoinHandle<()>> {
    if socket.exists() {
        std::fs::remove_file(socket)?;
    }
    let listener = tokio::net::UnixListener::bind(socket)?;
    let shown = socket.display().to_string();
    let node = node.to_string();
    Ok(tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(Lister(node, assignments)))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = served {
            tracing::warn!(socket = %shown, error = %e, "simulated PodResources server stopped");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use geometer_agent::pod_resources::{nvidia_assignments, with_dra_uuids, DeviceAssignment};

    fn assigned(pod: &str, resource: &str, device_id: &str, claim: Option<&str>) -> DeviceAssignment {
        DeviceAssignment {
            namespace: "team".into(),
            pod: pod.into(),
            container: "main".into(),
            resource: resource.into(),
            device_id: device_id.into(),
            claim: claim.map(str::to_string),
        }
    }

    /// A device plugin's device is reported under `devices`, a DRA device under the pod's
    /// claim in `dynamic_resources` by driver, pool and name; the agent reads both back as
    /// they were assigned, and finds the DRA device's UUID by its published name.
    #[test]
    fn the_agent_reads_back_both_kinds_of_device_the_kubelet_reports() {
        let plugin = assigned("a", "nvidia.com/mig-1g.10gb", "MIG-aaaa", None);
        let dra = assigned("b", DRA_DRIVER, "gpu-0-mig-1g10gb-19-0", Some("team/b-gpu"));
        let shared = SharedAssignments::default();
        shared.update(|list| list.extend([plugin.clone(), dra.clone()]));
        let reported = pod_resources("node-1", &shared);
        let b = reported.iter().find(|p| p.name == "b").unwrap();
        assert!(b.containers[0].devices.is_empty());
        let claim = &b.containers[0].dynamic_resources[0];
        assert_eq!((claim.claim_namespace.as_str(), claim.claim_name.as_str()), ("team", "b-gpu"));
        let device = &claim.claim_resources[0];
        assert_eq!(
            (device.driver_name.as_str(), device.pool_name.as_str(), device.device_name.as_str()),
            (DRA_DRIVER, "node-1", "gpu-0-mig-1g10gb-19-0")
        );
        let read = nvidia_assignments(&reported);
        assert_eq!(read, vec![plugin.clone(), dra.clone()]);
        let uuids = [("gpu-0-mig-1g10gb-19-0".to_string(), "MIG-bbbb".to_string())].into();
        let joined = with_dra_uuids(read, &uuids);
        assert_eq!(joined[1].device_id, "MIG-bbbb");
        assert_eq!(joined[0], plugin, "a device plugin's id is left as it is");
    }
}
