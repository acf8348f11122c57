//! Client of the kubelet PodResources API (gRPC v1 over a unix socket): which pod holds which
//! device. The agent uses it to learn which MIG devices are in use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use geometer_solver::PodKey;

use crate::observe::dra::DRA_DRIVER;

use hyper_util::rt::TokioIo;
use thiserror::Error;
use tonic::transport::{Channel, Endpoint, Uri};

/// Generated from `proto/podresources/v1/api.proto`.
pub mod proto {
    tonic::include_proto!("v1");
}

use proto::pod_resources_lister_client::PodResourcesListerClient;

/// Where the kubelet serves the PodResources API.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Resource name prefix of the NVIDIA device plugin's resources.
pub const NVIDIA_RESOURCE_PREFIX: &str = "nvidia.com/";

/// How long one call may take before the agent gives up on the kubelet for this round.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Error)]
pub enum PodResourcesError {
    #[error("cannot connect to the kubelet PodResources socket {path}: {source}. Mount the host's /var/lib/kubelet/pod-resources into the agent")]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("kubelet PodResources List on {path} failed: {status}")]
    List { path: PathBuf, status: tonic::Status },
}

/// One device the kubelet assigned to a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceAssignment {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// Extended resource name, e.g. `nvidia.com/mig-1g.10gb` or `nvidia.com/gpu`; for a
    /// device NVIDIA's DRA driver prepared, the driver's name ([`DRA_DRIVER`]).
    pub resource: String,
    /// Device id as the device plugin advertised it (for MIG: usually the `MIG-...` UUID); for
    /// a DRA device, its name in the driver's ResourceSlice as the kubelet reports it, until
    /// the agent looks its UUID up there ([`with_dra_uuids`]).
    pub device_id: String,
    /// For a DRA device: the ResourceClaim it was prepared for (`namespace/name`).
    pub claim: Option<String>,
}

/// `assignments` with each DRA device's name replaced by its UUID (`uuids`: device name ->
/// `uuid` attribute in the driver's slices for this node); a name the slices do not list is
/// kept, and matches no device.
pub fn with_dra_uuids(
    mut assignments: Vec<DeviceAssignment>,
    uuids: &std::collections::BTreeMap<String, String>,
) -> Vec<DeviceAssignment> {
    for a in assignments.iter_mut().filter(|a| a.claim.is_some()) {
        if let Some(uuid) = uuids.get(&a.device_id) {
            a.device_id = uuid.clone();
        }
    }
    assignments
}

impl DeviceAssignment {
    /// `namespace/name` of the pod.
    pub fn pod_ref(&self) -> PodKey {
        PodKey::new(&self.namespace, &self.pod)
    }

    /// The device id without a sharing replica: the device plugin advertises each replica of a
    /// time-sliced or MPS-shared device as `<device id>::<n>` (NVIDIA/k8s-device-plugin
    /// `internal/rm/devices.go`, `AnnotatedID`), and PodResources reports those ids.
    pub fn device(&self) -> &str {
        self.device_id.split_once("::").map_or(self.device_id.as_str(), |(id, _)| id)
    }

    /// The MIG profile, for a `nvidia.com/mig-<profile>` resource.
    pub fn mig_profile(&self) -> Option<&str> {
        geometer_api::resources::mig_profile(&self.resource)
    }
}

/// A connected client.
#[derive(Debug, Clone)]
pub struct PodResourcesClient {
    path: PathBuf,
    client: PodResourcesListerClient<Channel>,
}

impl PodResourcesClient {
    /// Connects to the kubelet's socket (see [`DEFAULT_SOCKET`]).
    pub async fn connect(path: impl AsRef<Path>) -> Result<PodResourcesClient, PodResourcesError> {
        let path = path.as_ref().to_path_buf();
        let socket = path.clone();
        // The URI is required by tonic but unused: every connection goes to the socket.
        let channel = Endpoint::from_static("http://kubelet.invalid")
            .timeout(CALL_TIMEOUT)
            .connect_timeout(CALL_TIMEOUT)
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?))
                }
            }))
            .await
            .map_err(|source| PodResourcesError::Connect { path: path.clone(), source })?;
        Ok(PodResourcesClient { path, client: PodResourcesListerClient::new(channel) })
    }

    /// Every pod's resources, as the kubelet reports them.
    pub async fn list(&mut self) -> Result<Vec<proto::PodResources>, PodResourcesError> {
        let response = self
            .client
            .list(proto::ListPodResourcesRequest {})
            .await
            .map_err(|status| PodResourcesError::List { path: self.path.clone(), status })?;
        Ok(response.into_inner().pod_resources)
    }

    /// Every NVIDIA device assigned to a container, one entry per device id.
    pub async fn nvidia_assignments(&mut self) -> Result<Vec<DeviceAssignment>, PodResourcesError> {
        Ok(nvidia_assignments(&self.list().await?))
    }
}

/// Flattens the kubelet's answer into one entry per NVIDIA device, sorted: the device plugin's
/// devices (`devices`) and those NVIDIA's DRA driver prepared for the pod's claims
/// (`dynamic_resources`, kubernetes/kubernetes `pkg/kubelet/apis/podresources/server_v1.go`).
pub fn nvidia_assignments(pods: &[proto::PodResources]) -> Vec<DeviceAssignment> {
    let mut out = Vec::new();
    for pod in pods {
        for container in &pod.containers {
            for claim in &container.dynamic_resources {
                let name = format!("{}/{}", claim.claim_namespace, claim.claim_name);
                for device in claim.claim_resources.iter().filter(|r| r.driver_name == DRA_DRIVER) {
                    out.push(DeviceAssignment {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: container.name.clone(),
                        resource: DRA_DRIVER.to_string(),
                        device_id: device.device_name.clone(),
                        claim: Some(name.clone()),
                    });
                }
            }
            for devices in
                container.devices.iter().filter(|d| d.resource_name.starts_with(NVIDIA_RESOURCE_PREFIX))
            {
                for id in &devices.device_ids {
                    out.push(DeviceAssignment {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: container.name.clone(),
                        resource: devices.resource_name.clone(),
                        device_id: id.clone(),
                        claim: None,
                    });
                }
            }
        }
    }
    out.sort();
    out
}
