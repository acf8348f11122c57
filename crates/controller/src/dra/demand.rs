//! What a pending pod asks of NVIDIA's DRA driver, as MIG profiles: each request of each
//! unallocated claim (`exactly` or `firstAvailable`) is matched against the devices Geometer
//! could make ([`super::offers`]) with its DeviceClass's and its own CEL selectors, as
//! kube-scheduler's allocator matches published devices, and the cheapest profile that matches
//! is taken. A DRA extended resource named after a DeviceClass
//! (`deviceclass.resource.kubernetes.io/<class>`) is read the same way.
//!
//! What cannot be planned is said, never guessed: `allocationMode: All`, admin access,
//! consumable capacity, a selector that is not CEL or fails on a device that does not exist yet
//! (one reading `uuid`), a selector that fails on a kind of device a node publishes now (which
//! stops kube-scheduler too), a constraint across several devices on anything but the parent GPU
//! (or on part of a pod's devices only), a class or claim that does not exist. A constraint on
//! the parent GPU (`gpu.nvidia.com/parentUUID`) over all of a pod's devices is planned: all on
//! one GPU (`matchAttribute`) or each on its own (`distinctAttribute`). The classes that serve
//! an extended resource under its own name (`extendedResourceName`, e.g.
//! `nvidia.com/mig-1g.10gb`) are checked the same way. Claim fields follow `resource.k8s.io/v1`
//! (repository `kubernetes/api`, path `resource/v1/types.go`); extended resources through
//! classes follow the KEP "DRA: Extended Resource" (repository `kubernetes/enhancements`, path
//! `keps/sig-scheduling/5004-dra-extended-resource`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use geometer_solver::catalog::WHOLE;
use geometer_solver::snapshot::GpuSpread;
use k8s_openapi::api::resource::v1::{
    DeviceConstraint, DeviceRequest, DeviceSelector, ExactDeviceRequest, ResourceClaimSpec,
};

use super::objects::DraObjects;
use super::offers::Offer;
use super::selector::Selector;
use crate::adapter::PodView;

/// The attribute NVIDIA's driver gives each MIG device: the UUID of its GPU (repository
/// `NVIDIA/k8s-dra-driver-gpu`, path `cmd/gpu-kubelet-plugin/mig.go`, `CommonAttributesMig`).
const PARENT_GPU: &str = "gpu.nvidia.com/parentUUID";

/// The spread a claim constraint asks: the same or a distinct parent GPU.
fn spread_of(match_attribute: Option<&str>, distinct_attribute: Option<&str>) -> Option<GpuSpread> {
    match (match_attribute, distinct_attribute) {
        (Some(PARENT_GPU), None) => Some(GpuSpread::OneGpu),
        (None, Some(PARENT_GPU)) => Some(GpuSpread::DistinctGpus),
        _ => None,
    }
}

/// Why a constraint across `covered` devices is not planned.
fn not_planned(label: &str, constraint: &DeviceConstraint, covered: u64, whole: bool) -> String {
    let attribute = constraint.match_attribute.as_ref().or(constraint.distinct_attribute.as_ref());
    let attribute = attribute.map_or("an attribute".to_string(), |a| a.clone());
    if whole {
        // kube-scheduler's allocator fails a constraint on a device without the attribute
        // (repository `kubernetes/kubernetes`, path
        // `staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/allocator_stable.go`).
        return format!("{label}: a constraint on {attribute} across {covered} devices with a whole GPU among them: a whole GPU has no parent GPU attribute, so no allocation can satisfy it");
    }
    format!(
        "{label}: a constraint on {attribute} across {covered} devices; only the parent GPU ({PARENT_GPU}) \
         is planned"
    )
}

/// The implicit extended resource of every DeviceClass: `deviceclass.resource.kubernetes.io/<class>`.
pub const CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// A pod's DRA demand: profile -> devices, and a line per claim request for the review.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    pub profiles: BTreeMap<String, u64>,
    /// `claim ns/name, request r: <profile>`, one per request planned.
    pub named: Vec<String>,
    /// Whether the devices must share a GPU or each have their own.
    pub spread: GpuSpread,
    /// The devices a claim's constraint on the parent GPU covers, and the spread it asks.
    constrained: Option<(u64, GpuSpread)>,
}

/// Reads claims and classes into profiles, remembering each request shape it has read (a
/// cluster's claims come from a few templates).
pub struct Demand<'d> {
    dra: &'d DraObjects,
    offers: Vec<Offer>,
    /// (catalog model, profile) of the devices static-MIG nodes publish now.
    published: BTreeSet<(String, String)>,
    /// Extended resource -> the DeviceClasses serving it under its own name
    /// (`extendedResourceName`).
    served: BTreeMap<String, Arc<[String]>>,
    known: HashMap<String, Result<String, String>>,
}

impl<'d> Demand<'d> {
    /// Demand matched against `offers` (cheapest first), on nodes publishing devices of the
    /// kinds `published` ((catalog model, profile) pairs) now.
    pub fn new(dra: &'d DraObjects, offers: Vec<Offer>, published: BTreeSet<(String, String)>) -> Demand<'d> {
        let mut served: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, class) in &dra.classes {
            if let Some(resource) = class.spec.as_ref().and_then(|s| s.extended_resource_name.clone()) {
                served.entry(resource).or_default().push(name.clone());
            }
        }
        let served = served.into_iter().map(|(resource, classes)| (resource, classes.into())).collect();
        Demand { dra, offers, published, served, known: HashMap::new() }
    }

    /// Whether a DeviceClass serves the extended resource `resource` under its own name.
    pub fn serves(&self, resource: &str) -> bool {
        self.served.contains_key(resource)
    }

    /// What `pod` asks through claims not yet allocated and class-named extended resources
    /// (`requests`, its effective requests); `None` when it asks nothing of DRA that is not
    /// allocated already. `Err` says what cannot be planned, naming the claim and request.
    pub fn of_pod(
        &mut self,
        pod: &PodView,
        requests: &BTreeMap<String, u64>,
    ) -> Result<Option<Asked>, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut asked = Asked::default();
        for entry in pod.spec.iter().flat_map(|s| s.resource_claims.iter().flatten()) {
            let Some((label, spec)) = self.claim_spec(pod, namespace, entry)? else { continue };
            self.add_claim(&label, &spec, &mut asked)?;
        }
        let mut any = !asked.named.is_empty();
        for resource in requests.keys() {
            // A class naming the resource (`extendedResourceName`) serves it under that name;
            // its selectors must still hold on the devices, or kube-scheduler refuses the pod.
            let Some(classes) = self.served.get(resource).cloned() else { continue };
            for class in classes.iter() {
                self.profile(class, &[]).map_err(|why| format!("extended resource {resource}: {why}"))?;
            }
        }
        for (resource, milli) in requests {
            let Some(class) = resource.strip_prefix(CLASS_RESOURCE_PREFIX) else { continue };
            any = true;
            let count = milli.div_ceil(1000);
            let profile =
                self.profile(class, &[]).map_err(|why| format!("extended resource {resource}: {why}"))?;
            *asked.profiles.entry(profile.clone()).or_default() += count;
            asked.named.push(format!("extended resource {resource}: {count} x {profile}"));
        }
        if let Some((covered, spread)) = asked.constrained {
            let total: u64 = asked.profiles.values().sum();
            if covered < total {
                return Err(format!(
                    "a constraint on the parent GPU covers {covered} of the pod's {total} devices; devices \
                     constrained in part are not planned"
                ));
            }
            asked.spread = spread;
        }
        Ok(any.then_some(asked))
    }

    /// The spec of the claim behind a pod's claim entry, with how to name it; `None` when it is
    /// allocated already (its device exists).
    fn claim_spec(
        &self,
        pod: &PodView,
        namespace: &str,
        entry: &k8s_openapi::api::core::v1::PodResourceClaim,
    ) -> Result<Option<(String, ResourceClaimSpec)>, String> {
        let made = pod.status.iter().flat_map(|s| s.resource_claim_statuses.iter().flatten());
        let made = made.filter(|s| s.name == entry.name).find_map(|s| s.resource_claim_name.clone());
        if let Some(name) = entry.resource_claim_name.clone().or(made) {
            let label = format!("claim {namespace}/{name}");
            return match self.dra.claim(namespace, &name) {
                Some(claim) if claim.status.as_ref().is_some_and(|s| s.allocation.is_some()) => Ok(None),
                Some(claim) => Ok(Some((label, claim.spec.clone().unwrap_or_default()))),
                None if entry.resource_claim_name.is_some() => Err(format!("{label} does not exist")),
                // Made from a template, gone since: read the template as the controller will.
                None => self.template_spec(namespace, entry),
            };
        }
        self.template_spec(namespace, entry)
    }

    fn template_spec(
        &self,
        namespace: &str,
        entry: &k8s_openapi::api::core::v1::PodResourceClaim,
    ) -> Result<Option<(String, ResourceClaimSpec)>, String> {
        let Some(template) = &entry.resource_claim_template_name else {
            return Err(format!("resource claim entry {} names no claim and no template", entry.name));
        };
        let label = format!("claim {} (from template {namespace}/{template})", entry.name);
        match self.dra.template(namespace, template) {
            Some(t) => Ok(Some((label, t.spec.as_ref().and_then(|s| s.spec.clone()).unwrap_or_default()))),
            None => Err(format!("ResourceClaimTemplate {namespace}/{template} does not exist")),
        }
    }

    fn add_claim(&mut self, label: &str, spec: &ResourceClaimSpec, asked: &mut Asked) -> Result<(), String> {
        let Some(devices) = &spec.devices else { return Ok(()) };
        let mut counts = BTreeMap::new();
        let ours: Vec<&DeviceRequest> =
            devices.requests.iter().flatten().filter(|r| self.for_nvidia(r)).collect();
        for request in ours {
            let (profile, count) =
                self.request(request).map_err(|why| format!("{label}, request {}: {why}", request.name))?;
            counts.insert(request.name.clone(), (profile.clone(), count));
            *asked.profiles.entry(profile.clone()).or_default() += count;
            asked.named.push(format!("{label}, request {}: {count} x {profile}", request.name));
        }
        for constraint in devices.constraints.iter().flatten() {
            let named = constraint.requests.as_ref().filter(|r| !r.is_empty());
            let in_scope = |request: &str| {
                named.is_none_or(|names| names.iter().any(|n| n.split('/').next() == Some(request)))
            };
            let covered: u64 = counts.iter().filter(|(r, _)| in_scope(r)).map(|(_, (_, c))| c).sum();
            if covered <= 1 {
                continue;
            }
            let whole = counts.iter().any(|(r, (profile, _))| in_scope(r) && profile == WHOLE);
            let spread =
                spread_of(constraint.match_attribute.as_deref(), constraint.distinct_attribute.as_deref())
                    .filter(|_| !whole)
                    .ok_or_else(|| not_planned(label, constraint, covered, whole))?;
            if asked.constrained.replace((covered, spread)).is_some() {
                return Err(format!(
                    "{label}: several constraints on the devices of one pod are not planned"
                ));
            }
        }
        Ok(())
    }

    /// Whether a request is for NVIDIA's driver: its class (or a subrequest's) is named after
    /// it or selects its devices. Requests for other drivers (a NIC, an FPGA) are none of
    /// Geometer's business: neither planned nor reported.
    fn for_nvidia(&self, request: &DeviceRequest) -> bool {
        let classes_and_selectors: Vec<(&str, &[DeviceSelector])> =
            match (&request.exactly, &request.first_available) {
                (Some(e), _) => {
                    vec![(e.device_class_name.as_str(), e.selectors.as_deref().unwrap_or_default())]
                }
                (None, Some(subs)) => subs
                    .iter()
                    .map(|s| (s.device_class_name.as_str(), s.selectors.as_deref().unwrap_or_default()))
                    .collect(),
                (None, None) => return false,
            };
        let names_driver = |selectors: &[DeviceSelector]| {
            selectors
                .iter()
                .any(|s| s.cel.as_ref().is_some_and(|c| c.expression.contains(super::stack::NVIDIA_DRIVER)))
        };
        classes_and_selectors.iter().any(|(class, selectors)| {
            let class_selectors = self
                .dra
                .classes
                .get(*class)
                .and_then(|c| c.spec.as_ref()?.selectors.as_deref())
                .unwrap_or_default();
            class.ends_with("nvidia.com") || names_driver(class_selectors) || names_driver(selectors)
        })
    }

    /// A request's profile and device count.
    fn request(&mut self, request: &DeviceRequest) -> Result<(String, u64), String> {
        if let Some(exactly) = &request.exactly {
            return self.exactly(exactly);
        }
        let mut first_refusal = None;
        for sub in request.first_available.iter().flatten() {
            let exactly = ExactDeviceRequest {
                device_class_name: sub.device_class_name.clone(),
                selectors: sub.selectors.clone(),
                count: sub.count,
                allocation_mode: sub.allocation_mode.clone(),
                capacity: sub.capacity.clone(),
                ..Default::default()
            };
            match self.exactly(&exactly) {
                Ok(found) => return Ok(found),
                Err(why) => {
                    first_refusal.get_or_insert(format!("subrequest {}: {why}", sub.name));
                }
            }
        }
        Err(first_refusal.unwrap_or_else(|| "neither exactly nor firstAvailable".into()))
    }

    fn exactly(&mut self, exactly: &ExactDeviceRequest) -> Result<(String, u64), String> {
        if exactly.allocation_mode.as_deref() == Some("All") {
            return Err("allocationMode All asks for every matching device there is".into());
        }
        if exactly.admin_access == Some(true) {
            return Err("adminAccess asks for devices in use, not new ones".into());
        }
        if exactly.capacity.is_some() {
            return Err("a share of a device's capacity (capacity.requests)".into());
        }
        let count = exactly.count.unwrap_or(1).max(1) as u64;
        let selectors = exactly.selectors.as_deref().unwrap_or_default();
        Ok((self.profile(&exactly.device_class_name, selectors)?, count))
    }

    /// The cheapest profile whose device matches class `class` and `selectors`.
    fn profile(&mut self, class: &str, selectors: &[DeviceSelector]) -> Result<String, String> {
        let mut key = class.to_string();
        for s in selectors {
            key.push('\0');
            key.push_str(s.cel.as_ref().map_or("", |c| c.expression.as_str()));
        }
        if let Some(known) = self.known.get(&key) {
            return known.clone();
        }
        let found = self.evaluate(class, selectors);
        self.known.insert(key, found.clone());
        found
    }

    fn evaluate(&self, class: &str, selectors: &[DeviceSelector]) -> Result<String, String> {
        let Some(device_class) = self.dra.classes.get(class) else {
            return Err(format!("DeviceClass {class} does not exist"));
        };
        let class_selectors =
            device_class.spec.as_ref().and_then(|s| s.selectors.as_deref()).unwrap_or_default();
        let mut compiled = Vec::new();
        for selector in class_selectors.iter().chain(selectors) {
            let Some(cel) = &selector.cel else { return Err("a selector that is not CEL".into()) };
            compiled.push(Selector::compile(&cel.expression).map_err(|e| e.to_string())?);
        }
        if self.offers.is_empty() {
            return Err("no node of NVIDIA's DRA driver has a GPU Geometer knows".into());
        }
        let mut cheapest = None;
        let mut failed = None;
        for offer in &self.offers {
            match self.offer_matches(&compiled, offer) {
                Ok(true) => {
                    cheapest.get_or_insert_with(|| offer.profile.clone());
                }
                Ok(false) => {}
                Err(why) => {
                    // kube-scheduler's allocator fails the pod when a selector fails on any
                    // device it considers (kubernetes/kubernetes,
                    // `staging/src/k8s.io/dynamic-resource-allocation/structured`): a kind of
                    // device a node publishes now stops it, one Geometer could make does not.
                    if self.published.contains(&(offer.model.clone(), offer.profile.clone())) {
                        return Err(format!(
                            "{why}, and a node publishes such a device now: kube-scheduler cannot place the pod while a selector fails on a device; guard it (e.g. `device.attributes['gpu.nvidia.com'].type == 'mig' && ...`)"
                        ));
                    }
                    failed.get_or_insert(why);
                }
            }
        }
        cheapest.ok_or_else(|| {
            failed.unwrap_or_else(|| {
                format!("no device Geometer can make matches DeviceClass {class} and the request's selectors")
            })
        })
    }

    /// Whether every selector matches `offer`, tried in order up to the first that does not
    /// (the class's before the request's, as the allocator tries them); `Err` says why one
    /// fails on it.
    fn offer_matches(&self, compiled: &[Selector], offer: &Offer) -> Result<bool, String> {
        let name = format!("{} {}", offer.model, offer.profile);
        for selector in compiled {
            let matches = selector.matches(&name, &offer.device).map_err(|e| match e.to_string() {
                m if m.contains("uuid") || m.contains("UUID") => {
                    format!("{m}; a device Geometer would make has no uuid or parentUUID until it exists")
                }
                m => m,
            })?;
            if !matches {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The resource a profile's devices count as in a pod's requests (`nvidia.com/mig-<profile>`,
/// or `nvidia.com/gpu` for a whole GPU), so that DRA demand joins the device plugin's.
pub fn resource_of(profile: &str) -> String {
    match profile {
        WHOLE => geometer_api::resources::GPU_RESOURCE.to_string(),
        p => geometer_api::resources::mig_resource(p),
    }
}
