//! Who holds each device of NVIDIA's driver: an allocated ResourceClaim holds its device from
//! the moment kube-scheduler allocates it, before its pod runs. The device is joined to the
//! agent's NVML inventory by its `uuid` attribute (never by reading its name, whose format
//! changed between the driver's releases). The holder is the first pod the claim is reserved
//! for (`status.reservedFor`), or the claim itself while none is.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use geometer_solver::PodKey;

use super::objects::DraObjects;
use super::stack::NVIDIA_DRIVER;

/// What allocated claims hold.
#[derive(Debug, Default)]
pub struct Holders {
    /// Device UUID -> the holder: a pod, or `namespace/claim:<name>` for a claim no pod has yet.
    pub by_uuid: HashMap<String, PodKey>,
    /// Per pod: device UUIDs its claims hold.
    pub of_pod: HashMap<PodKey, Vec<String>>,
    /// Nodes with a claim naming a device their newest pool no longer lists, with one such
    /// claim and device: an instance made there could take that name while the claim still
    /// holds it, so the node is left alone until the claim goes.
    pub orphans: BTreeMap<String, String>,
    /// Per pool: allocated devices the driver lists without a `uuid` (DynamicMIG's, whose
    /// instance exists only while a claim is prepared), by name, with their holder.
    pub by_name: BTreeMap<String, BTreeMap<String, PodKey>>,
}

/// The holder key of a claim that is not reserved for a pod yet. Pod names cannot contain `:`,
/// so it never names a pod.
pub fn claim_holder(namespace: &str, claim: &str) -> PodKey {
    PodKey::new(namespace, &format!("{CLAIM_HOLDER}{claim}"))
}

/// Whether `holder` is a claim no pod has yet ([`claim_holder`]) rather than a pod.
pub fn is_claim_holder(holder: &PodKey) -> bool {
    holder.name().starts_with(CLAIM_HOLDER)
}

const CLAIM_HOLDER: &str = "claim:";

pub fn holders(dra: &DraObjects) -> Holders {
    let mut out = Holders::default();
    let dra_pools: BTreeSet<&str> = dra.nodes.keys().map(String::as_str).collect();
    for claim in dra.claims() {
        let Some(status) = &claim.status else { continue };
        let Some(allocation) = &status.allocation else { continue };
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let pod = status
            .reserved_for
            .iter()
            .flatten()
            .find(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or_default().is_empty())
            .map(|r| PodKey::new(namespace, &r.name));
        let holder = pod.clone().unwrap_or_else(|| claim_holder(namespace, name));
        for result in allocation.devices.iter().flat_map(|d| d.results.iter().flatten()) {
            if result.driver != NVIDIA_DRIVER {
                continue;
            }
            let device = dra.device(&result.pool, &result.device);
            if device.is_some_and(|d| d.uuid.is_none()) {
                let held = out.by_name.entry(result.pool.clone()).or_default();
                held.insert(result.device.clone(), holder.clone());
                continue;
            }
            match device.and_then(|d| d.uuid.as_deref()) {
                Some(uuid) => {
                    out.by_uuid.insert(uuid.to_string(), holder.clone());
                    if let Some(pod) = &pod {
                        out.of_pod.entry(pod.clone()).or_default().push(uuid.to_string());
                    }
                }
                None if dra_pools.contains(result.pool.as_str()) && !dra.unsettled.contains(&result.pool) => {
                    out.orphans.entry(result.pool.clone()).or_insert_with(|| {
                        format!(
                            "claim {namespace}/{name} names device {}, which the driver no longer lists",
                            result.device
                        )
                    });
                }
                None => {}
            }
        }
    }
    out
}
