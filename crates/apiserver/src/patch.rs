//! PATCH in its four flavours: JSON patch (RFC 6902), JSON merge patch (RFC 7386), strategic
//! merge patch (built-in types only, as in Kubernetes) and server-side apply.

use std::sync::Arc;

use serde_json::{json, Value};

use super::convert::{to_served, to_storage};
use super::error::{ApiError, ApiResult};
use super::fieldset::Scope;
use super::list_semantics::ListSemantics;
use super::managed::{self, Writer};
use super::resource::ResourceRef;
use super::store::Store;
use super::strategic;
use super::write::{scope_of, Tracking, WriteOpts};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

const ACCEPTED: &str =
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

impl PatchKind {
    pub(crate) fn from_content_type(rt: &ResourceRef, content_type: &str) -> ApiResult<PatchKind> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/strategic-merge-patch+json" if rt.builtin.is_some() => Ok(PatchKind::Strategic),
            "application/strategic-merge-patch+json" => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: {ACCEPTED} (strategic merge patch is not supported for custom resources such as {})",
                rt.qualified()
            ))),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
            other => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: {ACCEPTED}, application/strategic-merge-patch+json; got \"{other}\""
            ))),
        }
    }
}

fn parse_json(body: &[u8], what: &str) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding {what}: {e}")))
}

/// YAML or JSON (JSON is YAML) for apply bodies.
pub(crate) fn parse_yaml_or_json(body: &[u8]) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text =
        std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the apply body is not UTF-8 text"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// Restricts an applied configuration to what the endpoint may change.
fn scoped(applied: &Value, scope: Scope) -> Value {
    let mut v = applied.clone();
    if let Some(m) = v.as_object_mut() {
        match scope {
            Scope::AllButStatus => {
                m.remove("status");
            }
            Scope::StatusOnly => {
                m.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
            }
            Scope::Everything => {}
        }
    }
    v
}

pub(crate) struct PatchRequest<'a> {
    pub kind: PatchKind,
    pub body: &'a [u8],
    pub subresource: Option<&'a str>,
    pub force: bool,
    /// `fieldManager` as given (apply requires one).
    pub explicit_manager: Option<&'a str>,
}

impl Store {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &mut self,
        rt: &ResourceRef,
        version: &str,
        ns: &str,
        name: &str,
        req: &PatchRequest<'_>,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        let existing = self.get(&rt.storage, ns, name).cloned();
        if req.kind == PatchKind::Apply {
            return self.apply(rt, version, ns, name, existing, req, opts);
        }
        let old = existing.ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        let served = to_served(rt, version, &old);
        let patched = match req.kind {
            PatchKind::Json => {
                let ops: json_patch::Patch = serde_json::from_slice(req.body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?;
                let mut doc = (*served).clone();
                json_patch::patch(&mut doc, &ops).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!("the JSON patch for {} \"{name}\" could not be applied: {e}", rt.qualified()),
                    )
                })?;
                doc
            }
            PatchKind::Merge => {
                let patch = parse_json(req.body, "merge patch")?;
                if !patch.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                let mut doc = (*served).clone();
                json_patch::merge(&mut doc, &patch);
                doc
            }
            PatchKind::Strategic => {
                let patch = parse_json(req.body, "strategic merge patch")?;
                strategic::apply(&served, &patch, ListSemantics::new(rt, version))
                    .map_err(ApiError::bad_request)?
            }
            PatchKind::Apply => unreachable!("handled above"),
        };
        self.commit_update(
            rt,
            version,
            &old,
            to_storage(rt, patched),
            req.subresource,
            opts,
            Tracking::Update,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        rt: &ResourceRef,
        version: &str,
        ns: &str,
        name: &str,
        existing: Option<Arc<Value>>,
        req: &PatchRequest<'_>,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        let manager = req.explicit_manager.ok_or_else(|| {
            ApiError::invalid(
                "PatchOptions",
                "",
                vec![("fieldManager".into(), "Required value: is required for apply patch".into())],
            )
        })?;
        let mut applied = parse_yaml_or_json(req.body)?;
        if !applied.is_object() {
            return Err(ApiError::bad_request("an apply configuration must be an object"));
        }
        let expected = rt.api_version(version);
        if applied["apiVersion"].as_str() != Some(expected.as_str())
            || applied["kind"].as_str() != Some(rt.kind.as_str())
        {
            return Err(ApiError::bad_request(format!(
                "an apply configuration for {} must say apiVersion: {expected} and kind: {}, got apiVersion: {} and kind: {}",
                rt.qualified(), rt.kind, applied["apiVersion"], applied["kind"]
            )));
        }
        if !applied["metadata"]["managedFields"].is_null() {
            return Err(ApiError::bad_request(
                "metadata.managedFields must be nil in an apply configuration",
            ));
        }
        // The name may be left out (the URL names the object), but must not contradict it.
        match applied["metadata"]["name"].as_str().unwrap_or("") {
            "" => applied["metadata"]["name"] = json!(name),
            n if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        let scope = scope_of(rt, version, req.subresource);
        let applied = scoped(&applied, scope);
        let writer = Writer {
            manager,
            api_version: &rt.api_version(version),
            subresource: req.subresource.unwrap_or(""),
            scope,
            now: &opts.now,
        };
        let lists = ListSemantics::new(rt, version);
        let Some(live) = existing else {
            if req.subresource.is_some() {
                return Err(ApiError::not_found(&rt.qualified(), name));
            }
            let mut skeleton =
                json!({"apiVersion": rt.api_version(version), "kind": rt.kind, "metadata": {"name": name}});
            if rt.namespaced {
                skeleton["metadata"]["namespace"] = json!(ns);
            }
            let obj = managed::apply(&skeleton, &applied, &writer, req.force, lists)
                .map_err(|c| conflict_error(rt, name, c))?;
            let mut opts = opts.clone();
            opts.manager = manager.to_string();
            return self.create_tracked(
                rt,
                version,
                Some(ns).filter(|_| rt.namespaced),
                obj,
                &opts,
                Tracking::Applied,
            );
        };
        let served = to_served(rt, version, &live);
        let result = managed::apply(&served, &applied, &writer, req.force, lists)
            .map_err(|c| conflict_error(rt, name, c))?;
        self.commit_update(
            rt,
            version,
            &live,
            to_storage(rt, result),
            req.subresource,
            opts,
            Tracking::Applied,
        )
    }
}

fn conflict_error(rt: &ResourceRef, name: &str, conflicts: Vec<managed::Conflict>) -> ApiError {
    let lines: Vec<String> =
        conflicts.iter().map(|c| format!("conflict with \"{}\": {}", c.manager, c.field)).collect();
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{}\"", c.manager), "field": c.field}))
        .collect();
    let message = if lines.len() == 1 {
        format!("Apply failed with 1 conflict: {}", lines[0])
    } else {
        format!("Apply failed with {} conflicts: {}", lines.len(), lines.join("\n"))
    };
    ApiError::new(409, "Conflict", message)
        .with_details(json!({"name": name, "group": rt.group, "kind": rt.plural, "causes": causes}))
}
