//! A small RBAC authorizer over rendered manifests: what a ServiceAccount may do, decided the
//! way the Kubernetes RBAC authorizer decides it (ClusterRoleBindings grant everywhere,
//! RoleBindings only in their namespace, `resourceNames` only for requests that name an object).

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use serde_json::Value;

/// An API request as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Access {
    /// API group, `""` for the core group.
    pub group: String,
    /// Plural, with `/subresource` when there is one: `pods/eviction`.
    pub resource: String,
    pub verb: String,
    /// None for cluster-scoped resources and for requests across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() { "core" } else { &self.group };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " named {name}")?;
        }
        Ok(())
    }
}

/// One rule a binding grants, and where it applies.
#[derive(Debug, Clone)]
pub struct Grant {
    /// `ClusterRole/x via ClusterRoleBinding/y` (for messages).
    pub source: String,
    /// None: every namespace and cluster-scoped resources; Some: that namespace only.
    pub namespace: Option<String>,
    pub rule: PolicyRule,
}

/// One (group, resource, verb) a grant allows, with its scope: the unit compared with what the
/// code does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    pub group: String,
    pub resource: String,
    pub verb: String,
    /// None: cluster-wide.
    pub namespace: Option<String>,
    /// Restricted to these names (empty: any).
    pub names: Vec<String>,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() { "core" } else { &self.group };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}")?,
            None => write!(f, " cluster-wide")?,
        }
        if !self.names.is_empty() {
            write!(f, " named {}", self.names.join("|"))?;
        }
        Ok(())
    }
}

pub struct Authorizer {
    pub grants: Vec<Grant>,
}

fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("{} {} does not parse: {e}", v["kind"], v["metadata"]["name"]))
}

fn names_subject(subjects: &Option<Vec<Subject>>, namespace: &str, name: &str) -> bool {
    subjects
        .iter()
        .flatten()
        .any(|s| s.kind == "ServiceAccount" && s.name == name && s.namespace.as_deref() == Some(namespace))
}

impl Authorizer {
    /// Everything bound to ServiceAccount `namespace/name` in `objects`. A binding to a role
    /// the rendering lacks is an error: it would grant nothing.
    pub fn for_service_account(objects: &[Value], namespace: &str, name: &str) -> Authorizer {
        let cluster_role = |role: &str| -> ClusterRole {
            parse(
                objects
                    .iter()
                    .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == role)
                    .unwrap_or_else(|| {
                        panic!("a binding refers to ClusterRole {role}, which the rendering does not contain")
                    }),
            )
        };
        let mut grants = Vec::new();
        for o in objects.iter().filter(|o| o["kind"] == "ClusterRoleBinding") {
            let b: ClusterRoleBinding = parse(o);
            if !names_subject(&b.subjects, namespace, name) {
                continue;
            }
            assert_eq!(
                b.role_ref.kind, "ClusterRole",
                "ClusterRoleBinding {:?} must refer to a ClusterRole",
                b.metadata.name
            );
            for rule in cluster_role(&b.role_ref.name).rules.unwrap_or_default() {
                let source = format!(
                    "ClusterRole/{} via ClusterRoleBinding/{}",
                    b.role_ref.name,
                    b.metadata.name.clone().unwrap_or_default()
                );
                grants.push(Grant { source, namespace: None, rule });
            }
        }
        for o in objects.iter().filter(|o| o["kind"] == "RoleBinding") {
            let b: RoleBinding = parse(o);
            if !names_subject(&b.subjects, namespace, name) {
                continue;
            }
            let ns = b.metadata.namespace.clone().expect("a RoleBinding has a namespace");
            let rules = match b.role_ref.kind.as_str() {
                "ClusterRole" => cluster_role(&b.role_ref.name).rules.unwrap_or_default(),
                "Role" => {
                    let role: Role = parse(
                        objects
                            .iter()
                            .find(|o| {
                                o["kind"] == "Role"
                                    && o["metadata"]["name"] == b.role_ref.name
                                    && o["metadata"]["namespace"] == ns
                            })
                            .unwrap_or_else(|| {
                                panic!(
                                    "RoleBinding {ns}/{:?} refers to Role {}, which is not in {ns}",
                                    b.metadata.name, b.role_ref.name
                                )
                            }),
                    );
                    role.rules.unwrap_or_default()
                }
                other => panic!("RoleBinding refers to a {other}"),
            };
            for rule in rules {
                let source = format!(
                    "{}/{} via RoleBinding {ns}/{}",
                    b.role_ref.kind,
                    b.role_ref.name,
                    b.metadata.name.clone().unwrap_or_default()
                );
                grants.push(Grant { source, namespace: Some(ns.clone()), rule });
            }
        }
        Authorizer { grants }
    }

    /// The grant that allows `access`, if any.
    pub fn allows(&self, access: &Access) -> Option<&Grant> {
        self.grants.iter().find(|g| {
            let in_scope = match (&g.namespace, &access.namespace) {
                (None, _) => true,
                (Some(ns), Some(req)) => ns == req,
                (Some(_), None) => false,
            };
            let r = &g.rule;
            let names = r.resource_names.as_deref().unwrap_or_default();
            in_scope
                && r.api_groups.iter().flatten().any(|x| x == "*" || *x == access.group)
                && r.resources.iter().flatten().any(|x| x == "*" || *x == access.resource)
                && r.verbs.iter().any(|x| x == "*" || *x == access.verb)
                && (names.is_empty() || access.name.as_ref().is_some_and(|n| names.contains(n)))
        })
    }

    /// Every (group, resource, verb) the grants allow, with scope and names.
    pub fn permissions(&self) -> BTreeSet<Permission> {
        let mut out = BTreeSet::new();
        for g in &self.grants {
            let r = &g.rule;
            for group in r.api_groups.iter().flatten() {
                for resource in r.resources.iter().flatten() {
                    for verb in &r.verbs {
                        out.insert(Permission {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb: verb.clone(),
                            namespace: g.namespace.clone(),
                            names: r.resource_names.clone().unwrap_or_default(),
                        });
                    }
                }
            }
        }
        out
    }
}

impl Permission {
    /// Whether `access` is one use of this permission.
    pub fn used_by(&self, access: &Access) -> bool {
        self.group == access.group
            && self.resource == access.resource
            && self.verb == access.verb
            && self.namespace.as_ref().is_none_or(|ns| access.namespace.as_ref() == Some(ns))
            && (self.names.is_empty() || access.name.as_ref().is_some_and(|n| self.names.contains(n)))
    }
}

/// Fails with every call in `seen` the RBAC denies and every permission granted that no call
/// used and no entry of `unobserved` (group, resource, verb, reason) justifies.
pub fn compare(
    component: &str,
    rendering: &str,
    authorizer: &Authorizer,
    seen: &BTreeSet<Access>,
    unobserved: &[(&str, &str, &str, &str)],
) {
    let denied: Vec<String> =
        seen.iter().filter(|a| authorizer.allows(a).is_none()).map(|a| a.to_string()).collect();
    assert!(
        denied.is_empty(),
        "{rendering}: the {component}'s RBAC denies calls it makes:\n  {}",
        denied.join("\n  ")
    );

    let justified = |p: &Permission| {
        unobserved.iter().any(|(g, r, v, _)| p.group == *g && p.resource == *r && p.verb == *v)
    };
    let permissions = authorizer.permissions();
    let unused: Vec<String> = permissions
        .iter()
        .filter(|p| !seen.iter().any(|a| p.used_by(a)) && !justified(p))
        .map(|p| p.to_string())
        .collect();
    assert!(
        unused.is_empty(),
        "{rendering}: the {component} is granted permissions it never used in the scenarios; remove them or justify them in the test:\n  {}",
        unused.join("\n  ")
    );
    for (g, r, v, why) in unobserved {
        assert!(
            permissions.iter().any(|p| p.group == *g && p.resource == *r && p.verb == *v),
            "{rendering}: the justification for {v} {g}/{r} ({why}) is stale: no rule grants it"
        );
    }
}
