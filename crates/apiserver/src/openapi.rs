//! The slice of OpenAPI v3 kubectl needs: per group-version documents whose PATCH operations
//! carry `x-kubernetes-group-version-kind` and a `fieldValidation` query parameter (so `kubectl
//! apply/create` use server-side field validation instead of failing to download schemas),
//! and component schemas for `kubectl explain` (full for CRDs, a stub for built-ins).
//!
//! PATCH operations declare no request body on purpose: kubectl then computes client-side
//! apply patches from its compiled-in types, which match this server's merge keys.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{json, Map, Value};

use super::registry::Registry;
use super::resource::ResourceType;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn schema_name(rt: &ResourceType, version: &str) -> String {
    let group = if rt.group.is_empty() { "core".to_string() } else { rt.group.clone() };
    format!("{group}.{version}.{}", rt.kind)
}

/// kubectl looks for `fieldValidation` among a PATCH operation's own parameters.
fn operation(rt: &ResourceType, version: &str, action: &str) -> Value {
    let names: &[&str] = match action {
        "list" | "get" => &["pretty"],
        "delete" => &["dryRun", "pretty"],
        "patch" => &["dryRun", "fieldManager", "fieldValidation", "force", "pretty"],
        _ => &["dryRun", "fieldManager", "fieldValidation", "pretty"],
    };
    json!({
        "operationId": format!("{action}{}", rt.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": version, "kind": rt.kind},
        "parameters": params(names),
        "responses": {"200": {"description": "OK"}},
    })
}

fn params(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
            .collect(),
    )
}

/// The document for one group-version, or None if nothing is served there.
pub(crate) fn group_version(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.in_group_version(group, version);
    if types.is_empty() {
        return None;
    }
    let base = format!("/{}", gv_path(group, version));
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for rt in &types {
        let prefix = if rt.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", rt.plural)
        } else {
            format!("{base}/{}", rt.plural)
        };
        paths.insert(
            prefix.clone(),
            json!({
                "get": operation(rt, version, "list"),
                "post": operation(rt, version, "post"),
            }),
        );
        let item_ops = json!({
            "get": operation(rt, version, "get"),
            "put": operation(rt, version, "put"),
            "patch": operation(rt, version, "patch"),
            "delete": operation(rt, version, "delete"),
        });
        paths.insert(format!("{prefix}/{{name}}"), item_ops);
        if rt.has_status(version) {
            paths.insert(
                format!("{prefix}/{{name}}/status"),
                json!({
                    "get": operation(rt, version, "get"),
                    "put": operation(rt, version, "put"),
                    "patch": operation(rt, version, "patch"),
                }),
            );
        }
        let mut schema = rt
            .version(version)
            .and_then(|v| v.schema.clone())
            .unwrap_or_else(|| json!({"type": "object", "description": format!("{} ({}); this in-memory server does not publish the full built-in schema.", rt.kind, rt.api_version(version))}));
        schema["x-kubernetes-group-version-kind"] =
            json!([{"group": rt.group, "version": version, "kind": rt.kind}]);
        schemas.insert(schema_name(rt, version), schema);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (geometer in-memory API server)", "version": "v1.37.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `/openapi/v3`: where each group-version document is, with a content hash for caching.
pub(crate) fn index(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            let Some(doc) = group_version(registry, &group, &version) else { continue };
            let mut h = DefaultHasher::new();
            doc.to_string().hash(&mut h);
            let path = gv_path(&group, &version);
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={:016X}", h.finish())}),
            );
        }
    }
    json!({"paths": paths})
}
