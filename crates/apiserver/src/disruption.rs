//! PodDisruptionBudgets and the Eviction API. The server plays the disruption controller too:
//! every pod or PDB write recomputes the status of the budgets in that namespace, so
//! `disruptionsAllowed` is always current when an eviction asks.
//!
//! Expected pods are the pods the selector matches; for `maxUnavailable` and percentages,
//! where Kubernetes asks the pods' controllers for their scale, the most pods matched since
//! the budget's spec last changed (an evicted pod counts as still expected, as its controller
//! would replace it). A pod is healthy when its `Ready` condition is `True` and it is not being
//! deleted.

use std::sync::Arc;

use serde_json::{json, Value};

use super::delete::DeleteOpts;
use super::error::{ApiError, ApiResult};
use super::resource::{Builtin, StorageKey};
use super::selector::LabelSelector;
use super::store::Store;

fn pods_key() -> StorageKey {
    StorageKey::new("", "pods")
}

fn pdbs_key() -> StorageKey {
    StorageKey::new("policy", "poddisruptionbudgets")
}

pub(crate) fn is_healthy(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// `5` or `"50%"` of `total`, rounded up as the disruption controller does.
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * total + 99) / 100)
        }
        _ => None,
    }
}

struct Budget {
    expected: i64,
    healthy: i64,
    desired: i64,
}

impl Store {
    fn budget(&self, pdb: &Value) -> Budget {
        let ns = pdb["metadata"]["namespace"].as_str().unwrap_or("");
        let selector = LabelSelector::from_object(&pdb["spec"]["selector"]).unwrap_or_default();
        let selector_is_null = pdb["spec"]["selector"].is_null();
        let pods: Vec<&Arc<Value>> = if selector_is_null {
            Vec::new()
        } else {
            self.iter(&pods_key(), Some(ns)).filter(|p| selector.matches_object(p)).collect()
        };
        let spec = &pdb["spec"];
        let healthy = pods.iter().filter(|p| is_healthy(p)).count() as i64;
        // Kubernetes takes the expected count for maxUnavailable and percentages from the
        // pods' controllers (their scale), which keep it up while evicted pods are replaced.
        // Without controllers, the most pods matched since the budget's spec last changed
        // stands in for that scale.
        let needs_scale = !spec["maxUnavailable"].is_null() || spec["minAvailable"].is_string();
        let same_spec = pdb["status"]["observedGeneration"] == pdb["metadata"]["generation"];
        let remembered =
            if needs_scale && same_spec { pdb["status"]["expectedPods"].as_i64().unwrap_or(0) } else { 0 };
        let expected = (pods.len() as i64).max(remembered);
        let desired = if !spec["maxUnavailable"].is_null() {
            (expected - scaled(&spec["maxUnavailable"], expected).unwrap_or(0)).max(0)
        } else if !spec["minAvailable"].is_null() {
            scaled(&spec["minAvailable"], expected).unwrap_or(0)
        } else {
            0
        };
        Budget { expected, healthy, desired }
    }

    /// The status the disruption controller would write for `pdb`.
    pub(crate) fn pdb_status(&self, pdb: &Value, previous: Option<&Value>, now: &str) -> Value {
        let b = self.budget(pdb);
        let allowed = (b.healthy - b.desired).max(0);
        let (cond_status, reason) =
            if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
        let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(1);
        let previous_condition = previous
            .and_then(|p| p["conditions"].as_array())
            .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionAllowed"));
        let since = match previous_condition {
            Some(c) if c["status"] == cond_status => c["lastTransitionTime"].clone(),
            _ => json!(now),
        };
        json!({
            "observedGeneration": generation,
            "disruptionsAllowed": allowed,
            "currentHealthy": b.healthy,
            "desiredHealthy": b.desired,
            "expectedPods": b.expected,
            "conditions": [{
                "type": "DisruptionAllowed", "status": cond_status, "reason": reason, "message": "",
                "observedGeneration": generation, "lastTransitionTime": since,
            }],
        })
    }

    /// Recomputes the status of every budget in `ns`, writing those that changed.
    pub(crate) fn refresh_pdbs(&mut self, ns: &str, now: &str) {
        let pdbs: Vec<Arc<Value>> = self.iter(&pdbs_key(), Some(ns)).cloned().collect();
        for pdb in pdbs {
            let status = self.pdb_status(&pdb, pdb.get("status"), now);
            if pdb.get("status") != Some(&status) {
                let mut copy = (*pdb).clone();
                copy["status"] = status;
                self.put(&pdbs_key(), copy);
            }
        }
    }

    /// `POST pods/{name}/eviction`: deletes the pod unless a budget forbids it (429).
    pub(crate) fn evict(
        &mut self,
        ns: &str,
        name: &str,
        body: &Value,
        dry_run: bool,
        now: &str,
    ) -> ApiResult<Value> {
        if body["kind"].as_str().is_some_and(|k| k != "Eviction") {
            return Err(ApiError::bad_request(format!(
                "expected an Eviction object, got kind {}",
                body["kind"]
            )));
        }
        let body_name = body["metadata"]["name"].as_str().unwrap_or("");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "name in URL does not match name in Eviction object: {name} != {body_name}"
            )));
        }
        let pod =
            self.get(&pods_key(), ns, name).cloned().ok_or_else(|| ApiError::not_found("pods", name))?;
        let success =
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            return Ok(success);
        }
        let mut opts = DeleteOpts::parse(&body["deleteOptions"], None, dry_run)?;
        opts.dry_run |= dry_run;
        let phase = pod["status"]["phase"].as_str().unwrap_or("");
        let ignores_budgets = matches!(phase, "Succeeded" | "Failed" | "Pending");
        if !ignores_budgets {
            let matching: Vec<Arc<Value>> = self
                .iter(&pdbs_key(), Some(ns))
                .filter(|pdb| {
                    !pdb["spec"]["selector"].is_null()
                        && LabelSelector::from_object(&pdb["spec"]["selector"])
                            .is_ok_and(|s| s.matches_object(&pod))
                })
                .cloned()
                .collect();
            if matching.len() > 1 {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(pdb) = matching.first() {
                let b = self.budget(pdb);
                let always = pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow";
                let allowed = if is_healthy(&pod) {
                    b.healthy - b.desired > 0
                } else {
                    always || b.healthy >= b.desired
                };
                if !allowed {
                    let pdb_name = pdb["metadata"]["name"].as_str().unwrap_or("");
                    return Err(ApiError::too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.")
                        .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": format!(
                            "The disruption budget {pdb_name} needs {} healthy pods and has {} currently", b.desired, b.healthy)}]})));
                }
            }
        }
        let rt = self.registry.by_storage(&pods_key()).expect("pods are built in");
        debug_assert!(rt.is(Builtin::Pod));
        self.delete(&rt, ns, name, &opts, now)?;
        Ok(success)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled(&json!("50%"), 3), Some(2));
        assert_eq!(scaled(&json!("10%"), 10), Some(1));
        assert_eq!(scaled(&json!(2), 10), Some(2));
        assert_eq!(scaled(&json!("x"), 10), None);
    }
}
