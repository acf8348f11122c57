//! Right-sizing at admission: what the mutating webhook does to a new pod that opted in.
//!
//! A pod asking for `nvidia.com/gpu: 1` whose workload has a slice recommendation gets, in
//! `Enforce` mode, that slice instead (in limits, and in requests where set) and the annotation
//! [`RIGHTSIZED`] saying what was changed and why, so that it can be seen and undone (remove the
//! opt-in label from the pod template). In `DryRun` mode it only gets [`WOULD_RIGHTSIZE`].
//!
//! Once a workload's pods run on slices they are no longer measured, so a recommendation alone
//! would be forgotten: a pod whose workload has no recommendation now takes the decision recorded
//! on its running siblings (same owner) instead.
//!
//! Which pods opted in is first the API server's business: the MutatingWebhookConfiguration
//! sends only pods labelled [`OPT_IN`], or pods of namespaces labelled so (see
//! [`super::webhook`]). A pod sent as opted in by label is checked again here.

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::ResourceExt;
use serde_json::{json, Value};

use geometer_api::resources::{mig_profile, GPU_RESOURCE};
use geometer_api::RightsizingMode;

use super::recommend::{gpu_to_slice_ops, one_gpu_lists, owner_of, Owner, Recommendation, Verdict};
use crate::adapter::PodView;

/// The label a pod (or its namespace) carries to opt in.
pub const OPT_IN: (&str, &str) = ("geometer.dev/rightsizing", "enabled");

/// How a pod opted in, as the webhook configuration that sent it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptIn {
    /// By its own [`OPT_IN`] label.
    Pod,
    /// Its namespace carries the label (the API server's namespaceSelector checked it).
    Namespace,
}

/// Annotation on a pod right-sizing changed: `<old> -> <new> (<why>)`.
pub const RIGHTSIZED: &str = "geometer.dev/rightsized";
/// Annotation on a pod right-sizing would change in DryRun mode.
pub const WOULD_RIGHTSIZE: &str = "geometer.dev/would-rightsize";

/// Whether right-sizing may change `pod` at all, before any recommendation is looked at: it
/// opted in, and asks for exactly one whole GPU in its containers and none in its init
/// containers (a slice for the main container would leave the init container's GPU, which a
/// node in MIG mode does not have).
pub fn candidate(pod: &Pod, opt_in: OptIn) -> bool {
    if opt_in == OptIn::Pod && pod.labels().get(OPT_IN.0).map(String::as_str) != Some(OPT_IN.1) {
        return false;
    }
    let Some(spec) = pod.spec.as_ref() else { return false };
    let init_gpus = spec.init_containers.iter().flatten().any(|c| {
        c.resources.as_ref().is_some_and(|r| {
            [&r.limits, &r.requests].into_iter().flatten().any(|l| l.contains_key(GPU_RESOURCE))
        })
    });
    !init_gpus
        && spec.containers.iter().any(|c| !one_gpu_lists(c.resources.as_ref()).is_empty())
        && !asks_for_several_gpus(spec)
}

/// The JSON Patch (RFC 6902) for a new pod, or `None` when right-sizing leaves it alone. A slice
/// of a profile not in `allowed_profiles` (when it names any) is never asked for.
pub fn admit(
    pod: &Pod,
    mode: RightsizingMode,
    opt_in: OptIn,
    allowed_profiles: &[String],
    recommendations: &[Recommendation],
    siblings: &[&PodView],
) -> Option<Value> {
    if !candidate(pod, opt_in) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let owner = owner_of(pod);
    let (resource, why) = decided(&owner, recommendations, siblings)?;
    let profile = mig_profile(&resource)?;
    if !allowed_profiles.is_empty() && !allowed_profiles.iter().any(|p| p == profile) {
        return None;
    }
    let note = format!("{GPU_RESOURCE}=1 -> {resource}=1 ({why})");
    let mut ops = Vec::new();
    let annotation = match mode {
        RightsizingMode::DryRun => WOULD_RIGHTSIZE,
        RightsizingMode::Enforce => {
            ops.extend(gpu_to_slice_ops(
                spec.containers.iter().map(|c| c.resources.as_ref()),
                "/spec",
                &resource,
            ));
            RIGHTSIZED
        }
    };
    if pod.metadata.annotations.is_none() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", annotation.replace('/', "~1")), "value": note}));
    Some(Value::Array(ops))
}

/// Whether a container asks for whole GPUs other than exactly one.
fn asks_for_several_gpus(spec: &PodSpec) -> bool {
    spec.containers.iter().filter_map(|c| c.resources.as_ref()).any(|r| {
        [&r.limits, &r.requests]
            .into_iter()
            .flatten()
            .any(|l| l.get(GPU_RESOURCE).is_some_and(|q| q.0 != "1"))
    })
}

/// The slice resource for `owner` and why: its recommendation, when every GPU model it was
/// measured on recommends the same resource; otherwise what its running siblings were given.
fn decided(
    owner: &Owner,
    recommendations: &[Recommendation],
    siblings: &[&PodView],
) -> Option<(String, String)> {
    let slices: Vec<(&String, &Recommendation)> = recommendations
        .iter()
        .filter(|r| &r.owner == owner)
        .filter_map(|r| match &r.verdict {
            Verdict::Slice { resource, .. } => Some((resource, r)),
            _ => None,
        })
        .collect();
    let measured = recommendations.iter().filter(|r| &r.owner == owner).count();
    if let Some((resource, r)) = slices.first() {
        if slices.len() == measured && slices.iter().all(|(other, _)| other == resource) {
            let why = format!(
                "{}/{} measured on {}: peak {} MiB, {}% busy",
                owner.kind.to_lowercase(),
                owner.name,
                r.model,
                r.peak_memory_mib,
                r.mean_utilization_percent
            );
            return Some(((*resource).clone(), why));
        }
        return None;
    }
    if measured > 0 {
        return None;
    }
    siblings.iter().filter(|s| owner_of(**s) == *owner).find_map(|s| {
        let note = s.annotations().get(RIGHTSIZED)?;
        let (_, rest) = note.split_once(" -> ")?;
        let (resource, _) = rest.split_once('=')?;
        Some((
            resource.to_string(),
            format!("as {}/{} was right-sized before", owner.kind.to_lowercase(), owner.name),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, opted_in: bool, gpus: &str, annotations: Option<Value>) -> Pod {
        let labels = if opted_in {
            json!({"pod-template-hash": "7c", OPT_IN.0: OPT_IN.1})
        } else {
            json!({"pod-template-hash": "7c"})
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "labels": labels, "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "chat-7c", "uid": "u", "controller": true}]},
            "spec": {"containers": [
                {"name": "side", "image": "x"},
                {"name": "model", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus, "cpu": "1"}}}
            ]}
        }))
        .unwrap()
    }

    fn recommendation(verdict: Verdict) -> Recommendation {
        Recommendation {
            owner: Owner { kind: "Deployment".into(), namespace: "ml".into(), name: "chat".into() },
            model: "H100-80GB".into(),
            pods: vec!["ml/chat-7c-a".into()],
            samples: 40,
            peak_memory_mib: 7_000,
            p95_memory_mib: 6_900,
            mean_utilization_percent: 5,
            verdict,
        }
    }

    fn slice() -> Verdict {
        Verdict::Slice {
            profile: "1g.10gb".into(),
            resource: "nvidia.com/mig-1g.10gb".into(),
            gpus_now: 2,
            gpus_as_slices: 1,
            patch: None,
        }
    }

    const ENFORCE: RightsizingMode = RightsizingMode::Enforce;

    /// The pod after the patch.
    fn patched(pod: &Pod, patch: Value) -> Pod {
        let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
        let mut value = serde_json::to_value(pod).unwrap();
        json_patch::patch(&mut value, &patch).unwrap();
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_opted_in_pod_gets_the_recommended_slice_and_says_so() {
        let new = pod("chat-7c-b", true, "1", None);
        let out =
            patched(&new, admit(&new, ENFORCE, OptIn::Pod, &[], &[recommendation(slice())], &[]).unwrap());
        let r = out.spec.unwrap().containers[1].resources.clone().unwrap();
        for list in [r.limits.unwrap(), r.requests.unwrap()] {
            assert!(!list.contains_key("nvidia.com/gpu"));
            assert_eq!(list["nvidia.com/mig-1g.10gb"].0, "1");
        }
        assert_eq!(
            out.metadata.annotations.unwrap()[RIGHTSIZED],
            "nvidia.com/gpu=1 -> nvidia.com/mig-1g.10gb=1 (deployment/chat measured on H100-80GB: peak 7000 MiB, 5% busy)"
        );
    }

    #[test]
    fn dry_run_only_annotates() {
        let new = pod("chat-7c-b", true, "1", Some(json!({"team": "chat"})));
        let out = patched(
            &new,
            admit(&new, RightsizingMode::DryRun, OptIn::Pod, &[], &[recommendation(slice())], &[]).unwrap(),
        );
        let annotations = out.metadata.annotations.clone().unwrap();
        assert!(annotations[WOULD_RIGHTSIZE].contains("nvidia.com/mig-1g.10gb"));
        assert_eq!(annotations["team"], "chat");
        assert_eq!(
            out.spec.unwrap().containers[1].resources.clone().unwrap().limits.unwrap()["nvidia.com/gpu"].0,
            "1"
        );
    }

    #[test]
    fn pods_not_opted_in_or_not_one_gpu_or_not_recommended_a_slice_are_left_alone() {
        let slice = [recommendation(slice())];
        assert_eq!(
            admit(&pod("a", false, "1", None), ENFORCE, OptIn::Pod, &[], &slice, &[]),
            None,
            "no opt-in label"
        );
        assert!(
            admit(&pod("a", false, "1", None), ENFORCE, OptIn::Namespace, &[], &slice, &[]).is_some(),
            "its namespace opted in"
        );
        assert_eq!(
            admit(&pod("a", true, "2", None), ENFORCE, OptIn::Pod, &[], &slice, &[]),
            None,
            "two GPUs"
        );
        let whole =
            [recommendation(Verdict::WholeGpu { needed_memory_mib: 90_000, needed_compute_slices: 7 })];
        assert_eq!(
            admit(&pod("a", true, "1", None), ENFORCE, OptIn::Pod, &[], &whole, &[]),
            None,
            "needs the GPU"
        );
        assert_eq!(
            admit(&pod("a", true, "1", None), ENFORCE, OptIn::Pod, &[], &[], &[]),
            None,
            "never measured"
        );
        let not_allowed = ["2g.20gb".to_string()];
        assert_eq!(
            admit(&pod("a", true, "1", None), ENFORCE, OptIn::Pod, &not_allowed, &slice, &[]),
            None,
            "profile not allowed"
        );
        let mut with_init = pod("a", true, "1", None);
        with_init.spec.as_mut().unwrap().init_containers = Some(vec![serde_json::from_value(
            json!({"name": "warm", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}),
        )
        .unwrap()]);
        assert_eq!(
            admit(&with_init, ENFORCE, OptIn::Pod, &[], &slice, &[]),
            None,
            "an init container holds the GPU"
        );
    }

    #[test]
    fn a_workload_no_longer_measured_keeps_the_decision_of_its_running_pods() {
        let earlier = pod(
            "chat-7c-a",
            true,
            "0",
            Some(
                json!({RIGHTSIZED: "nvidia.com/gpu=1 -> nvidia.com/mig-2g.20gb=1 (deployment/chat measured on H100-80GB: peak 15000 MiB, 9% busy)"}),
            ),
        );
        let new = pod("chat-7c-c", true, "1", None);
        let out =
            patched(&new, admit(&new, ENFORCE, OptIn::Pod, &[], &[], &[&PodView::from(&earlier)]).unwrap());
        let limits = out.spec.unwrap().containers[1].resources.clone().unwrap().limits.unwrap();
        assert_eq!(limits["nvidia.com/mig-2g.20gb"].0, "1");
        assert!(out.metadata.annotations.unwrap()[RIGHTSIZED]
            .contains("as deployment/chat was right-sized before"));
    }
}
