//! One AdmissionReview: the API server's question about a new pod, answered from the
//! controller's caches with [`admit`]'s decision.
//!
//! Every answer allows the pod: right-sizing only ever patches it. A review that cannot be read
//! is answered with an error status, which the API server treats as the webhook failing; with
//! `failurePolicy: Ignore` the pod is then created unchanged.

use k8s_openapi::api::core::v1::Pod;

use crate::adapter::PodView;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use kube::ResourceExt;

use std::sync::Arc;

use geometer_api::{GpuMode, MigNode, MigPolicy, PodGpuUsage, PolicyMode, Rightsizing, RightsizingMode};
use geometer_solver::catalog::Catalog;

use crate::rightsizing::admission::{admit, candidate, OptIn};
use crate::rightsizing::recommend::{recommend, Settings};

/// What a review reads beyond the policies, loaded only for a pod right-sizing may change:
/// what the agents measured, and the pods of the new pod's namespace (its running siblings, and
/// the measured pods).
pub struct Measured {
    pub mignodes: Vec<Arc<MigNode>>,
    pub pods: Vec<Arc<PodView>>,
}

/// What the webhook did to a pod, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Enforce: the pod now asks for a slice.
    Rightsized,
    /// DryRun: the pod was annotated with the slice it would get.
    WouldRightsize,
    /// Left alone (not one whole GPU, no recommendation, right-sizing off).
    Unchanged,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Rightsized => "rightsized",
            Outcome::WouldRightsize => "would_rightsize",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// The request inside an AdmissionReview body, or why it is not one.
pub fn request(body: &[u8]) -> Result<AdmissionRequest<Pod>, String> {
    let review: AdmissionReview<Pod> =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview of a Pod: {e}"))?;
    review.try_into().map_err(|_| "the AdmissionReview has no request".to_string())
}

/// The policy whose `rightsizing` applies, and it: the first policy by name that sets it.
pub fn rightsizing<'a>(policies: &[&'a MigPolicy]) -> Option<(&'a MigPolicy, &'a Rightsizing)> {
    let mut setting: Vec<(&MigPolicy, &Rightsizing)> =
        policies.iter().filter_map(|p| Some((*p, p.spec.rightsizing.as_ref()?))).collect();
    setting.sort_by_key(|(p, _)| p.name_any());
    setting.first().copied()
}

/// The answer to `request`, and what it did. `measured` is called only for a pod right-sizing
/// may change under a policy that turns it on (most reviews never read the pod cache).
///
/// Enforce only annotates, as DryRun does, where the policy never applies plans (its `mode` is
/// DryRun) or may not put GPUs in MIG mode (`allowedModes`): no slice would be made for the pod.
pub fn respond(
    request: &AdmissionRequest<Pod>,
    opt_in: OptIn,
    policies: &[&MigPolicy],
    catalog: &Catalog,
    measured: impl FnOnce(&str) -> Measured,
) -> (AdmissionReview<DynamicObject>, Outcome) {
    let unchanged = || (AdmissionResponse::from(request).into_review(), Outcome::Unchanged);
    let (Operation::Create, Some(pod), Some(namespace)) =
        (&request.operation, &request.object, &request.namespace)
    else {
        return unchanged();
    };
    let Some((policy, rightsizing)) = rightsizing(policies) else {
        return unchanged();
    };
    if !candidate(pod, opt_in) {
        return unchanged();
    }
    // A pod made from a template has no name yet, and may have no namespace in its metadata:
    // the request carries the namespace.
    let mut pod = pod.clone();
    pod.metadata.namespace = Some(namespace.clone());
    let Measured { mignodes, pods } = measured(namespace);
    let usage: Vec<PodGpuUsage> = mignodes.iter().flat_map(|m| m.usage().iter().cloned()).collect();
    let pods: Vec<&PodView> = pods.iter().map(|p| &**p).collect();
    let settings = Settings {
        headroom_percent: rightsizing.headroom_percent,
        min_samples: rightsizing.min_samples,
        percentile: false,
    };
    let recommendations = recommend(&usage, &pods, catalog, &settings);
    let makes_slices = policy.spec.mode != PolicyMode::DryRun
        && (policy.spec.allowed_modes.is_empty() || policy.spec.allowed_modes.contains(&GpuMode::Mig));
    let mode = if makes_slices { rightsizing.mode } else { RightsizingMode::DryRun };
    let allowed = &policy.spec.allowed_profiles;
    let Some(patch) = admit(&pod, mode, opt_in, allowed, &recommendations, &pods) else {
        return unchanged();
    };
    let outcome = match mode {
        RightsizingMode::Enforce => Outcome::Rightsized,
        RightsizingMode::DryRun => Outcome::WouldRightsize,
    };
    let patched = serde_json::from_value::<json_patch::Patch>(patch)
        .map_err(|e| e.to_string())
        .and_then(|patch| AdmissionResponse::from(request).with_patch(patch).map_err(|e| e.to_string()));
    match patched {
        Ok(response) => (response.into_review(), outcome),
        Err(e) => {
            tracing::error!(error = %e, "right-sizing built a patch it cannot send; pod left alone");
            unchanged()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// An AdmissionReview as kube-apiserver sends it for a pod a ReplicaSet creates.
    fn body(operation: &str, labels: Value) -> Vec<u8> {
        let pod = json!({"metadata": {"generateName": "chat-7c-", "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "chat-7c", "uid": "r", "controller": true}]},
            "spec": {"containers": [{"name": "model", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"}, "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ml", "operation": operation, "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": pod, "dryRun": false}}))
        .unwrap()
    }

    fn measured_pod() -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "chat-7c-a", "namespace": "ml", "labels": {"pod-template-hash": "7c"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "chat-7c", "uid": "r", "controller": true}]}}))
        .unwrap()
    }

    fn mignode() -> MigNode {
        serde_json::from_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode", "metadata": {"name": "n"}, "spec": {},
            "status": {"usage": [{"pod": "ml/chat-7c-a", "gpu": 0, "model": "H100-80GB", "since": "2026-12-04T10:00:00Z",
                "samples": 40, "peakMemoryMib": 7000, "p95MemoryMib": 6900, "peakUtilizationPercent": 9, "meanUtilizationPercent": 5}]}}))
        .unwrap()
    }

    fn policy(rightsizing: Option<Value>) -> MigPolicy {
        let mut spec = json!({"mode": "Auto"});
        if let Some(r) = rightsizing {
            spec["rightsizing"] = r;
        }
        serde_json::from_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "pool"}, "spec": spec}))
            .unwrap()
    }

    fn answer(body: &[u8], policy: &MigPolicy) -> (Value, Outcome) {
        let measured = |namespace: &str| {
            assert_eq!(namespace, "ml", "the pods of the request's namespace are read");
            Measured {
                mignodes: vec![Arc::new(mignode())],
                pods: vec![Arc::new(PodView::from(&measured_pod()))],
            }
        };
        let request = request(body).unwrap();
        let (review, outcome) = respond(&request, OptIn::Pod, &[policy], Catalog::builtin(), measured);
        (serde_json::to_value(review).unwrap(), outcome)
    }

    #[test]
    fn an_opted_in_replica_is_answered_with_the_slice_patch() {
        let enforce = policy(Some(json!({"mode": "Enforce"})));
        let (review, outcome) = answer(
            &body("CREATE", json!({"pod-template-hash": "7c", "geometer.dev/rightsizing": "enabled"})),
            &enforce,
        );
        assert_eq!(outcome, Outcome::Rightsized);
        let response = &review["response"];
        assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002", "the answer names the request");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        // kube-rs writes the patch's bytes as a JSON array, which the API server reads as []byte.
        let patch: Vec<u8> = serde_json::from_value(response["patch"].clone()).unwrap();
        let patch = String::from_utf8(patch).unwrap();
        assert!(patch.contains("nvidia.com~1mig-1g.10gb"), "{patch}");
    }

    #[test]
    fn without_a_policy_setting_or_on_update_the_pod_is_allowed_unchanged() {
        let labels = json!({"pod-template-hash": "7c", "geometer.dev/rightsizing": "enabled"});
        let (review, outcome) = answer(&body("CREATE", labels.clone()), &policy(None));
        assert_eq!((outcome, review["response"]["allowed"].clone()), (Outcome::Unchanged, json!(true)));
        assert!(review["response"].get("patch").is_none());
        let enforce = policy(Some(json!({"mode": "Enforce"})));
        assert_eq!(answer(&body("UPDATE", labels), &enforce).1, Outcome::Unchanged);
    }

    #[test]
    fn enforce_only_annotates_where_the_policy_makes_no_slices() {
        let labels = json!({"pod-template-hash": "7c", "geometer.dev/rightsizing": "enabled"});
        let mut dry_run = policy(Some(json!({"mode": "Enforce"})));
        dry_run.spec.mode = PolicyMode::DryRun;
        assert_eq!(answer(&body("CREATE", labels.clone()), &dry_run).1, Outcome::WouldRightsize);
        let mut whole_only = policy(Some(json!({"mode": "Enforce"})));
        whole_only.spec.allowed_modes = vec![GpuMode::Whole];
        assert_eq!(answer(&body("CREATE", labels), &whole_only).1, Outcome::WouldRightsize);
    }

    #[test]
    fn a_body_that_is_not_a_review_is_refused_with_why() {
        assert!(request(b"{\"kind\": \"Pod\"").unwrap_err().starts_with("not an AdmissionReview of a Pod"));
        assert_eq!(
            request(b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\"}").unwrap_err(),
            "the AdmissionReview has no request"
        );
    }
}
