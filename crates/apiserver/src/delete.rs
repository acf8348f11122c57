//! Deletion: preconditions, finalizers and deletionTimestamp, propagation (background,
//! foreground, orphan), garbage collection of dependents by ownerReference, namespace
//! termination, and a CRD taking its custom resources with it.
//!
//! Garbage collection runs synchronously inside the deleting request, which a client sees as
//! a very fast background collector. Pods are deleted at once unless graceful pod deletion is
//! on (`ApiServer::set_graceful_pod_deletion`, which the simulated cluster turns on): then a pod
//! bound to a node that has not ended is only marked for its grace period, and its kubelet
//! deletes it for good with `gracePeriodSeconds: 0`, as kube-apiserver does
//! (kubernetes/kubernetes `pkg/registry/core/pod/strategy.go`, `CheckGracefulDelete`).

use std::sync::Arc;

use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::resource::{Builtin, ResourceType, StorageKey};
use super::store::{rv_of, uid_of, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOpts {
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
    /// `gracePeriodSeconds`; a pod's own `terminationGracePeriodSeconds` (30) when absent.
    pub grace_period: Option<i64>,
}

impl DeleteOpts {
    /// From a `DeleteOptions` body (or `{}`), with query parameters as fallbacks.
    pub(crate) fn parse(
        body: &Value,
        query_propagation: Option<&str>,
        dry_run: bool,
    ) -> ApiResult<DeleteOpts> {
        let policy = body["propagationPolicy"].as_str().or(query_propagation);
        let orphan = body["orphanDependents"].as_bool();
        let propagation = match (policy, orphan) {
            (Some("Background"), _) => Propagation::Background,
            (Some("Foreground"), _) => Propagation::Foreground,
            (Some("Orphan"), _) | (None, Some(true)) => Propagation::Orphan,
            (None, _) => Propagation::Background,
            (Some(other), _) => {
                return Err(ApiError::bad_request(format!(
                    "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                )))
            }
        };
        let body_dry_run = body["dryRun"].as_array().is_some_and(|a| a.iter().any(|x| x == "All"));
        Ok(DeleteOpts {
            propagation,
            precondition_uid: body["preconditions"]["uid"].as_str().map(str::to_string),
            precondition_rv: body["preconditions"]["resourceVersion"].as_str().map(str::to_string),
            dry_run: dry_run || body_dry_run,
            grace_period: body["gracePeriodSeconds"].as_i64(),
        })
    }
}

/// What a delete did: the object's last state, and whether it is gone or only marked.
pub(crate) struct Deleted {
    pub object: Arc<Value>,
    pub gone: bool,
}

const FOREGROUND: &str = "foregroundDeletion";

/// The object's `metadata.finalizers`: while any is left, a deleted object stays, terminating.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

impl Store {
    pub(crate) fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
        now: &str,
    ) -> ApiResult<Deleted> {
        let old = self
            .get(&rt.storage, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        if let Some(uid) = &opts.precondition_uid {
            if uid != uid_of(&old) {
                return Err(ApiError::conflict(
                    &rt.qualified(),
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        uid_of(&old)
                    ),
                ));
            }
        }
        if let Some(rv) = &opts.precondition_rv {
            if rv.parse::<u64>().ok() != Some(rv_of(&old)) {
                return Err(ApiError::conflict(&rt.qualified(), name, &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", rv_of(&old))));
            }
        }
        if opts.dry_run {
            return Ok(Deleted { object: old, gone: true });
        }
        if let Some(grace) = self.pod_grace_period(rt, &old, opts) {
            return Ok(self.mark_terminating(rt, old, grace, now));
        }
        let mut fins = finalizers(&old);
        if opts.propagation == Propagation::Foreground
            && !self.dependents_of(uid_of(&old)).is_empty()
            && !fins.iter().any(|f| f == FOREGROUND)
        {
            fins.push(FOREGROUND.to_string());
        }
        if opts.propagation == Propagation::Orphan {
            self.orphan_dependents(uid_of(&old));
        }
        let is_namespace = rt.is(Builtin::Namespace);
        if !fins.is_empty() || is_namespace {
            if !old["metadata"]["deletionTimestamp"].is_null() && finalizers(&old) == fins {
                return Ok(Deleted { object: old, gone: false });
            }
            let mut marked = (*old).clone();
            marked["metadata"]["deletionTimestamp"] = json!(now);
            marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            marked["metadata"]["finalizers"] = json!(fins);
            if fins.is_empty() {
                marked["metadata"].as_object_mut().map(|m| m.remove("finalizers"));
            }
            if is_namespace {
                marked["status"]["phase"] = json!("Terminating");
            }
            let stored = self.put(&rt.storage, marked);
            if fins.iter().any(|f| f == FOREGROUND) {
                for (key, dns, dname) in self.dependents_of(uid_of(&stored)) {
                    self.delete_dependent(&key, &dns, &dname, now);
                }
                self.finish_foreground(uid_of(&stored).to_string(), now);
            }
            if is_namespace {
                for (key, dname) in self.namespaces_in_use(name) {
                    self.delete_dependent(&key, name, &dname, now);
                }
                self.finish_namespace(name, now);
            }
            return Ok(match self.get(&rt.storage, ns, name).cloned() {
                Some(obj) => Deleted { object: obj, gone: false },
                None => Deleted { object: stored, gone: true },
            });
        }
        let gone = self
            .remove_object(rt, ns, name, None, now)
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        Ok(Deleted { object: gone, gone: true })
    }

    /// The grace period a pod gets before it is gone: only with graceful pod deletion on, for
    /// a pod on a node that is not Succeeded or Failed, and above 0.
    fn pod_grace_period(&self, rt: &ResourceType, pod: &Value, opts: &DeleteOpts) -> Option<i64> {
        if !self.graceful_pods || !rt.is(Builtin::Pod) {
            return None;
        }
        let bound = pod["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
        let ended = matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
        let grace = opts.grace_period.or(pod["spec"]["terminationGracePeriodSeconds"].as_i64()).unwrap_or(30);
        (bound && !ended && grace > 0).then_some(grace)
    }

    /// Marks a pod terminating (once: a second delete changes nothing) and leaves it to its
    /// kubelet.
    fn mark_terminating(&mut self, rt: &ResourceType, old: Arc<Value>, grace: i64, now: &str) -> Deleted {
        if !old["metadata"]["deletionTimestamp"].is_null() {
            return Deleted { object: old, gone: false };
        }
        let at = now
            .parse::<jiff::Timestamp>()
            .ok()
            .and_then(|t| t.checked_add(jiff::SignedDuration::from_secs(grace)).ok())
            .map_or_else(|| now.to_string(), |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        let mut marked = (*old).clone();
        marked["metadata"]["deletionTimestamp"] = json!(at);
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        Deleted { object: self.put(&rt.storage, marked), gone: false }
    }

    fn delete_dependent(&mut self, key: &StorageKey, ns: &str, name: &str, now: &str) {
        let Some(rt) = self.registry.by_storage(key) else { return };
        let _ = self.delete(&rt, ns, name, &DeleteOpts::default(), now);
    }

    fn orphan_dependents(&mut self, owner_uid: &str) {
        for (key, ns, name) in self.dependents_of(owner_uid) {
            if let Some(dep) = self.get(&key, &ns, &name).cloned() {
                let mut copy = (*dep).clone();
                strip_owner(&mut copy, owner_uid);
                self.put(&key, copy);
            }
        }
    }

    /// Whether a namespace (when `rt` is namespaces) still holds objects.
    pub(crate) fn namespace_has_content(&self, rt: &ResourceType, name: &str) -> bool {
        rt.is(Builtin::Namespace) && !self.namespaces_in_use(name).is_empty()
    }

    /// Takes an object out of the store and runs everything that follows a removal.
    pub(crate) fn remove_object(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        last: Option<Value>,
        now: &str,
    ) -> Option<Arc<Value>> {
        let gone = self.take(&rt.storage, ns, name, last)?;
        let uid = uid_of(&gone).to_string();
        // Dependents whose every owner is gone are collected; others only lose the reference.
        for (key, dns, dname) in self.dependents_of(&uid) {
            let Some(dep) = self.get(&key, &dns, &dname).cloned() else { continue };
            let others_alive = dep["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["uid"].as_str())
                .any(|u| u != uid && self.uid_exists(u));
            if others_alive {
                let mut copy = (*dep).clone();
                strip_owner(&mut copy, &uid);
                self.put(&key, copy);
            } else {
                self.delete_dependent(&key, &dns, &dname, now);
            }
        }
        for owner in gone["metadata"]["ownerReferences"].as_array().into_iter().flatten() {
            if let Some(u) = owner["uid"].as_str() {
                self.finish_foreground(u.to_string(), now);
            }
        }
        match rt.builtin {
            Some(Builtin::CustomResourceDefinition) => {
                let group = gone["spec"]["group"].as_str().unwrap_or("").to_string();
                let plural = gone["spec"]["names"]["plural"].as_str().unwrap_or("").to_string();
                self.drop_collection(&StorageKey::new(&group, &plural));
                self.registry.unregister(&group, &plural);
            }
            Some(Builtin::Pod) => self.refresh_pdbs(ns, now),
            _ => {}
        }
        if rt.namespaced {
            self.finish_namespace(ns, now);
        }
        Some(gone)
    }

    fn uid_exists(&self, uid: &str) -> bool {
        self.find_uid(uid).is_some()
    }

    /// An owner being deleted in the foreground goes once its last dependent has.
    fn finish_foreground(&mut self, owner_uid: String, now: &str) {
        if !self.dependents_of(&owner_uid).is_empty() {
            return;
        }
        let Some((key, ns, name)) = self.find_uid(&owner_uid) else { return };
        let Some(owner) = self.get(&key, &ns, &name).cloned() else { return };
        if owner["metadata"]["deletionTimestamp"].is_null()
            || !finalizers(&owner).iter().any(|f| f == FOREGROUND)
        {
            return;
        }
        let mut copy = (*owner).clone();
        let rest: Vec<String> = finalizers(&owner).into_iter().filter(|f| f != FOREGROUND).collect();
        let Some(rt) = self.registry.by_storage(&key) else { return };
        if rest.is_empty() {
            copy["metadata"].as_object_mut().map(|m| m.remove("finalizers"));
            self.remove_object(&rt, &ns, &name, Some(copy), now);
        } else {
            copy["metadata"]["finalizers"] = json!(rest);
            self.put(&key, copy);
        }
    }

    /// A terminating namespace goes once it is empty and has no finalizers of its own.
    fn finish_namespace(&mut self, ns: &str, now: &str) {
        let key = StorageKey::new("", "namespaces");
        let Some(namespace) = self.get(&key, "", ns).cloned() else { return };
        if namespace["metadata"]["deletionTimestamp"].is_null() || !finalizers(&namespace).is_empty() {
            return;
        }
        if !self.namespaces_in_use(ns).is_empty() {
            return;
        }
        if let Some(rt) = self.registry.by_storage(&key) {
            self.remove_object(&rt, "", ns, None, now);
        }
    }
}

fn strip_owner(obj: &mut Value, owner_uid: &str) {
    if let Some(refs) = obj["metadata"]["ownerReferences"].as_array_mut() {
        refs.retain(|r| r["uid"].as_str() != Some(owner_uid));
        if refs.is_empty() {
            obj["metadata"].as_object_mut().map(|m| m.remove("ownerReferences"));
        }
    }
}
