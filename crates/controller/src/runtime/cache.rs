//! Watches and caches (kube-runtime reflectors) of everything the controller reads: pods,
//! nodes, MigNodes, MigPolicies and MigPlans, and the PodGroups of the gang schedulers whose
//! CRDs the cluster serves at start. Every change wakes the controller loop; the loop
//! then reads whole, consistent-enough copies of the caches. Writes go to the API server and
//! come back through the watches. Objects are cached as [`Decoded`]: one that does not decode
//! is kept as its name and error instead of failing the whole list.

use crate::adapter::PodView;
use crate::dra::stack::DraMode;
use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use geometer_api::{MigNode, MigPlan, MigPolicy};

use geometer_api::decoded::{Decoded, Unreadable};

use crate::adapter::gangs::PodGroupMin;

use crate::adapter::projection::{self, Projection};

/// Read handles of the caches.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Decoded<PodView>>,
    pub nodes: Store<Decoded<Node>>,
    pub mignodes: Store<Decoded<MigNode>>,
    pub policies: Store<Decoded<MigPolicy>>,
    pub plans: Store<Decoded<MigPlan>>,
    /// PodGroups (scheduler-plugins, Volcano), one store per kind the cluster serves.
    pub pod_groups: Vec<(ApiResource, Store<DynamicObject>)>,
    /// ResourceSlices, where the cluster serves `resource.k8s.io/v1` (Kubernetes 1.34 and
    /// later): which nodes NVIDIA's DRA driver advertises.
    pub resource_slices: Option<Store<DynamicObject>>,
}

/// A cache's objects: those read, and those that could not be.
pub(crate) struct Split<K> {
    pub(crate) read: Vec<Arc<K>>,
    pub(crate) unreadable: Vec<Arc<Unreadable>>,
}

/// Splits a cache into its readable and unreadable objects.
pub(crate) fn split<K>(store: &Store<Decoded<K>>) -> Split<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut out = Split { read: Vec::new(), unreadable: Vec::new() };
    for object in store.state() {
        match &*object {
            Decoded::Read(k) => out.read.push(k.clone()),
            Decoded::Unreadable(u) => out.unreadable.push(u.clone()),
        }
    }
    out
}

/// The running watches; dropping it stops them.
pub struct Watches {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Caches {
    /// Starts one watch per kind, and one per PodGroup kind in `pod_groups` (see
    /// [`pod_group_kinds`]); each change notifies `changed`.
    pub fn start(client: &Client, changed: Arc<Notify>, optional: &OptionalKinds) -> (Caches, Watches) {
        let mut tasks = Vec::new();
        let pods = spawn_reflector(client, changed.clone(), &mut tasks);
        let nodes = spawn_reflector(client, changed.clone(), &mut tasks);
        let mignodes = spawn_reflector(client, changed.clone(), &mut tasks);
        let policies = spawn_reflector(client, changed.clone(), &mut tasks);
        let plans = spawn_reflector(client, changed.clone(), &mut tasks);
        let pod_groups = optional
            .pod_groups
            .iter()
            .map(|ar| (ar.clone(), spawn_dynamic_reflector(client, ar, changed.clone(), &mut tasks)))
            .collect();
        let resource_slices = optional
            .resource_slices
            .as_ref()
            .map(|ar| spawn_dynamic_reflector(client, ar, changed.clone(), &mut tasks));
        (Caches { pods, nodes, mignodes, policies, plans, pod_groups, resource_slices }, Watches { tasks })
    }

    /// Waits until every cache holds a full list.
    pub async fn ready(&self) {
        // A writer is only dropped when its task ends, which `Watches` does on drop; then the
        // controller is shutting down anyway, so an error here needs no handling.
        let _ = self.pods.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        let _ = self.mignodes.wait_until_ready().await;
        let _ = self.policies.wait_until_ready().await;
        let _ = self.plans.wait_until_ready().await;
        for (_, store) in &self.pod_groups {
            let _ = store.wait_until_ready().await;
        }
        if let Some(store) = &self.resource_slices {
            let _ = store.wait_until_ready().await;
        }
    }

    /// The nodes NVIDIA's DRA driver advertises, and how, from the cached ResourceSlices.
    pub(crate) fn dra_nodes(&self) -> BTreeMap<String, DraMode> {
        let slices: Vec<Arc<DynamicObject>> = self.resource_slices.iter().flat_map(|s| s.state()).collect();
        dra_nodes(slices.iter().map(|s| &s.data))
    }
}

/// The kinds the controller watches only where the cluster serves them.
#[derive(Debug, Clone, Default)]
pub struct OptionalKinds {
    pub pod_groups: Vec<ApiResource>,
    pub resource_slices: Option<ApiResource>,
}

impl OptionalKinds {
    /// Asks the cluster which it serves (discovery). A kind installed later is seen when the
    /// controller restarts.
    pub async fn discover(client: &Client) -> OptionalKinds {
        OptionalKinds {
            pod_groups: pod_group_kinds(client).await,
            resource_slices: resource_slice_kind(client).await,
        }
    }
}

/// `resource.k8s.io/v1` ResourceSlices, where served.
async fn resource_slice_kind(client: &Client) -> Option<ApiResource> {
    match kube::discovery::group(client, "resource.k8s.io").await {
        Ok(served) => served
            .versioned_resources("v1")
            .into_iter()
            .find(|(ar, _)| ar.kind == "ResourceSlice")
            .map(|(ar, _)| ar),
        Err(e) => {
            tracing::debug!(error = %e, "resource.k8s.io is not served: no DRA nodes to leave alone");
            None
        }
    }
}

/// Nodes by how NVIDIA's DRA driver advertises them, from ResourceSlices.
/// A slice's `data` (what a DynamicObject holds besides its type and metadata) carries its
/// `spec`, which is all [`crate::dra::stack::record`] reads: nothing is serialized again.
fn dra_nodes<'s>(slices: impl Iterator<Item = &'s serde_json::Value>) -> BTreeMap<String, DraMode> {
    let mut out = BTreeMap::new();
    for slice in slices {
        crate::dra::stack::record(&mut out, slice);
    }
    out
}

/// Every ResourceSlice the cluster serves, read once (`geometer plan` against a live cluster),
/// as the nodes the DRA driver advertises; none where `resource.k8s.io/v1` is not served.
pub async fn list_dra_nodes(client: &Client) -> Result<BTreeMap<String, DraMode>, kube::Error> {
    let Some(ar) = resource_slice_kind(client).await else { return Ok(BTreeMap::new()) };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let slices = api.list(&Default::default()).await?;
    Ok(dra_nodes(slices.items.iter().map(|s| &s.data)))
}

/// The PodGroup kinds of the gang schedulers the cluster serves (scheduler-plugins'
/// `scheduling.x-k8s.io`, Volcano's `scheduling.volcano.sh`), each at its preferred version. A
/// scheduler installed later is seen when the controller restarts.
pub async fn pod_group_kinds(client: &Client) -> Vec<ApiResource> {
    use crate::adapter::gangs::{COSCHEDULING_GROUP, VOLCANO_GROUP};
    let mut kinds = Vec::new();
    for group in [COSCHEDULING_GROUP, VOLCANO_GROUP] {
        match kube::discovery::group(client, group).await {
            Ok(served) => kinds.extend(served.recommended_kind("PodGroup").map(|(ar, _)| ar)),
            Err(e) => tracing::debug!(group, error = %e, "no PodGroups of this group served"),
        }
    }
    if !kinds.is_empty() {
        tracing::info!(kinds = ?kinds.iter().map(|k| k.api_version.clone()).collect::<Vec<_>>(), "watching PodGroups for gangs");
    }
    kinds
}

/// Every PodGroup the cluster serves, read once (`geometer plan` against a live cluster), and
/// the ones that cannot be read, each naming its field and value.
pub async fn list_pod_groups(client: &Client) -> Result<(Vec<PodGroupMin>, Vec<String>), kube::Error> {
    let (mut groups, mut bad) = (Vec::new(), Vec::new());
    for ar in pod_group_kinds(client).await {
        let list = Api::<DynamicObject>::all_with(client.clone(), &ar).list(&Default::default()).await?;
        for object in list.items {
            match pod_group_of(&object, &ar) {
                Ok(Some(group)) => groups.push(group),
                Ok(None) => {}
                Err(e) => bad.push(e.to_string()),
            }
        }
    }
    Ok((groups, bad))
}

/// A cached or listed PodGroup read as the adapter reads one from a List.
pub(crate) fn pod_group_of(
    object: &DynamicObject,
    ar: &ApiResource,
) -> Result<Option<PodGroupMin>, crate::adapter::AdapterError> {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = ar.api_version.clone().into();
    value["kind"] = ar.kind.clone().into();
    crate::adapter::gangs::pod_group(&value)
}

fn spawn_dynamic_reflector(
    client: &Client,
    ar: &ApiResource,
    changed: Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let reader = writer.as_reader();
    let stream = watcher(Api::<DynamicObject>::all_with(client.clone(), ar), watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    tasks.push(follow(stream, ar.api_version.clone(), changed));
    reader
}

fn spawn_reflector<K>(
    client: &Client,
    changed: Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<Decoded<K>>
where
    K: Resource<DynamicType = ()>
        + Projection
        + Clone
        + std::fmt::Debug
        + geometer_api::decode::Stored
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    // Managed fields are dropped as each object is decoded (`Decoded`), and whatever else the
    // controller never reads before it is stored (`projection`).
    let stream = watcher(Api::<Decoded<K>>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(projection::project)
        .reflect(writer);
    tasks.push(follow(stream, K::kind(&()).to_string(), changed));
    reader
}

/// Drives a reflector's watch: each event notifies `changed`; an error is logged and the watch
/// retries with its backoff.
fn follow<T>(
    stream: impl futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    kind: String,
    changed: Arc<Notify>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::warn!(kind = %kind, error = %e, "watch failed; retrying with backoff"),
            }
        }
    })
}
