//! What the server knows about each kind of object: names, scope, versions, subresources,
//! printing and the field selectors it accepts. Built-in types and CRDs share this shape.

use std::sync::Arc;

use serde_json::Value;

/// Where a resource's objects live, independent of the version they are served at.
/// `events.k8s.io` events share core events' storage, as in Kubernetes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct StorageKey {
    pub group: String,
    pub plural: String,
}

impl StorageKey {
    pub(crate) fn new(group: &str, plural: &str) -> Self {
        StorageKey { group: group.to_string(), plural: plural.to_string() }
    }
}

/// Types with server behaviour beyond plain storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builtin {
    Pod,
    Node,
    Namespace,
    Event,
    /// `events.k8s.io/v1` view of core events.
    EventV1,
    PodDisruptionBudget,
    Lease,
    CustomResourceDefinition,
}

/// How rows are printed for `kubectl get` (server-side Table).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Printer {
    Builtin(Builtin),
    /// A CRD's `additionalPrinterColumns`.
    Columns(Vec<PrinterColumn>),
    /// Name and age only.
    Default,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// One served version.
#[derive(Debug, Clone)]
pub(crate) struct VersionInfo {
    pub name: String,
    /// The CRD's `openAPIV3Schema` for this version: pruning, defaulting, validation, list types.
    pub schema: Option<Value>,
    pub printer: Printer,
    pub status_subresource: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct ResourceType {
    pub group: String,
    /// Served versions; the first is the preferred one.
    pub versions: Vec<VersionInfo>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub storage: StorageKey,
    pub builtin: Option<Builtin>,
    /// Field selector labels beyond `metadata.name` and `metadata.namespace`.
    pub field_labels: Vec<String>,
}

pub(crate) type ResourceRef = Arc<ResourceType>;

impl ResourceType {
    pub(crate) fn version(&self, version: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|v| v.name == version)
    }

    pub(crate) fn preferred_version(&self) -> &str {
        &self.versions[0].name
    }

    pub(crate) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// `pods`, `migplans.geometer.dev`: the name Kubernetes uses in messages.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub(crate) fn has_status(&self, version: &str) -> bool {
        self.version(version).is_some_and(|v| v.status_subresource)
    }

    pub(crate) fn is(&self, builtin: Builtin) -> bool {
        self.builtin == Some(builtin)
    }

    pub(crate) fn subresources(&self, version: &str) -> Vec<&'static str> {
        let mut subs = Vec::new();
        if self.has_status(version) {
            subs.push("status");
        }
        if self.is(Builtin::Pod) {
            subs.push("eviction");
            subs.push("binding");
        }
        subs
    }

    pub(crate) fn accepts_field_label(&self, label: &str) -> bool {
        matches!(label, "metadata.name" | "metadata.namespace")
            || self.field_labels.iter().any(|l| l == label)
    }
}
