//! What the API server itself recorded: its audit log (`--audit-policy-file`,
//! `--audit-log-path`), kept for pod evictions, the node agent's Node patches, who wrote pod
//! statuses, and every request of Geometer's two ServiceAccounts, so that tests count evictions
//! as the server answered them, whoever asked, see the label changes the agent made and which
//! identity a simulated kubelet reported with, and compare what the controller and the agent
//! did with what their RBAC grants, as the server's RBAC authorizer decided it
//! (kubernetes/website `content/en/docs/tasks/debug/debug-cluster/audit.md`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::deploy::rbac::Access;

const POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create]
    resources:
      - group: \"\"
        resources: [pods/eviction]
  - level: Metadata
    verbs: [patch, update]
    resources:
      - group: \"\"
        resources: [pods/status]
  - level: Request
    users: [\"system:serviceaccount:geometer-system:geometer-agent\"]
    verbs: [patch]
    resources:
      - group: \"\"
        resources: [nodes]
  - level: Metadata
    users:
      - \"system:serviceaccount:geometer-system:geometer-agent\"
      - \"system:serviceaccount:geometer-system:geometer-controller\"
  - level: None
";

pub(crate) fn policy_file(dir: &Path) -> PathBuf {
    dir.join("audit-policy.yaml")
}

pub(crate) fn log_file(dir: &Path) -> PathBuf {
    dir.join("audit.log")
}

pub(crate) fn write_policy(dir: &Path) {
    std::fs::write(policy_file(dir), POLICY).expect("audit policy");
}

/// One eviction request as the API server answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub namespace: String,
    pub pod: String,
    /// 201 evicted; 429 refused by a PodDisruptionBudget; others are errors.
    pub code: u16,
    pub user: String,
    /// RFC 3339 with microseconds, as the server wrote it.
    pub at: String,
}

impl Eviction {
    pub fn granted(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

/// Every event of the audit log so far, in order.
fn entries(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log_file(dir)).unwrap_or_default();
    text.lines().filter_map(|line| serde_json::from_str::<Value>(line).ok()).collect()
}

/// One API request of a user, as the API server's authorizer saw it.
#[derive(Debug, Clone)]
pub struct Audited {
    pub access: Access,
    /// The authorizer (RBAC, for a ServiceAccount) refused it: 403 before admission.
    pub denied: bool,
}

/// Every resource request `user` made (not impersonated), in order; requests for
/// non-resource URLs (discovery, `/version`) are left out.
pub(crate) fn requests_of(dir: &Path, user: &str) -> Vec<Audited> {
    entries(dir)
        .into_iter()
        .filter(|e| e["user"]["username"] == user && e["impersonatedUser"].is_null())
        .filter_map(|e| {
            let object = &e["objectRef"];
            let text = |v: &Value| v.as_str().map(str::to_string);
            let resource = match text(&object["subresource"]) {
                Some(sub) => format!("{}/{sub}", text(&object["resource"])?),
                None => text(&object["resource"])?,
            };
            let access = Access {
                group: text(&object["apiGroup"]).unwrap_or_default(),
                resource,
                verb: text(&e["verb"])?,
                namespace: text(&object["namespace"]),
                name: text(&object["name"]),
            };
            let denied = e["annotations"]["authorization.k8s.io/decision"] == "forbid";
            Some(Audited { access, denied })
        })
        .collect()
}

/// Every eviction in the audit log so far, in order.
pub(crate) fn evictions(dir: &Path) -> Vec<Eviction> {
    entries(dir)
        .into_iter()
        .filter(|e| e["stage"] == "ResponseComplete" && e["objectRef"]["subresource"] == "eviction")
        .map(|e| Eviction {
            namespace: e["objectRef"]["namespace"].as_str().unwrap_or_default().to_string(),
            pod: e["objectRef"]["name"].as_str().unwrap_or_default().to_string(),
            code: e["responseStatus"]["code"].as_u64().unwrap_or_default() as u16,
            user: e["user"]["username"].as_str().unwrap_or_default().to_string(),
            at: e["stageTimestamp"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// The body of every Node patch the node agent made that the API server accepted, in order.
pub(crate) fn agent_node_patches(dir: &Path) -> Vec<Value> {
    entries(dir)
        .into_iter()
        .filter(|e| e["stage"] == "ResponseComplete" && e["objectRef"]["resource"] == "nodes")
        .filter(|e| (200..300).contains(&e["responseStatus"]["code"].as_u64().unwrap_or_default()))
        .map(|e| e["requestObject"].clone())
        .collect()
}

/// Who wrote the status of pod `namespace/name` and was allowed to, in order.
pub(crate) fn pod_status_writers(dir: &Path, namespace: &str, name: &str) -> Vec<String> {
    entries(dir)
        .into_iter()
        .filter(|e| e["stage"] == "ResponseComplete" && e["objectRef"]["subresource"] == "status")
        .filter(|e| e["objectRef"]["namespace"] == namespace && e["objectRef"]["name"] == name)
        .filter(|e| (200..300).contains(&e["responseStatus"]["code"].as_u64().unwrap_or_default()))
        .map(|e| e["user"]["username"].as_str().unwrap_or_default().to_string())
        .collect()
}
