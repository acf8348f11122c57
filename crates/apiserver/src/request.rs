//! Turning an HTTP request into what it asks of the API: which path, which verb, which options.

use std::collections::HashMap;
use std::fmt;

use bytes::Bytes;
use http::Method;

use super::error::{ApiError, ApiResult};

/// The verbs Kubernetes authorizes and audits requests by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        })
    }
}

/// `/api/v1/namespaces/ns/pods/name/status` and friends, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`
    GroupVersion {
        group: String,
        version: String,
    },
    OpenApiV2,
    /// `/openapi/v3` (None) or `/openapi/v3/apis/{group}/{version}`.
    OpenApiV3(Option<(String, String)>),
    Version,
    Health,
    Resource(ResourcePath),
    Unknown,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    pub(crate) fn parse(q: &str) -> Query {
        Query(form_urlencoded::parse(q.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// A boolean parameter as apimachinery reads one: absent, `0` or `false` (any case) is
    /// false, anything else true (kubernetes,
    /// `staging/src/k8s.io/apimachinery/pkg/runtime/conversion.go`, `Convert_Slice_string_To_bool`).
    pub(crate) fn flag(&self, key: &str) -> bool {
        self.get(key).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
    }

    pub(crate) fn number(&self, key: &str) -> ApiResult<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value for query parameter {key}: \"{v}\" is not a non-negative integer"
                ))
            }),
        }
    }
}

/// A request with its body read.
#[derive(Debug, Clone)]
pub(crate) struct ApiRequest {
    pub method: Method,
    pub path: String,
    pub query: Query,
    pub raw_query: String,
    pub accept: String,
    pub content_type: String,
    pub user_agent: String,
    pub body: Bytes,
    pub target: Target,
}

impl ApiRequest {
    pub(crate) fn from_http(req: http::Request<Bytes>) -> ApiRequest {
        let (parts, body) = req.into_parts();
        let header = |name: http::header::HeaderName| {
            parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
        };
        let path = parts.uri.path().to_string();
        let raw_query = parts.uri.query().unwrap_or("").to_string();
        ApiRequest {
            target: parse_target(&path),
            query: Query::parse(&raw_query),
            raw_query,
            accept: header(http::header::ACCEPT),
            content_type: header(http::header::CONTENT_TYPE),
            user_agent: header(http::header::USER_AGENT),
            method: parts.method,
            path,
            body,
        }
    }

    /// The verb for a resource request, as Kubernetes names it.
    pub(crate) fn verb(&self, rp: &ResourcePath) -> Option<Verb> {
        let named = rp.name.is_some();
        Some(match self.method {
            Method::GET | Method::HEAD if self.query.flag("watch") => Verb::Watch,
            Method::GET | Method::HEAD if named => Verb::Get,
            Method::GET | Method::HEAD => Verb::List,
            Method::POST => Verb::Create,
            Method::PUT => Verb::Update,
            Method::PATCH => Verb::Patch,
            Method::DELETE if named => Verb::Delete,
            Method::DELETE => Verb::DeleteCollection,
            _ => return None,
        })
    }

    /// The field manager Kubernetes would record: explicit, or the user agent's program name.
    pub(crate) fn field_manager(&self) -> String {
        if let Some(m) = self.query.get("fieldManager") {
            return m.to_string();
        }
        let agent = self.user_agent.split('/').next().unwrap_or("").trim();
        if agent.is_empty() {
            "unknown".to_string()
        } else {
            agent.to_string()
        }
    }

    pub(crate) fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }

    pub(crate) fn wants_table(&self) -> bool {
        self.accept.split(',').any(|a| a.contains("as=Table"))
    }

    pub(crate) fn wants_partial_metadata(&self) -> bool {
        !self.wants_table() && self.accept.split(',').any(|a| a.contains("as=PartialObjectMetadata"))
    }
}

fn parse_target(path: &str) -> Target {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["api"] => Target::CoreVersions,
        ["apis"] => Target::Groups,
        ["apis", g] => Target::Group(g.to_string()),
        ["api", v] => Target::GroupVersion { group: String::new(), version: v.to_string() },
        ["apis", g, v] => Target::GroupVersion { group: g.to_string(), version: v.to_string() },
        ["openapi", "v2"] => Target::OpenApiV2,
        ["openapi", "v3"] => Target::OpenApiV3(None),
        ["openapi", "v3", "api", v] => Target::OpenApiV3(Some((String::new(), v.to_string()))),
        ["openapi", "v3", "apis", g, v] => Target::OpenApiV3(Some((g.to_string(), v.to_string()))),
        ["version"] => Target::Version,
        ["healthz" | "readyz" | "livez", ..] => Target::Health,
        ["api", v, rest @ ..] => resource_path("", v, rest),
        ["apis", g, v, rest @ ..] => resource_path(g, v, rest),
        _ => Target::Unknown,
    }
}

fn resource_path(group: &str, version: &str, rest: &[&str]) -> Target {
    let make = |ns: Option<&str>, r: &[&str]| -> Target {
        let (plural, name, sub) = match r {
            [p] => (p, None, None),
            [p, n] => (p, Some(n), None),
            [p, n, s] => (p, Some(n), Some(s)),
            _ => return Target::Unknown,
        };
        Target::Resource(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            namespace: ns.map(str::to_string),
            plural: plural.to_string(),
            name: name.map(|n| n.to_string()),
            subresource: sub.map(|s| s.to_string()),
        })
    };
    match rest {
        // `namespaces/{name}/status` is the namespace itself; `namespaces/{ns}/{plural}...` is inside it.
        ["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty() => {
            make(None, &["namespaces", name, sub])
        }
        ["namespaces", ns, r @ ..] if !r.is_empty() => make(Some(ns), r),
        r => make(None, r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(path: &str) -> ResourcePath {
        match parse_target(path) {
            Target::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        let r = rp("/api/v1/namespaces/default/pods/p1/eviction");
        assert_eq!(
            (r.namespace.as_deref(), r.plural.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            (Some("default"), "pods", Some("p1"), Some("eviction"))
        );
        let r = rp("/api/v1/namespaces/kube-system");
        assert_eq!(
            (r.namespace, r.plural.as_str(), r.name.as_deref()),
            (None, "namespaces", Some("kube-system"))
        );
        let r = rp("/api/v1/namespaces/x/status");
        assert_eq!(
            (r.plural.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            ("namespaces", Some("x"), Some("status"))
        );
        let r = rp("/apis/geometer.dev/v1alpha1/migplans");
        assert_eq!((r.group.as_str(), r.version.as_str(), r.name), ("geometer.dev", "v1alpha1", None));
        assert_eq!(
            parse_target("/apis/policy/v1"),
            Target::GroupVersion { group: "policy".into(), version: "v1".into() }
        );
        assert_eq!(parse_target("/nope"), Target::Unknown);
    }

    #[test]
    fn query_tolerates_kube_rs_leading_ampersand() {
        let q = Query::parse("&watch=true&timeoutSeconds=290&labelSelector=app%3Dweb");
        assert!(q.flag("watch"));
        assert_eq!(q.get("labelSelector"), Some("app=web"));
        assert_eq!(q.number("timeoutSeconds").unwrap(), Some(290));
    }
}
