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

use k8s_openapi::api::resource::v1::{Device, DeviceClass, ResourceClaim, ResourceClaimTemplate};
use kube::ResourceExt;

use super::published::{DeviceName, PublishedSlice};
use super::stack::{DraMode, NVIDIA_DRIVER};

/// A pool's slices at its newest generation.
#[derive(Debug, Clone, Default)]
struct Pool {
    generation: i64,
    expected_slices: i64,
    slices: Vec<Arc<PublishedSlice>>,
    /// Each device as (slice, device) indexes, in order of name; built by
    /// [`DraObjects::index`] once the generation is complete (a cluster's slices list hundreds
    /// of thousands of devices: none is copied).
    by_name: Vec<(u32, u32)>,
}

impl Pool {
    fn name_at(&self, (slice, device): (u32, u32)) -> &DeviceName {
        &self.slices[slice as usize].devices[device as usize]
    }

    fn sort_by_name(&mut self) {
        let mut by_name: Vec<(u32, u32)> = (0..self.slices.len())
            .flat_map(|s| (0..self.slices[s].devices.len()).map(move |d| (s as u32, d as u32)))
            .collect();
        by_name.sort_unstable_by(|a, b| self.name_at(*a).name.cmp(&self.name_at(*b).name));
        self.by_name = by_name;
    }

    fn device(&self, name: &str) -> Option<&DeviceName> {
        let found = self.by_name.binary_search_by(|at| self.name_at(*at).name.as_str().cmp(name)).ok()?;
        Some(self.name_at(self.by_name[found]))
    }
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
    /// A slice of each node's complete pool that lists a device.
    sample_of_node: HashMap<String, Arc<PublishedSlice>>,
    /// Nodes whose pool is being republished (fewer slices than its generation has).
    pub unsettled: BTreeSet<String>,
}

impl DraObjects {
    /// Whether there is nothing of DRA at all (a cluster without `resource.k8s.io/v1`).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.claims.is_empty() && self.classes.is_empty()
    }

    /// Adds a slice; one of another driver is ignored (false).
    pub fn add_slice(&mut self, slice: Arc<PublishedSlice>) -> bool {
        if slice.driver != NVIDIA_DRIVER {
            return false;
        }
        if let Some(node) = &slice.node {
            let known = self.nodes.entry(node.clone()).or_insert(slice.mode);
            *known = (*known).max(slice.mode);
        }
        let pool = &slice.pool;
        let entry = self.pools.entry(pool.name.clone()).or_default();
        if pool.generation > entry.generation || entry.slices.is_empty() {
            *entry = Pool {
                generation: pool.generation,
                expected_slices: pool.resource_slice_count,
                slices: vec![],
                by_name: vec![],
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
        self.sample_of_node.clear();
        self.unsettled.clear();
        for pool in self.pools.values_mut() {
            let node = pool.slices.iter().find_map(|s| s.node.clone());
            pool.by_name.clear();
            if (pool.slices.len() as i64) < pool.expected_slices {
                self.unsettled.extend(node);
                continue;
            }
            let Some(node) = node else { continue };
            if let Some(sample) = pool.slices.iter().find(|s| s.sample.is_some()) {
                self.sample_of_node.insert(node, sample.clone());
            }
            pool.sort_by_name();
        }
    }

    /// A device of NVIDIA's driver by its pool and name, if its pool's newest generation lists
    /// it and is complete.
    pub fn device(&self, pool: &str, name: &str) -> Option<&DeviceName> {
        self.pools.get(pool)?.device(name)
    }

    /// The slices of `node`'s pool at its newest generation, with the pool's name, once that
    /// generation is complete.
    pub fn pool_of_node(&self, node: &str) -> Option<(&str, &[Arc<PublishedSlice>])> {
        self.pools.iter().find_map(|(name, pool)| {
            let complete = !pool.by_name.is_empty();
            let of_node = pool.slices.iter().any(|s| s.node.as_deref() == Some(node));
            (complete && of_node).then_some((name.as_str(), pool.slices.as_slice()))
        })
    }

    /// A device published for `node`, whole, if any.
    pub fn a_device_of(&self, node: &str) -> Option<&Device> {
        self.sample_of_node.get(node)?.sample.as_ref()
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
