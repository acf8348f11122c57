//! `POST pods/{name}/binding`: how a scheduler puts a pod on a node (an update may not).

use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::resource::StorageKey;
use super::store::Store;

impl Store {
    pub(crate) fn bind(
        &mut self,
        ns: &str,
        name: &str,
        body: &Value,
        dry_run: bool,
        now: &str,
    ) -> ApiResult<Value> {
        let key = StorageKey::new("", "pods");
        let node = body["target"]["name"].as_str().filter(|n| !n.is_empty()).ok_or_else(|| {
            ApiError::invalid(
                "Binding",
                name,
                vec![("target.name".into(), "Required value: the node to bind to".into())],
            )
        })?;
        let pod = self.get(&key, ns, name).cloned().ok_or_else(|| ApiError::not_found("pods", name))?;
        if let Some(current) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            return Err(ApiError::conflict(
                "pods/binding",
                name,
                &format!("pod {name} is already assigned to node \"{current}\""),
            ));
        }
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            return Err(ApiError::conflict(
                "pods/binding",
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        let mut bound = (*pod).clone();
        bound["spec"]["nodeName"] = json!(node);
        let condition = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
        let conditions = bound["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conditions: Vec<Value> =
            conditions.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
        conditions.push(condition);
        bound["status"]["conditions"] = json!(conditions);
        if !dry_run {
            let rt = self.registry.by_storage(&key).expect("pods are built in");
            let stored = self.put(&key, bound);
            self.after_write(&rt, &stored, now);
        }
        Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
    }
}
