//! The DRA objects planning reads: NVIDIA's driver's ResourceSlices (the newest generation of
//! each pool), ResourceClaims, ResourceClaimTemplates and DeviceClasses, indexed once per
//! planning pass.
//!
//! A pool is read at its newest generation only, and only once every slice of that generation
//! is there (`spec.pool.resourceSliceCount`): kube-scheduler ignores older generations, and a
//! pool being republished is not yet what the driver advertises (repository
//! `kubernetes/kubernetes`, path `staging/src/k8s.io/dynamic-resource-allocation/structured/pools.go`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    Device, DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::ResourceExt;

use super::stack::{self, DraMode, NVIDIA_DRIVER};

/// One device of NVIDIA's driver, in the newest complete generation of its pool: its slice
/// and its place there (a cluster's slices list hundreds of thousands of devices; none is
/// copied).
#[derive(Debug, Clone)]
pub struct PublishedDevice {
    slice: Arc<ResourceSlice>,
    index: usize,
}

impl PublishedDevice {
    pub fn device(&self) -> &Device {
        &self.slice.spec.devices.as_ref().expect("indexed from this list")[self.index]
    }

    /// The node the device's pool is for.
    pub fn node(&self) -> &str {
        self.slice.spec.node_name.as_deref().unwrap_or_default()
    }

    /// The device's `uuid` attribute: the MIG device UUID (or the GPU's, for a whole GPU).
    pub fn uuid(&self) -> Option<&str> {
        self.device().attributes.as_ref()?.get("uuid")?.string.as_deref()
    }
}

/// A slice as planning keeps it from a List: each device's name and `uuid`, and the first
/// device whole (the devices Geometer could make copy its attributes). A large cluster's slices
/// list hundreds of thousands of devices with a dozen attributes each.
pub fn trimmed(mut slice: ResourceSlice) -> ResourceSlice {
    for device in slice.spec.devices.iter_mut().flatten().skip(1) {
        device.capacity = None;
        if let Some(attributes) = &mut device.attributes {
            attributes.retain(|name, _| name == "uuid");
        }
    }
    slice
}

/// A pool's slices at its newest generation.
#[derive(Debug, Clone, Default)]
struct Pool {
    generation: i64,
    expected_slices: i64,
    slices: Vec<Arc<ResourceSlice>>,
}

/// The DRA objects of a cluster (or a kubectl List), as planning reads them.
#[derive(Debug, Clone, Default)]
pub struct DraObjects {
    /// Nodes NVIDIA's driver advertises, and how.
    pub nodes: BTreeMap<String, DraMode>,
    pools: BTreeMap<String, Pool>,
    claims: HashMap<(String, String), Arc<ResourceClaim>>,
    templates: HashMap<(String, String), Arc<ResourceClaimTemplate>>,
    pub classes: BTreeMap<String, Arc<DeviceClass>>,
    /// Devices of complete pools by (pool, device name); built by [`DraObjects::index`].
    devices: HashMap<(String, String), PublishedDevice>,
    /// A device of each node's complete pool, if it lists any.
    first_of_node: HashMap<String, PublishedDevice>,
    /// Nodes whose pool is being republished (fewer slices than its generation has).
    pub unsettled: BTreeSet<String>,
}

impl DraObjects {
    /// Whether there is nothing of DRA at all (a cluster without `resource.k8s.io/v1`).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.claims.is_empty() && self.classes.is_empty()
    }

    /// Adds a slice; one of another driver is ignored (false).
    pub fn add_slice(&mut self, slice: Arc<ResourceSlice>) -> bool {
        if slice.spec.driver != NVIDIA_DRIVER {
            return false;
        }
        if let Some((node, mode)) = stack::node_of(&slice.spec) {
            let known = self.nodes.entry(node).or_insert(mode);
            *known = (*known).max(mode);
        }
        let pool = &slice.spec.pool;
        let entry = self.pools.entry(pool.name.clone()).or_default();
        if pool.generation > entry.generation || entry.slices.is_empty() {
            *entry = Pool {
                generation: pool.generation,
                expected_slices: pool.resource_slice_count,
                slices: vec![],
            };
        }
        if pool.generation == entry.generation {
            entry.slices.push(slice);
        }
        true
    }

    pub fn add_claim(&mut self, claim: Arc<ResourceClaim>) {
        self.claims.insert((claim.namespace().unwrap_or_default(), claim.name_any()), claim);
    }

    pub fn add_template(&mut self, template: Arc<ResourceClaimTemplate>) {
        self.templates.insert((template.namespace().unwrap_or_default(), template.name_any()), template);
    }

    pub fn add_class(&mut self, class: Arc<DeviceClass>) {
        self.classes.insert(class.name_any(), class);
    }

    /// Indexes the devices of every complete pool; call once everything is added.
    pub fn index(&mut self) {
        self.devices.clear();
        self.first_of_node.clear();
        self.unsettled.clear();
        for (name, pool) in &self.pools {
            let node = pool.slices.iter().find_map(|s| s.spec.node_name.clone());
            if (pool.slices.len() as i64) < pool.expected_slices {
                self.unsettled.extend(node);
                continue;
            }
            let Some(node) = node else { continue };
            for slice in &pool.slices {
                for (index, device) in slice.spec.devices.iter().flatten().enumerate() {
                    let published = PublishedDevice { slice: slice.clone(), index };
                    self.first_of_node.entry(node.clone()).or_insert_with(|| published.clone());
                    self.devices.insert((name.clone(), device.name.clone()), published);
                }
            }
        }
    }

    /// A device of NVIDIA's driver by its pool and name, if its pool's newest generation lists it.
    pub fn device(&self, pool: &str, name: &str) -> Option<&PublishedDevice> {
        self.devices.get(&(pool.to_string(), name.to_string()))
    }

    /// A device published for `node`, if any.
    pub fn a_device_of(&self, node: &str) -> Option<&PublishedDevice> {
        self.first_of_node.get(node)
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<ResourceClaim>> {
        self.claims.get(&(namespace.to_string(), name.to_string()))
    }

    pub fn template(&self, namespace: &str, name: &str) -> Option<&Arc<ResourceClaimTemplate>> {
        self.templates.get(&(namespace.to_string(), name.to_string()))
    }

    /// Every claim, in no particular order.
    pub fn claims(&self) -> impl Iterator<Item = &Arc<ResourceClaim>> {
        self.claims.values()
    }
}
