//! The node agent's evictions, bound to its node: a validating webhook the controller serves
//! beside right-sizing (`deploy/base/agent-eviction-webhook.yaml` sends it only the agent
//! ServiceAccount's evictions). An agent may evict only the pods bound to the node its token
//! names: the API server puts the node of the pod a ServiceAccount token is bound to in the
//! request's user info (`authentication.kubernetes.io/node-name`, Kubernetes 1.32+;
//! repository `kubernetes/kubernetes`, path
//! `staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go`). The rest of the
//! agent's writes (its Node, its MigNode) are checked by a ValidatingAdmissionPolicy
//! (`deploy/base/agent-node-policy.yaml`); an Eviction names a pod, not its node, and a policy
//! cannot look the pod up, so this check needs the controller's pod cache.
//!
//! This is the guarantee Kubernetes gives kubelets with the NodeRestriction admission plugin
//! (repository `kubernetes/kubernetes`, path `plugin/pkg/admission/noderestriction/admission.go`,
//! `admitPodEviction`): a node may evict only its own pods.

use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::DynamicObject;

/// Where the API server sends the agent's evictions.
pub const PATH: &str = "/validate/agent-eviction";

/// The user-info key holding the node of the pod a ServiceAccount token is bound to.
pub const NODE_NAME: &str = "authentication.kubernetes.io/node-name";

/// What the controller knows of the pod an eviction names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodNode {
    /// Bound to this node.
    Bound(String),
    /// Not bound to any node yet.
    Unbound,
    /// Not in the controller's cache (just created, or gone).
    Unknown,
}

/// The answer to one eviction by the agent: allowed when the pod is bound to the agent's own
/// node. `pod_node` looks the pod up by namespace and name.
pub fn review(
    request: &AdmissionRequest<DynamicObject>,
    pod_node: impl Fn(&str, &str) -> PodNode,
) -> AdmissionReview<DynamicObject> {
    let answer = AdmissionResponse::from(request);
    let agent_node = request
        .user_info
        .extra
        .as_ref()
        .and_then(|extra| extra.get(NODE_NAME))
        .and_then(|nodes| nodes.first())
        .filter(|node| !node.is_empty());
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let pod = format!("{namespace}/{}", request.name);
    let Some(agent_node) = agent_node else {
        return denied(
            answer,
            403,
            format!(
                "the agent's token names no node, so it may evict nothing (pod {pod}): the agent runs with the \
                 pod-bound ServiceAccount token of its DaemonSet's pod (Kubernetes 1.32+)"
            ),
        );
    };
    match pod_node(namespace, &request.name) {
        PodNode::Bound(node) if &node == agent_node => answer.into_review(),
        PodNode::Bound(node) => denied(
            answer,
            403,
            format!("the agent of node {agent_node} may evict only pods on its own node, not pod {pod} on node {node}"),
        ),
        PodNode::Unbound => denied(
            answer,
            403,
            format!("the agent of node {agent_node} may evict only pods on its own node; pod {pod} is on no node"),
        ),
        // 429 is what the agent retries with backoff; the controller's cache catches up.
        PodNode::Unknown => denied(
            answer,
            429,
            format!("pod {pod} is not in Geometer's controller cache yet, so its node is not known; retry"),
        ),
    }
}

fn denied(answer: AdmissionResponse, code: u16, message: String) -> AdmissionReview<DynamicObject> {
    let mut answer = answer.deny(message);
    answer.result.code = code;
    answer.result.reason = if code == 429 { "TooManyRequests" } else { "Forbidden" }.into();
    answer.into_review()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An eviction of `ml/train` by a user whose token names `node` (none: no node claim).
    fn eviction_by(node: Option<&str>) -> AdmissionRequest<DynamicObject> {
        let extra = node.map(|n| json!({ NODE_NAME: [n] })).unwrap_or(json!({}));
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "subResource": "eviction",
                "name": "train",
                "namespace": "ml",
                "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:geometer-system:geometer-agent", "extra": extra},
                "object": {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "train", "namespace": "ml"}},
                "dryRun": false,
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    fn answer(node: Option<&str>, pod: PodNode) -> (bool, u16, String) {
        let review = review(&eviction_by(node), |ns, name| {
            assert_eq!((ns, name), ("ml", "train"));
            pod.clone()
        });
        let response = review.response.unwrap();
        (response.allowed, response.result.code, response.result.message)
    }

    #[test]
    fn an_agent_evicts_only_the_pods_of_its_own_node() {
        assert!(answer(Some("gpu-a"), PodNode::Bound("gpu-a".into())).0);
        let (allowed, code, message) = answer(Some("gpu-a"), PodNode::Bound("gpu-b".into()));
        assert!(!allowed);
        assert_eq!(code, 403);
        assert!(
            message.contains("pod ml/train on node gpu-b") && message.contains("agent of node gpu-a"),
            "{message}"
        );
        assert!(!answer(Some("gpu-a"), PodNode::Unbound).0);
    }

    #[test]
    fn a_token_without_a_node_evicts_nothing() {
        let (allowed, code, message) = answer(None, PodNode::Bound("gpu-a".into()));
        assert!(!allowed);
        assert_eq!(code, 403);
        assert!(message.contains("names no node"), "{message}");
    }

    #[test]
    fn a_pod_the_cache_has_not_seen_is_retried() {
        let (allowed, code, message) = answer(Some("gpu-a"), PodNode::Unknown);
        assert!(!allowed);
        assert_eq!(code, 429, "the agent retries a 429 with backoff");
        assert!(message.contains("retry"), "{message}");
    }
}
