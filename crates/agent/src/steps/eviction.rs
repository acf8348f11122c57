//! The drain: evicting, through the Eviction API, only the pods on instances that go.
//!
//! The eviction request is built here rather than with `kube::Api::evict`, because kube 5 sends
//! `{"delete_options": ..., "metadata": {"name": ...}}`: the API server does not know the
//! snake_case key and drops the options. We send a proper `policy/v1` `Eviction` whose
//! `deleteOptions.preconditions.uid` pins the pod we looked at, so a replacement pod that took
//! the same name (a StatefulSet's) is never evicted on the strength of its predecessor's check.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use serde_json::Value;

use geometer_api::do_not_disrupt::{self as disruption, Blocked, Verdict};

/// How a drain behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainSettings {
    /// Pod annotation keys that forbid eviction.
    pub do_not_disrupt_keys: Vec<String>,
    /// Longest the drain may wait for pods to leave before the change fails.
    pub timeout: Duration,
}

impl Default for DrainSettings {
    fn default() -> Self {
        DrainSettings {
            do_not_disrupt_keys: geometer_api::DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS
                .iter()
                .map(|k| k.to_string())
                .collect(),
            timeout: Duration::from_secs(600),
        }
    }
}

/// Where one pod that must leave stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PodDrain {
    /// Not in the API any more; the kubelet has yet to release its device.
    Gone,
    /// Being deleted (evicted already, or by someone else).
    Terminating,
    /// Protected by a do-not-disrupt annotation: never evicted.
    Protected(Blocked),
    /// The policy allows no evictions: waited for, never evicted.
    Forbidden { why: String },
    /// May be evicted now.
    Evictable(Box<Pod>),
}

impl PodDrain {
    /// The pod may not be evicted now (so nothing is evicted: see the drain step).
    pub(crate) fn blocks(&self) -> bool {
        matches!(self, PodDrain::Protected(_) | PodDrain::Forbidden { .. })
    }
}

/// Where `pod` stands. `eviction_forbidden` gives the reason when the policy allows no
/// evictions.
pub(crate) fn classify(
    pod: Option<Pod>,
    keys: &[String],
    now: Timestamp,
    eviction_forbidden: Option<&str>,
) -> PodDrain {
    let Some(pod) = pod else { return PodDrain::Gone };
    if pod.metadata.deletion_timestamp.is_some() {
        return PodDrain::Terminating;
    }
    // A finished pod holds its device no more than a gone one; evicting it is harmless, but
    // it is also pointless, and a protected finished pod must not stall the drain.
    if matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
        return PodDrain::Terminating;
    }
    match disruption::evaluate(&pod, keys, now) {
        Verdict::Blocked(b) => PodDrain::Protected(b),
        Verdict::Allowed => match eviction_forbidden {
            Some(why) => PodDrain::Forbidden { why: why.to_string() },
            None => PodDrain::Evictable(Box::new(pod)),
        },
    }
}

/// The body of an eviction of `pod`: `policy/v1` `Eviction`, pinned to the pod's UID.
pub(crate) fn eviction_body(pod: &Pod) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            ..Default::default()
        },
        delete_options: Some(DeleteOptions {
            preconditions: pod
                .metadata
                .uid
                .clone()
                .map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
            ..Default::default()
        }),
    }
}

/// What the API server said to an eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// Accepted: the pod is being deleted.
    Evicted,
    /// Refused because it would violate a PodDisruptionBudget (429): retry with backoff.
    Refused { message: String },
    /// The pod is gone, or was replaced by one with another UID (404, 409).
    Gone,
}

/// POSTs the eviction of `pod` (which must have a name and namespace).
pub async fn evict(client: &kube::Client, pod: &Pod) -> Result<EvictionOutcome, kube::Error> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let body = serde_json::to_vec(&eviction_body(pod)).map_err(kube::Error::SerdeError)?;
    let request = http::Request::post(format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    match client.request::<Value>(request).await {
        Ok(_) => Ok(EvictionOutcome::Evicted),
        Err(kube::Error::Api(status)) if status.code == 429 => {
            Ok(EvictionOutcome::Refused { message: status.message.clone() })
        }
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Ok(EvictionOutcome::Gone)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("train-0".into());
        p.metadata.namespace = Some("ml".into());
        p.metadata.uid = Some("uid-1".into());
        p.metadata.annotations =
            Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>());
        p.status = Some(PodStatus { phase: Some("Running".into()), ..Default::default() });
        p
    }

    #[test]
    fn the_eviction_body_is_policy_v1_pinned_to_the_uid() {
        let body = serde_json::to_value(eviction_body(&pod(&[]))).unwrap();
        assert_eq!(
            body,
            json!({
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "train-0", "namespace": "ml"},
                "deleteOptions": {"preconditions": {"uid": "uid-1"}},
            })
        );
    }

    #[test]
    fn pods_are_classified_by_presence_deletion_phase_and_protection() {
        let now = Timestamp::UNIX_EPOCH;
        let keys = DrainSettings::default().do_not_disrupt_keys;
        assert_eq!(classify(None, &keys, now, None), PodDrain::Gone);
        let mut deleting = pod(&[]);
        deleting.metadata.deletion_timestamp = Some(Time(now));
        assert_eq!(classify(Some(deleting), &keys, now, None), PodDrain::Terminating);
        let mut done = pod(&[("geometer.dev/do-not-disrupt", "true")]);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(classify(Some(done), &keys, now, None), PodDrain::Terminating);
        assert!(matches!(
            classify(Some(pod(&[("karpenter.sh/do-not-disrupt", "true")])), &keys, now, None),
            PodDrain::Protected(_)
        ));
        assert!(matches!(classify(Some(pod(&[])), &keys, now, None), PodDrain::Evictable(_)));
        let forbidden = classify(Some(pod(&[])), &keys, now, Some("MigPolicy p allows no evictions"));
        assert!(forbidden.blocks() && matches!(forbidden, PodDrain::Forbidden { .. }));
    }
}
