//! A Pod as Geometer reads it: only the fields planning, rollout, gangs and right-sizing read,
//! decoded straight from the API server's (or a List's) JSON. Fields keep their Kubernetes
//! names and types, so code reads a `PodView` as it would read a `k8s_openapi` `Pod`.
//!
//! Why not the `k8s_openapi` `Pod`: its structs hold every optional field inline (a `Pod` is
//! 2,176 bytes and each `Container` 2,120, whatever they hold), so at 150,000 cached pods the
//! empty fields alone were more than half a gigabyte. Unknown fields are skipped as they are
//! read. A field a new reader needs is added here; the tests name what is kept.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeAffinity, Pod, PodCondition, PodExtendedResourceClaimStatus, PodResourceClaim,
    PodResourceClaimStatus, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::{NamespaceResourceScope, Resource as _};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodViewSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodViewStatus>,
}

impl geometer_api::decode::Stored for PodView {}

/// The requests, the node constraints, priority, scheduler and the binding.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodViewSpec {
    pub containers: Vec<ContainerView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<ContainerView>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<AffinityView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// DRA ResourceClaims the pod asks for: each by name, or made for it from a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<PodResourceClaim>>,
}

/// Node affinity only: pod (anti-)affinity does not decide which GPU a pod can use.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AffinityView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
}

/// A container's name and resources, and the `restartPolicy` that makes an init container a
/// sidecar whose requests add up with the main containers'.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// How long the container takes to be ready, as far as its probe says: what moving its pod
    /// costs on a DynamicMIG node ([`crate::dra::compaction`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<ProbeView>,
}

/// A readiness probe's delay before its first check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay_seconds: Option<i32>,
}

impl ContainerView {
    /// The readiness probe's initial delay, if the container has one.
    pub fn readiness_delay_seconds(&self) -> Option<i32> {
        self.readiness_probe.as_ref()?.initial_delay_seconds
    }
}

/// The phase, conditions (the scheduler's `PodScheduled`), nomination and start time (a
/// do-not-disrupt duration runs from it, `geometer_api::do_not_disrupt`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodViewStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// The ResourceClaims made for the pod from its templates, by its claim entries' names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
    /// The claim kube-scheduler made for the pod's DRA extended resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_resource_claim_status: Option<PodExtendedResourceClaimStatus>,
}

/// A PodView is a Pod to the API: watched, listed and referred to (events) as one.
impl kube::Resource for PodView {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        Pod::KIND.into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        Pod::GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        Pod::VERSION.into()
    }
    fn api_version(_: &()) -> std::borrow::Cow<'_, str> {
        Pod::API_VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        Pod::URL_PATH_SEGMENT.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<&Pod> for PodView {
    /// What Geometer reads of a whole Pod (one an admission review or a test built).
    fn from(pod: &Pod) -> PodView {
        let container = |c: &k8s_openapi::api::core::v1::Container| ContainerView {
            name: c.name.clone(),
            resources: c.resources.clone(),
            restart_policy: c.restart_policy.clone(),
            readiness_probe: c
                .readiness_probe
                .as_ref()
                .map(|p| ProbeView { initial_delay_seconds: p.initial_delay_seconds }),
        };
        PodView {
            metadata: pod.metadata.clone(),
            spec: pod.spec.as_ref().map(|s| PodViewSpec {
                containers: s.containers.iter().map(container).collect(),
                init_containers: s.init_containers.as_ref().map(|cs| cs.iter().map(container).collect()),
                overhead: s.overhead.clone(),
                node_name: s.node_name.clone(),
                node_selector: s.node_selector.clone(),
                affinity: s
                    .affinity
                    .as_ref()
                    .map(|a| AffinityView { node_affinity: a.node_affinity.clone() }),
                tolerations: s.tolerations.clone(),
                priority: s.priority,
                priority_class_name: s.priority_class_name.clone(),
                scheduler_name: s.scheduler_name.clone(),
                resource_claims: s.resource_claims.clone(),
            }),
            status: pod.status.as_ref().map(|s| PodViewStatus {
                phase: s.phase.clone(),
                conditions: s.conditions.clone(),
                nominated_node_name: s.nominated_node_name.clone(),
                start_time: s.start_time.clone(),
                resource_claim_statuses: s.resource_claim_statuses.clone(),
                extended_resource_claim_status: s.extended_resource_claim_status.clone(),
            }),
        }
    }
}
