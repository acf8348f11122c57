//! The set of served resource types: the built-ins plus one entry per established CRD.

use std::sync::Arc;

use super::builtins::builtin_types;
use super::resource::{ResourceRef, ResourceType, StorageKey};

#[derive(Debug, Clone)]
pub(crate) struct Registry {
    types: Vec<ResourceRef>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry { types: builtin_types().into_iter().map(Arc::new).collect() }
    }
}

impl Registry {
    pub(crate) fn all(&self) -> &[ResourceRef] {
        &self.types
    }

    /// The type served at `/apis/{group}/{version}/{plural}`.
    pub(crate) fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResourceRef> {
        self.types
            .iter()
            .find(|t| t.group == group && t.plural == plural && t.version(version).is_some())
            .cloned()
    }

    pub(crate) fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<ResourceRef> {
        self.types
            .iter()
            .find(|t| t.group == group && t.kind == kind && t.version(version).is_some())
            .cloned()
    }

    /// The type by `apiVersion` and `kind`, as found in manifests and owner references.
    pub(crate) fn by_api_version(&self, api_version: &str, kind: &str) -> Option<ResourceRef> {
        let (group, version) = split_api_version(api_version);
        self.by_kind(group, version, kind)
    }

    /// The primary type storing under `key` (not an alternative view such as events.k8s.io).
    pub(crate) fn by_storage(&self, key: &StorageKey) -> Option<ResourceRef> {
        self.types.iter().find(|t| &t.storage == key && t.group == key.group).cloned()
    }

    pub(crate) fn has_version(&self, group: &str, version: &str) -> bool {
        self.types.iter().any(|t| t.group == group && t.version(version).is_some())
    }

    /// Groups in discovery order (core first, then as registered), each with its versions.
    pub(crate) fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for t in &self.types {
            let entry = match groups.iter_mut().find(|(g, _)| *g == t.group) {
                Some(e) => e,
                None => {
                    groups.push((t.group.clone(), Vec::new()));
                    groups.last_mut().expect("just pushed")
                }
            };
            for v in &t.versions {
                if !entry.1.contains(&v.name) {
                    entry.1.push(v.name.clone());
                }
            }
        }
        groups
    }

    pub(crate) fn in_group_version(&self, group: &str, version: &str) -> Vec<ResourceRef> {
        self.types.iter().filter(|t| t.group == group && t.version(version).is_some()).cloned().collect()
    }

    /// Adds or replaces the type for a CRD (keyed by group and plural).
    pub(crate) fn register(&mut self, resource: ResourceType) {
        let resource = Arc::new(resource);
        match self.types.iter_mut().find(|t| t.group == resource.group && t.plural == resource.plural) {
            Some(existing) => *existing = resource,
            None => self.types.push(resource),
        }
    }

    pub(crate) fn unregister(&mut self, group: &str, plural: &str) {
        self.types.retain(|t| !(t.group == group && t.plural == plural && t.builtin.is_none()));
    }
}

pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}
