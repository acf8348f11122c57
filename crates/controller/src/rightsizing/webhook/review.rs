//! One AdmissionReview: the API server's question about a new pod, answered from the
//! controller's caches with [`admit`]'s decision.
//!
//! Every answer allows the pod: right-sizing only ever patches it. A review that cannot be read
//! is answered with an error status, which the API server treats as the webhook failing; with
//! `failurePolicy: Ignore` the pod is then created unchanged.

use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use kube::ResourceExt;

use geometer_api::{MigNode, MigPolicy, PodGpuUsage, Rightsizing};
use geometer_solver::catalog::Catalog;

use crate::rightsizing::admission::{admit, OptIn};
use crate::rightsizing::recommend::{recommend, Settings};

/// What a review reads: the policies, what the agents measured, and the pods of the namespace.
pub struct Inputs<'a> {
    pub policies: Vec<&'a MigPolicy>,
    pub mignodes: Vec<&'a MigNode>,
    /// Pods of the new pod's namespace (its running siblings, and the measured pods).
    pub pods: Vec<&'a Pod>,
    pub catalog: &'a Catalog,
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

/// The policy whose `rightsizing` applies: the first by name that sets it.
pub fn rightsizing<'a>(policies: &[&'a MigPolicy]) -> Option<&'a Rightsizing> {
    let mut setting: Vec<&MigPolicy> =
        policies.iter().copied().filter(|p| p.spec.rightsizing.is_some()).collect();
    setting.sort_by_key(|p| p.name_any());
    setting.first().and_then(|p| p.spec.rightsizing.as_ref())
}

/// The answer to `request`, and what it did.
pub fn respond(
    request: &AdmissionRequest<Pod>,
    opt_in: OptIn,
    inputs: &Inputs<'_>,
) -> (AdmissionReview<DynamicObject>, Outcome) {
    let allowed = AdmissionResponse::from(request);
    let unchanged = || (AdmissionResponse::from(request).into_review(), Outcome::Unchanged);
    let (Operation::Create, Some(pod)) = (&request.operation, &request.object) else {
        return unchanged();
    };
    let Some(policy) = rightsizing(&inputs.policies) else {
        return unchanged();
    };
    // A pod made from a template has no name yet, and may have no namespace in its metadata:
    // the request carries the namespace.
    let mut pod = pod.clone();
    if pod.metadata.namespace.is_none() {
        pod.metadata.namespace = request.namespace.clone();
    }
    let usage: Vec<PodGpuUsage> = inputs.mignodes.iter().flat_map(|m| m.usage().iter().cloned()).collect();
    let settings = Settings {
        headroom_percent: policy.headroom_percent,
        min_samples: policy.min_samples,
        percentile: false,
    };
    let recommendations = recommend(&usage, &inputs.pods, inputs.catalog, &settings);
    let Some(patch) = admit(&pod, policy.mode, opt_in, &recommendations, &inputs.pods) else {
        return unchanged();
    };
    let outcome = match policy.mode {
        geometer_api::RightsizingMode::Enforce => Outcome::Rightsized,
        geometer_api::RightsizingMode::DryRun => Outcome::WouldRightsize,
    };
    let patch: json_patch::Patch = match serde_json::from_value(patch) {
        Ok(patch) => patch,
        Err(e) => {
            tracing::error!(error = %e, "right-sizing built a JSON patch that does not read back; pod left alone");
            return unchanged();
        }
    };
    match allowed.with_patch(patch) {
        Ok(response) => (response.into_review(), outcome),
        Err(e) => {
            tracing::error!(error = %e, "cannot serialize the right-sizing patch; pod left alone");
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
        let (pod, node) = (measured_pod(), mignode());
        let inputs = Inputs {
            policies: vec![policy],
            mignodes: vec![&node],
            pods: vec![&pod],
            catalog: Catalog::builtin(),
        };
        let (review, outcome) = respond(&request(body).unwrap(), OptIn::Pod, &inputs);
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
    fn a_body_that_is_not_a_review_is_refused_with_why() {
        assert!(request(b"{\"kind\": \"Pod\"").unwrap_err().starts_with("not an AdmissionReview of a Pod"));
        assert_eq!(
            request(b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\"}").unwrap_err(),
            "the AdmissionReview has no request"
        );
    }
}
