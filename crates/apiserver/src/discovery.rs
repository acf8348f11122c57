//! Discovery documents: the legacy ones (`/api`, `/apis`, `/apis/{g}/{v}`) and the aggregated
//! `apidiscovery.k8s.io/v2` lists kubectl (1.32 to 1.37) asks for first.

use serde_json::{json, Value};

use super::registry::Registry;
use super::resource::ResourceType;

const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// `(subresource, group, version, kind, verbs)` for each subresource of `rt` at `version`.
fn subresources(
    rt: &ResourceType,
    version: &str,
) -> Vec<(&'static str, &'static str, String, String, &'static [&'static str])> {
    rt.subresources(version)
        .into_iter()
        .map(|sub| match sub {
            "status" => ("status", "", version.to_string(), rt.kind.clone(), STATUS_VERBS),
            "eviction" => ("eviction", "policy", "v1".to_string(), "Eviction".to_string(), &["create"][..]),
            _ => ("binding", "", "v1".to_string(), "Binding".to_string(), &["create"][..]),
        })
        .collect()
}

pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let gvs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
}

pub(crate) fn group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_json(&g, &vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn group(registry: &Registry, group: &str) -> Option<Value> {
    let (g, vs) = registry.groups().into_iter().find(|(g, _)| g == group && !g.is_empty())?;
    let mut v = group_json(&g, &vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

pub(crate) fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    if !registry.has_version(group, version) {
        return None;
    }
    let mut resources = Vec::new();
    for rt in registry.in_group_version(group, version) {
        let mut r = json!({
            "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced, "kind": rt.kind,
            "verbs": VERBS, "storageVersionHash": "",
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            r["categories"] = json!(rt.categories);
        }
        resources.push(r);
        for (sub, g, v, kind, verbs) in subresources(&rt, version) {
            let mut s = json!({"name": format!("{}/{sub}", rt.plural), "singularName": "", "namespaced": rt.namespaced, "kind": kind, "verbs": verbs});
            if !g.is_empty() || sub != "status" {
                s["group"] = json!(g);
                s["version"] = json!(v);
            }
            resources.push(s);
        }
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// The aggregated discovery list for `/api` (`core`) or `/apis`.
pub(crate) fn aggregated(registry: &Registry, core: bool, api_version: &str) -> Value {
    let mut items = Vec::new();
    for (group, versions) in registry.groups() {
        if group.is_empty() != core {
            continue;
        }
        let versions: Vec<Value> = versions
            .iter()
            .map(|version| {
                let resources: Vec<Value> = registry
                    .in_group_version(&group, version)
                    .iter()
                    .map(|rt| {
                        let subs: Vec<Value> = subresources(rt, version)
                            .into_iter()
                            .map(|(sub, g, v, kind, verbs)| {
                                let g = if sub == "status" { group.as_str() } else { g };
                                json!({"subresource": sub, "responseKind": {"group": g, "version": v, "kind": kind}, "verbs": verbs})
                            })
                            .collect();
                        let mut r = json!({
                            "resource": rt.plural,
                            "responseKind": {"group": group, "version": version, "kind": rt.kind},
                            "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
                            "singularResource": rt.singular,
                            "verbs": VERBS,
                        });
                        if !rt.short_names.is_empty() {
                            r["shortNames"] = json!(rt.short_names);
                        }
                        if !rt.categories.is_empty() {
                            r["categories"] = json!(rt.categories);
                        }
                        if !subs.is_empty() {
                            r["subresources"] = json!(subs);
                        }
                        r
                    })
                    .collect();
                json!({"version": version, "resources": resources, "freshness": "Current"})
            })
            .collect();
        items.push(json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions}));
    }
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{api_version}"), "metadata": {}, "items": items})
}

/// Which aggregated discovery version an Accept header asks for, if any.
pub(crate) fn wants_aggregated(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        if part.contains("as=APIGroupDiscoveryList") && part.contains("g=apidiscovery.k8s.io") {
            if part.contains("v=v2beta1") {
                return Some("v2beta1");
            }
            if part.contains("v=v2") {
                return Some("v2");
            }
        }
    }
    None
}

pub(crate) fn version_info() -> Value {
    json!({"major": "1", "minor": "37", "gitVersion": "v1.37.0+geometer-apiserver", "gitCommit": "", "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "n/a", "compiler": "rustc", "platform": "linux/amd64"})
}
