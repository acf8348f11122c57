//! From measured use to a recommendation per workload: which MIG profile holds what the pods of
//! one owner (Deployment, StatefulSet, Job, ...) use of their whole GPUs, what that gives back,
//! and the patch that makes them ask for it.
//!
//! A group's need is its highest measured memory (the peak, or the 95th percentile when
//! [`Settings::percentile`] says so) times the headroom, and its mean utilisation of the GPU
//! model it ran on, as compute slices of that model, times the same headroom. The profile is
//! the smallest standard MIG profile (no `+me`/`+gfx`) of that model with both: least memory,
//! then fewest compute slices.

use crate::adapter::PodView;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::ResourceExt;
use serde::Serialize;

use geometer_api::resources::{mig_resource, GPU_RESOURCE};
use geometer_api::PodGpuUsage;
use geometer_solver::catalog::{Catalog, GpuModel, ProfileKind};

/// How recommendations are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Room added on top of the measured need, percent.
    pub headroom_percent: u32,
    /// Samples each pod needs before its group is judged.
    pub min_samples: u32,
    /// Size memory from the 95th percentile instead of the peak (less safe: a pod that goes over
    /// its slice's memory fails its allocations).
    pub percentile: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { headroom_percent: 20, min_samples: 30, percentile: false }
    }
}

/// The workload a pod belongs to: its controller, through a ReplicaSet to its Deployment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Owner {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} -n {}", self.kind.to_lowercase(), self.name, self.namespace)
    }
}

/// The owner of `pod`. A ReplicaSet's pod (label `pod-template-hash`) belongs to the Deployment
/// whose name the ReplicaSet's carries before `-<hash>` (how the Deployment controller names
/// them: kubernetes/kubernetes, `pkg/controller/deployment/sync.go`); a pod without a
/// controller is its own owner.
pub fn owner_of<K: kube::Resource>(pod: &K) -> Owner {
    let namespace = pod.namespace().unwrap_or_default();
    let controller = pod.owner_references().iter().find(|r| r.controller == Some(true));
    let Some(r) = controller else {
        return Owner { kind: "Pod".into(), namespace, name: pod.name_any() };
    };
    let hash = pod.labels().get("pod-template-hash");
    if let (Some(hash), "ReplicaSet") = (hash, r.kind.as_str()) {
        if let Some(deployment) = r.name.strip_suffix(&format!("-{hash}")) {
            return Owner { kind: "Deployment".into(), namespace, name: deployment.to_string() };
        }
    }
    Owner { kind: r.kind.clone(), namespace, name: r.name.clone() }
}

/// What to do about one workload on one GPU model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Recommendation {
    pub owner: Owner,
    /// Catalog key of the GPU model its pods were measured on.
    pub model: String,
    /// Measured pods.
    pub pods: Vec<String>,
    /// Fewest samples among them.
    pub samples: u32,
    pub peak_memory_mib: u64,
    pub p95_memory_mib: u64,
    pub mean_utilization_percent: u32,
    pub verdict: Verdict,
}

/// The outcome for a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum Verdict {
    /// A slice holds it.
    #[serde(rename_all = "camelCase")]
    Slice {
        profile: String,
        /// The resource to ask for (`nvidia.com/mig-1g.10gb`).
        resource: String,
        /// Whole GPUs its pods hold now, and how many they need as slices packed together.
        gpus_now: u32,
        gpus_as_slices: u32,
        /// The command that makes the workload ask for the slice (none for a bare pod, which
        /// must be created again).
        patch: Option<String>,
    },
    /// Nothing smaller than the whole GPU holds it.
    #[serde(rename_all = "camelCase")]
    WholeGpu { needed_memory_mib: u64, needed_compute_slices: u32 },
    /// Not measured long enough to judge.
    #[serde(rename_all = "camelCase")]
    TooFewSamples { samples: u32, needed: u32 },
    /// Its GPU model is not in the catalog.
    #[serde(rename_all = "camelCase")]
    UnknownModel,
}

impl Verdict {
    /// Whole GPUs the recommendation gives back.
    pub fn gpus_given_back(&self) -> u32 {
        match self {
            Verdict::Slice { gpus_now, gpus_as_slices, .. } => gpus_now.saturating_sub(*gpus_as_slices),
            _ => 0,
        }
    }
}

/// Recommendations for every owner of a measured pod, by owner then model. Pods in `usage`
/// that are not in `pods` (gone since) are left out.
pub fn recommend(
    usage: &[PodGpuUsage],
    pods: &[&PodView],
    catalog: &Catalog,
    settings: &Settings,
) -> Vec<Recommendation> {
    if usage.is_empty() {
        return Vec::new();
    }
    // Indexed by the measured pods, which are few, not by every pod: the controller calls this
    // on every pass over the cluster's pods.
    let mut measured: BTreeMap<(&str, &str), Vec<&PodGpuUsage>> = BTreeMap::new();
    for u in usage {
        if let Some(key) = u.pod.split_once('/') {
            measured.entry(key).or_default().push(u);
        }
    }
    let mut groups: BTreeMap<(Owner, String), Vec<(&PodGpuUsage, &PodView)>> = BTreeMap::new();
    for pod in pods {
        let key = (
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        );
        for u in measured.get(&key).into_iter().flatten() {
            groups.entry((owner_of(*pod), u.model.clone())).or_default().push((u, pod));
        }
    }
    groups
        .into_iter()
        .map(|((owner, model), members)| judge(owner, model, &members, catalog, settings))
        .collect()
}

fn judge(
    owner: Owner,
    model: String,
    members: &[(&PodGpuUsage, &PodView)],
    catalog: &Catalog,
    settings: &Settings,
) -> Recommendation {
    let mut pods: Vec<String> = members.iter().map(|(u, _)| u.pod.clone()).collect();
    pods.sort();
    pods.dedup();
    let samples = members.iter().map(|(u, _)| u.samples).min().unwrap_or(0);
    let peak = members.iter().map(|(u, _)| u.peak_memory_mib).max().unwrap_or(0);
    let p95 = members.iter().map(|(u, _)| u.p95_memory_mib).max().unwrap_or(0);
    let mean_utilization = members.iter().map(|(u, _)| u.mean_utilization_percent).max().unwrap_or(0);
    let verdict = match catalog.find(&model) {
        None => Verdict::UnknownModel,
        Some(_) if samples < settings.min_samples => {
            Verdict::TooFewSamples { samples, needed: settings.min_samples }
        }
        Some(m) => {
            let memory = if settings.percentile { p95 } else { peak };
            let needed_memory = with_headroom(memory, settings.headroom_percent);
            let busy = u64::from(mean_utilization.min(100)) * u64::from(m.compute_slices);
            let needed_compute = with_headroom(busy, settings.headroom_percent).div_ceil(100).max(1) as u32;
            match smallest_profile(m, needed_memory, needed_compute) {
                None => Verdict::WholeGpu {
                    needed_memory_mib: needed_memory,
                    needed_compute_slices: needed_compute,
                },
                Some(profile) => {
                    let p = &m.profiles[profile];
                    let gpus_now = members.len() as u32;
                    let per_gpu = u32::from(p.max_instances.max(1));
                    let patch = patch_command(&owner, members[0].1, &mig_resource(&p.device_plugin_name));
                    Verdict::Slice {
                        profile: p.name.clone(),
                        resource: mig_resource(&p.device_plugin_name),
                        gpus_now,
                        gpus_as_slices: gpus_now.div_ceil(per_gpu),
                        patch,
                    }
                }
            }
        }
    };
    Recommendation {
        owner,
        model,
        pods,
        samples,
        peak_memory_mib: peak,
        p95_memory_mib: p95,
        mean_utilization_percent: mean_utilization,
        verdict,
    }
}

/// Saturating: measurements come from MigNode status and Prometheus, any size the API allows.
fn with_headroom(value: u64, percent: u32) -> u64 {
    value.saturating_mul(100 + u64::from(percent)).div_ceil(100)
}

/// The smallest standard profile with at least `memory_mib` and `compute_slices`, smaller than
/// the whole GPU (a `7g` slice takes every compute slice: it gives nothing back).
fn smallest_profile(model: &GpuModel, memory_mib: u64, compute_slices: u32) -> Option<usize> {
    model
        .mig_profiles()
        .filter(|&id| model.profiles[id].kind == ProfileKind::Standard)
        .filter(|&id| u32::from(model.profiles[id].compute_slices) < u32::from(model.compute_slices))
        .filter(|&id| model.profiles[id].memory_mib >= memory_mib)
        .filter(|&id| u32::from(model.profiles[id].compute_slices) >= compute_slices)
        .min_by_key(|&id| (model.profiles[id].memory_mib, model.profiles[id].compute_slices))
}

/// The resource lists (`limits`, `requests`) of `container` that ask for exactly one whole GPU.
pub(crate) fn one_gpu_lists(resources: Option<&ResourceRequirements>) -> Vec<&'static str> {
    let Some(r) = resources else { return Vec::new() };
    [("limits", &r.limits), ("requests", &r.requests)]
        .into_iter()
        .filter(|(_, list)| list.as_ref().is_some_and(|l| l.get(GPU_RESOURCE).is_some_and(|q| q.0 == "1")))
        .map(|(field, _)| field)
        .collect()
}

/// JSON Patch operations replacing `nvidia.com/gpu: 1` by `resource` in each container of the
/// pod spec at `base` that asks for one whole GPU (in limits, and in requests where set). JSON
/// Patch escapes `/` as `~1` (RFC 6901).
pub(crate) fn gpu_to_slice_ops<'r>(
    containers: impl IntoIterator<Item = Option<&'r ResourceRequirements>>,
    base: &str,
    resource: &str,
) -> Vec<serde_json::Value> {
    let mut ops = Vec::new();
    for (i, resources) in containers.into_iter().enumerate() {
        for field in one_gpu_lists(resources) {
            let at = format!("{base}/containers/{i}/resources/{field}");
            ops.push(serde_json::json!({"op": "remove", "path": format!("{at}/nvidia.com~1gpu")}));
            let path = format!("{at}/{}", resource.replace('/', "~1"));
            ops.push(serde_json::json!({"op": "add", "path": path, "value": "1"}));
        }
    }
    ops
}

/// `kubectl patch` of the owner's pod template with [`gpu_to_slice_ops`].
fn patch_command(owner: &Owner, pod: &PodView, resource: &str) -> Option<String> {
    let base = match owner.kind.as_str() {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => "/spec/template/spec",
        "CronJob" => "/spec/jobTemplate/spec/template/spec",
        _ => return None,
    };
    let containers = pod.spec.as_ref()?.containers.iter().map(|c| c.resources.as_ref());
    let ops = gpu_to_slice_ops(containers, base, resource);
    if ops.is_empty() {
        return None;
    }
    let kind = owner.kind.to_lowercase();
    Some(format!(
        "kubectl patch {kind} {} -n {} --type=json -p '{}'",
        owner.name,
        owner.namespace,
        serde_json::Value::Array(ops)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(name: &str, owner: Option<(&str, &str)>, hash: Option<&str>) -> PodView {
        let owners = owner.map(|(kind, name)| {
            serde_json::json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": true}])
        });
        let labels = hash.map(|h| serde_json::json!({"pod-template-hash": h}));
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml", "ownerReferences": owners, "labels": labels},
            "spec": {"containers": [
                {"name": "side", "image": "x"},
                {"name": "model", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]}
        }))
        .unwrap()
    }

    fn usage(pod: &str, peak: u64, utilization: u32, samples: u32) -> PodGpuUsage {
        PodGpuUsage {
            pod: format!("ml/{pod}"),
            gpu: 0,
            model: "H100-80GB".into(),
            since: Time(jiff::Timestamp::UNIX_EPOCH),
            samples,
            peak_memory_mib: peak,
            p95_memory_mib: peak,
            peak_utilization_percent: utilization,
            mean_utilization_percent: utilization,
        }
    }

    #[test]
    fn owners_through_replicasets_to_deployments() {
        assert_eq!(owner_of(&pod("a", Some(("ReplicaSet", "infer-5d9f7")), Some("5d9f7"))).name, "infer");
        let job = owner_of(&pod("b", Some(("Job", "train")), None));
        assert_eq!((job.kind.as_str(), job.name.as_str()), ("Job", "train"));
        assert_eq!(owner_of(&pod("c", None, None)).kind, "Pod");
    }

    #[test]
    fn a_small_model_gets_the_smallest_slice_and_a_patch() {
        let pods = [
            pod("a", Some(("ReplicaSet", "infer-7c")), Some("7c")),
            pod("b", Some(("ReplicaSet", "infer-7c")), Some("7c")),
        ];
        let refs: Vec<&PodView> = pods.iter().collect();
        let measured = [usage("a", 7_000, 5, 40), usage("b", 6_500, 8, 40)];
        let out = recommend(&measured, &refs, Catalog::builtin(), &Settings::default());
        assert_eq!(out.len(), 1);
        let r = &out[0];
        assert_eq!(
            (r.owner.kind.as_str(), r.owner.name.as_str(), r.peak_memory_mib),
            ("Deployment", "infer", 7_000)
        );
        let Verdict::Slice { profile, resource, gpus_now, gpus_as_slices, patch } = &r.verdict else {
            panic!("{:?}", r.verdict)
        };
        // 7,000 MiB + 20% = 8,400 MiB: the 1g.10gb slice (9,984 MiB) of an H100 holds it.
        assert_eq!((profile.as_str(), resource.as_str()), ("1g.10gb", "nvidia.com/mig-1g.10gb"));
        assert_eq!((*gpus_now, *gpus_as_slices, r.verdict.gpus_given_back()), (2, 1, 1));
        let patch = patch.as_deref().unwrap();
        assert!(patch.starts_with("kubectl patch deployment infer -n ml --type=json -p '"), "{patch}");
        assert!(
            patch.contains(
                r#""path":"/spec/template/spec/containers/1/resources/limits/nvidia.com~1mig-1g.10gb""#
            ),
            "{patch}"
        );
        assert!(
            patch.contains(
                r#""op":"remove","path":"/spec/template/spec/containers/1/resources/limits/nvidia.com~1gpu""#
            ),
            "{patch}"
        );
    }

    #[test]
    fn busy_or_big_or_young_groups_say_so() {
        let pods = [pod("busy", None, None), pod("big", None, None), pod("young", None, None)];
        let refs: Vec<&PodView> = pods.iter().collect();
        let measured =
            [usage("busy", 5_000, 50, 40), usage("big", 75_000, 10, 40), usage("young", 5_000, 5, 3)];
        let out = recommend(&measured, &refs, Catalog::builtin(), &Settings::default());
        let verdict =
            |name: &str| out.iter().find(|r| r.owner.name == name).map(|r| r.verdict.clone()).unwrap();
        // 50% of 7 compute slices + 20% = 4.2: only the 7g profile has 5 or more, and it is the
        // whole GPU's compute.
        assert_eq!(verdict("busy"), Verdict::WholeGpu { needed_memory_mib: 6_000, needed_compute_slices: 5 });
        assert_eq!(verdict("big"), Verdict::WholeGpu { needed_memory_mib: 90_000, needed_compute_slices: 1 });
        assert_eq!(verdict("young"), Verdict::TooFewSamples { samples: 3, needed: 30 });
    }
}
