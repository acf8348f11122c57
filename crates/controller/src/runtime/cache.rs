//! Watches and caches (kube-runtime reflectors) of everything the controller reads: pods,
//! nodes, MigNodes, MigPolicies and MigPlans, and the PodGroups of the gang schedulers whose
//! CRDs the cluster serves at start. Every change wakes the controller loop; the loop
//! then reads whole, consistent-enough copies of the caches. Writes go to the API server and
//! come back through the watches. Objects are cached as [`Decoded`]: one that does not decode
//! is kept as its name and error instead of failing the whole list.

use crate::adapter::PodView;
use crate::dra::objects::DraObjects;
use crate::dra::published::{self, PublishedSlice};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
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
    /// ResourceSlices, ResourceClaims, their templates and DeviceClasses, where the cluster
    /// serves `resource.k8s.io/v1` (Kubernetes 1.34 and later).
    pub dra: Option<DraStores>,
}

/// The caches of the DRA kinds.
#[derive(Clone)]
pub struct DraStores {
    pub slices: Store<ResourceSlice>,
    pub claims: Store<ResourceClaim>,
    pub templates: Store<ResourceClaimTemplate>,
    pub classes: Store<DeviceClass>,
    /// The DeviceTaintRules Geometer made (DynamicMIG compaction), where the cluster serves
    /// them (`resource.k8s.io/v1`, Kubernetes 1.37 and later).
    pub taint_rules: Option<Store<DeviceTaintRule>>,
}

impl DraStores {
    fn start(
        client: &Client,
        changed: &Arc<Notify>,
        tasks: &mut Vec<JoinHandle<()>>,
        taint_rules: bool,
    ) -> DraStores {
        let all = watcher::Config::default;
        let ours = || {
            let (key, value) = crate::dra::compaction::MANAGED_BY;
            watcher::Config::default().labels(&format!("{key}={value}"))
        };
        DraStores {
            slices: spawn_typed_reflector(client, changed.clone(), tasks, published::trim, all()),
            claims: spawn_typed_reflector(client, changed.clone(), tasks, Projection::project, all()),
            templates: spawn_typed_reflector(client, changed.clone(), tasks, drop_managed_fields, all()),
            classes: spawn_typed_reflector(client, changed.clone(), tasks, drop_managed_fields, all()),
            taint_rules: taint_rules
                .then(|| spawn_typed_reflector(client, changed.clone(), tasks, drop_managed_fields, ours())),
        }
    }

    /// The cached objects, indexed.
    fn objects(&self) -> DraObjects {
        let mut dra = DraObjects::default();
        for slice in self.slices.state() {
            dra.add_slice(Arc::new(PublishedSlice::from(&*slice)));
        }
        for claim in self.claims.state() {
            dra.add_claim(claim);
        }
        for template in self.templates.state() {
            dra.add_template(template);
        }
        for class in self.classes.state() {
            dra.add_class(class);
        }
        dra.index();
        dra
    }
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
        let dra = optional.dra.then(|| DraStores::start(client, &changed, &mut tasks, optional.taint_rules));
        (Caches { pods, nodes, mignodes, policies, plans, pod_groups, dra }, Watches { tasks })
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
        if let Some(dra) = &self.dra {
            let _ = dra.slices.wait_until_ready().await;
            let _ = dra.claims.wait_until_ready().await;
            let _ = dra.templates.wait_until_ready().await;
            let _ = dra.classes.wait_until_ready().await;
            if let Some(rules) = &dra.taint_rules {
                let _ = rules.wait_until_ready().await;
            }
        }
    }

    /// The DeviceTaintRules Geometer made; `None` where the cluster does not serve them.
    pub(crate) fn taint_rules(&self) -> Option<Vec<Arc<DeviceTaintRule>>> {
        Some(self.dra.as_ref()?.taint_rules.as_ref()?.state())
    }

    /// The cached DRA objects (none where `resource.k8s.io/v1` is not served).
    pub(crate) fn dra(&self) -> Arc<DraObjects> {
        Arc::new(self.dra.as_ref().map(DraStores::objects).unwrap_or_default())
    }
}

/// The kinds the controller watches only where the cluster serves them.
#[derive(Debug, Clone, Default)]
pub struct OptionalKinds {
    pub pod_groups: Vec<ApiResource>,
    /// Whether `resource.k8s.io/v1` is served (DRA).
    pub dra: bool,
    /// Whether DeviceTaintRules are served in `resource.k8s.io/v1` (DynamicMIG compaction).
    pub taint_rules: bool,
}

impl OptionalKinds {
    /// Asks the cluster which it serves (discovery). A kind installed later is seen when the
    /// controller restarts.
    pub async fn discover(client: &Client) -> OptionalKinds {
        let (dra, taint_rules) = served_dra_kinds(client).await;
        OptionalKinds { pod_groups: pod_group_kinds(client).await, dra, taint_rules }
    }
}

/// Whether the cluster serves the `resource.k8s.io/v1` kinds planning reads (Kubernetes 1.34
/// and later serve them all).
async fn serves_dra(client: &Client) -> bool {
    served_dra_kinds(client).await.0
}

/// Whether the cluster serves the `resource.k8s.io/v1` kinds planning reads, and whether it
/// serves DeviceTaintRules there too.
async fn served_dra_kinds(client: &Client) -> (bool, bool) {
    const KINDS: [&str; 4] = ["ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass"];
    match kube::discovery::group(client, "resource.k8s.io").await {
        Ok(served) => {
            let kinds = served.versioned_resources("v1");
            let serves = |kind: &str| kinds.iter().any(|(ar, _)| ar.kind == kind);
            let dra = KINDS.iter().all(|k| serves(k));
            (dra, dra && serves("DeviceTaintRule"))
        }
        Err(e) => {
            tracing::debug!(error = %e, "resource.k8s.io is not served: no DRA objects to read");
            (false, false)
        }
    }
}

/// Every DRA object the cluster serves, read once (`geometer plan` against a live cluster);
/// none where `resource.k8s.io/v1` is not served.
pub async fn list_dra(client: &Client) -> Result<DraObjects, kube::Error> {
    let mut dra = DraObjects::default();
    if !serves_dra(client).await {
        return Ok(dra);
    }
    let all = Default::default();
    for slice in Api::<ResourceSlice>::all(client.clone()).list(&all).await? {
        dra.add_slice(Arc::new(PublishedSlice::from(&slice)));
    }
    for claim in Api::<ResourceClaim>::all(client.clone()).list(&all).await? {
        dra.add_claim(Arc::new(claim));
    }
    for template in Api::<ResourceClaimTemplate>::all(client.clone()).list(&all).await? {
        dra.add_template(Arc::new(template));
    }
    for class in Api::<DeviceClass>::all(client.clone()).list(&all).await? {
        dra.add_class(Arc::new(class));
    }
    dra.index();
    Ok(dra)
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

/// A watch of a built-in kind the API server validates (the DRA kinds), without managed fields.
fn drop_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A reflector of `K` whose objects `trim` cuts to what planning reads before they are stored.
fn spawn_typed_reflector<K>(
    client: &Client,
    changed: Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
    trim: fn(&mut K),
    config: watcher::Config,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream =
        watcher(Api::<K>::all(client.clone()), config).default_backoff().modify(trim).reflect(writer);
    tasks.push(follow(stream, K::kind(&()).to_string(), changed));
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
