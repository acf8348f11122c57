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
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices, ContainerResources,
    GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources,
};
use geometer_agent::SharedAssignments;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

struct Lister(SharedAssignments);

/// Device ids by resource name, for one container.
type ContainerDeviceIds = BTreeMap<String, Vec<String>>;

/// The assignments grouped as the kubelet answers: pod, container, resource, device ids.
fn pod_resources(assignments: &SharedAssignments) -> Vec<PodResources> {
    let mut pods: BTreeMap<(String, String), BTreeMap<String, ContainerDeviceIds>> = BTreeMap::new();
    for a in assignments.get() {
        pods.entry((a.namespace, a.pod))
            .or_default()
            .entry(a.container)
            .or_default()
            .entry(a.resource)
            .or_default()
            .push(a.device_id);
    }
    pods.into_iter()
        .map(|((namespace, name), containers)| PodResources {
            name,
            namespace,
            containers: containers
                .into_iter()
                .map(|(name, devices)| ContainerResources {
                    name,
                    devices: devices
                        .into_iter()
                        .map(|(resource_name, device_ids)| ContainerDevices {
                            resource_name,
                            device_ids,
                            topology: None,
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
        })
        .collect()
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(ListPodResourcesResponse { pod_resources: pod_resources(&self.0) }))
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

/// Serves the node's assignments on `socket` until the handle is aborted.
pub(crate) fn serve(socket: &Path, assignments: SharedAssignments) -> std::io::Result<JoinHandle<()>> {
    if socket.exists() {
        std::fs::remove_file(socket)?;
    }
    let listener = tokio::net::UnixListener::bind(socket)?;
    let shown = socket.display().to_string();
    Ok(tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(Lister(assignments)))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = served {
            tracing::warn!(socket = %shown, error = %e, "simulated PodResources server stopped");
        }
    }))
}
