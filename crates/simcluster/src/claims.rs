//! The kubelet's part of DRA, simulated: which devices a pod bound to a DRA node was given.
//!
//! The scheduler allocates a pod's ResourceClaims and reserves them for it before it binds the
//! pod; the kubelet then prepares the allocated devices, and refuses a claim that is not
//! allocated or not reserved for the pod (kubernetes/kubernetes `pkg/kubelet/cm/dra/manager.go`,
//! `prepareResources`). A pod's claims are the ones its `spec.resourceClaims` name directly,
//! the ones kube-controller-manager made from its templates (named in
//! `status.resourceClaimStatuses`), and the one the scheduler made for DRA-backed extended
//! resources (`status.extendedResourceClaimStatus`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::{Api, ResourceExt};

use crate::dra::DRA_DRIVER;
use crate::node::ClaimedDevice;

/// The names of the pod's ResourceClaims; `Err` names a claim kube-controller-manager has not
/// created yet.
pub(crate) fn claim_names(pod: &Pod) -> Result<Vec<String>, String> {
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    let mut names = Vec::new();
    for claim in pod.spec.iter().flat_map(|s| s.resource_claims.iter().flatten()) {
        let made = || statuses?.iter().find(|s| s.name == claim.name)?.resource_claim_name.clone();
        match claim.resource_claim_name.clone().or_else(made) {
            Some(name) => names.push(name),
            None => return Err(format!("claim {} of the pod is not created yet", claim.name)),
        }
    }
    let extended = pod.status.as_ref().and_then(|s| s.extended_resource_claim_status.as_ref());
    names.extend(extended.map(|e| e.resource_claim_name.clone()));
    Ok(names)
}

/// The devices of `gpu.nvidia.com` on `node` the pod's claims were allocated, once each claim
/// is allocated and reserved for the pod; `Err` says which is not yet.
pub(crate) async fn allocated_devices(
    client: &kube::Client,
    node: &str,
    pod: &Pod,
) -> Result<Vec<ClaimedDevice>, String> {
    let namespace = pod.namespace().unwrap_or_default();
    let uid = pod.uid().unwrap_or_default();
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &namespace);
    let mut devices = Vec::new();
    for name in claim_names(pod)? {
        let claim = claims
            .get_opt(&name)
            .await
            .map_err(|e| format!("cannot read ResourceClaim {namespace}/{name}: {e}"))?
            .ok_or_else(|| format!("ResourceClaim {namespace}/{name} does not exist"))?;
        let status = claim.status.unwrap_or_default();
        let reserved = status.reserved_for.iter().flatten().any(|r| r.uid == uid);
        if !reserved {
            return Err(format!(
                "pod is not allowed to use ResourceClaim {namespace}/{name}: not reserved for it"
            ));
        }
        let allocation =
            status.allocation.ok_or_else(|| format!("ResourceClaim {namespace}/{name} is not allocated"))?;
        let results = allocation.devices.and_then(|d| d.results).unwrap_or_default();
        let ours = results.into_iter().filter(|r| r.driver == DRA_DRIVER && r.pool == node);
        devices
            .extend(ours.map(|r| ClaimedDevice { claim: format!("{namespace}/{name}"), device: r.device }));
    }
    Ok(devices)
}

/// The container the devices go to: the first that names a claim in `resources.claims`, or
/// the first container.
pub(crate) fn claiming_container(pod: &Pod) -> String {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    let claiming = containers
        .clone()
        .find(|c| c.resources.as_ref().and_then(|r| r.claims.as_ref()).is_some_and(|c| !c.is_empty()));
    claiming.or_else(|| containers.clone().next()).map(|c| c.name.clone()).unwrap_or_default()
}
