//! Putting objects straight into the store and reading them back, for test setup and for
//! `geometer apiserver --load`. Seeding skips faults and keeps `status` as given (a running
//! pod can be seeded as running), creates missing namespaces, and replaces an existing object
//! of the same name. Everything else (validation, uids, resourceVersions, watch events,
//! CRD registration, PDB status) is as for an API write.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::builtins::INITIAL_NAMESPACES;
use super::error::ApiError;
use super::resource::StorageKey;
use super::store::Store;
use super::write::{Tracking, WriteOpts};
use super::{now, ApiServer};

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("object {index}: {message}")]
    Shape { index: usize, message: String },
    #[error("object {index} ({kind} {name}): {source}")]
    Rejected { index: usize, kind: String, name: String, source: ApiError },
    #[error("the manifests are not valid YAML: {0}")]
    Yaml(String),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

pub(crate) fn initial_namespaces(store: &mut Store) {
    let rt = store.registry.by_storage(&StorageKey::new("", "namespaces")).expect("namespaces are built in");
    let opts = WriteOpts::new("geometer-apiserver", now());
    for ns in INITIAL_NAMESPACES {
        store
            .create(
                &rt,
                "v1",
                None,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                &opts,
            )
            .expect("initial namespaces are valid");
    }
}

impl Store {
    fn seed_one(&mut self, obj: Value) -> Result<Value, ApiError> {
        let api_version = obj["apiVersion"].as_str().unwrap_or("").to_string();
        let kind = obj["kind"].as_str().unwrap_or("").to_string();
        let rt = self.registry.by_api_version(&api_version, &kind).ok_or_else(|| {
            ApiError::bad_request(format!(
                "no resource is served for apiVersion \"{api_version}\", kind \"{kind}\": seed its CustomResourceDefinition first"
            ))
        })?;
        let version = super::registry::split_api_version(&api_version).1.to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let ns = if rt.namespaced {
            obj["metadata"]["namespace"].as_str().filter(|n| !n.is_empty()).unwrap_or("default").to_string()
        } else {
            String::new()
        };
        let mut opts = WriteOpts::new("geometer-seed", now());
        opts.keep_status = true;
        if rt.namespaced && self.get(&StorageKey::new("", "namespaces"), "", &ns).is_none() {
            let ns_rt = self
                .registry
                .by_storage(&StorageKey::new("", "namespaces"))
                .expect("namespaces are built in");
            self.create(&ns_rt, "v1", None, json!({"metadata": {"name": ns}}), &opts)?;
        }
        let path_ns = rt.namespaced.then_some(ns.as_str());
        let stored = match self.get(&rt.storage, &ns, &name).cloned() {
            Some(old) if !name.is_empty() => {
                let mut new = obj;
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("resourceVersion");
                }
                self.commit_update(
                    &rt,
                    &version,
                    &old,
                    super::convert::to_storage(&rt, new),
                    None,
                    &opts,
                    Tracking::Update,
                )?
            }
            _ => self.create_tracked(&rt, &version, path_ns, obj, &opts, Tracking::Update)?,
        };
        Ok((*super::convert::to_served(&rt, &version, &stored)).clone())
    }
}

fn expand_lists(docs: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for d in docs {
        if d.is_null() {
            continue;
        }
        if d["kind"].as_str().is_some_and(|k| k.ends_with("List")) && d["items"].is_array() {
            out.extend(d["items"].as_array().cloned().unwrap_or_default());
        } else {
            out.push(d);
        }
    }
    out
}

impl ApiServer {
    /// Stores `obj` directly (see the module docs) and returns it as stored.
    pub fn seed<K>(&self, obj: &K) -> Result<K, ApiError>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let mut value = serde_json::to_value(obj).map_err(|e| ApiError::bad_request(e.to_string()))?;
        value["apiVersion"] = json!(K::api_version(&()));
        value["kind"] = json!(K::kind(&()));
        let stored = self.seed_value(value)?;
        serde_json::from_value(stored).map_err(|e| {
            ApiError::internal(format!("stored object does not decode as {}: {e}", K::kind(&())))
        })
    }

    /// Stores an object given as JSON (`apiVersion` and `kind` required).
    pub fn seed_value(&self, obj: Value) -> Result<Value, ApiError> {
        self.inner.store.lock().expect("store lock poisoned").seed_one(obj)
    }

    /// Seeds every object of a multi-document YAML (or JSON) text, `List` kinds expanded,
    /// CRDs first so that their custom resources can follow in the same text.
    #[allow(clippy::result_large_err)] // seeding is test and demo set-up, not a hot path
    pub fn load_yaml(&self, text: &str) -> Result<Vec<Value>, SeedError> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text)
            .map_err(|e| SeedError::Yaml(e.to_string().lines().next().unwrap_or_default().to_string()))?;
        let mut docs: Vec<(usize, Value)> = expand_lists(docs).into_iter().enumerate().collect();
        docs.sort_by_key(|(_, d)| d["kind"] != "CustomResourceDefinition" && d["kind"] != "Namespace");
        let mut out = Vec::new();
        for (index, doc) in docs {
            if !doc.is_object() {
                return Err(SeedError::Shape {
                    index,
                    message: "each document must be a Kubernetes object (a mapping)".into(),
                });
            }
            let kind = doc["kind"].as_str().unwrap_or("").to_string();
            let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
            out.push(self.seed_value(doc).map_err(|source| SeedError::Rejected {
                index,
                kind,
                name,
                source,
            })?);
        }
        Ok(out)
    }

    /// The stored object (namespace "" for cluster-scoped kinds), read without a request.
    pub fn object<K>(&self, namespace: &str, name: &str) -> Option<K>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        serde_json::from_value(self.object_json::<K>(namespace, name)?).ok()
    }

    /// The stored object of `K`'s kind as JSON, even when it does not decode as a `K`.
    pub fn object_json<K>(&self, namespace: &str, name: &str) -> Option<Value>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let store = self.inner.store.lock().expect("store lock poisoned");
        let rt = store.registry.by_kind(&K::group(&()), &K::version(&()), &K::kind(&()))?;
        let obj = store.get(&rt.storage, namespace, name)?;
        Some((*super::convert::to_served(&rt, &K::version(&()), obj)).clone())
    }

    /// Every stored object of a kind, in (namespace, name) order.
    pub fn objects<K>(&self) -> Vec<K>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let store = self.inner.store.lock().expect("store lock poisoned");
        let Some(rt) = store.registry.by_kind(&K::group(&()), &K::version(&()), &K::kind(&())) else {
            return Vec::new();
        };
        store
            .iter(&rt.storage, None)
            .filter_map(|o| {
                serde_json::from_value((*super::convert::to_served(&rt, &K::version(&()), o)).clone()).ok()
            })
            .collect()
    }
}
