//! One entry point for every request, whether it came through the tower service or HTTP:
//! faults first, then discovery or the resource handlers, then the request log.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::convert::to_served;
use super::discovery;
use super::error::{ApiError, ApiResult};
use super::faults::RequestFacts;
use super::openapi;
use super::read::{list_json, Filter};
use super::request::{ApiRequest, ResourcePath, Target, Verb};
use super::resource::{Builtin, ResourceRef};
use super::response::{bytes_response, error_response, json_response, Body};
use super::table::{self, Include};
use super::write::WriteOpts;
use super::{now, Inner, RecordedRequest};

pub(crate) async fn handle(inner: &Arc<Inner>, req: http::Request<Bytes>) -> http::Response<Body> {
    let req = ApiRequest::from_http(req);
    let (verb, resource, namespace, name) = match &req.target {
        Target::Resource(rp) => (
            req.verb(rp),
            match &rp.subresource {
                Some(s) => format!("{}/{s}", rp.plural),
                None => rp.plural.clone(),
            },
            rp.namespace.clone(),
            rp.name.clone(),
        ),
        _ => (None, String::new(), None, None),
    };
    let verdict = inner.faults.verdict(&RequestFacts {
        verb,
        resource: &resource,
        namespace: namespace.as_deref(),
        name: name.as_deref(),
    });
    if let Some(d) = verdict.delay {
        tokio::time::sleep(d).await;
    }
    let resp = match verdict.error {
        Some(err) => error_response(&err),
        None => route(inner, &req),
    };
    inner.record(RecordedRequest {
        method: req.method.to_string(),
        path: req.path.clone(),
        query: req.raw_query.clone(),
        verb,
        group: match &req.target {
            Target::Resource(rp) => Some(rp.group.clone()),
            _ => None,
        },
        resource: (!resource.is_empty()).then_some(resource),
        namespace,
        name,
        status: resp.status().as_u16(),
        user_agent: req.user_agent.clone(),
    });
    resp
}

fn route(inner: &Arc<Inner>, req: &ApiRequest) -> http::Response<Body> {
    let result = match &req.target {
        Target::Resource(rp) => resource_request(inner, req, rp),
        Target::CoreVersions | Target::Groups => {
            let core = req.target == Target::CoreVersions;
            let store = inner.store.lock().expect("store lock poisoned");
            match discovery::wants_aggregated(&req.accept) {
                Some(v) => Ok(bytes_response(
                    200,
                    &format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"),
                    serde_json::to_vec(&discovery::aggregated(&store.registry, core, v))
                        .expect("serializable"),
                )),
                None if core => Ok(json_response(200, &discovery::core_versions(&inner.server_address()))),
                None => Ok(json_response(200, &discovery::group_list(&store.registry))),
            }
        }
        Target::Group(g) => {
            let store = inner.store.lock().expect("store lock poisoned");
            discovery::group(&store.registry, g)
                .map(|v| json_response(200, &v))
                .ok_or_else(|| ApiError::path_not_found(&req.path))
        }
        Target::GroupVersion { group, version } => {
            let store = inner.store.lock().expect("store lock poisoned");
            discovery::resource_list(&store.registry, group, version)
                .map(|v| json_response(200, &v))
                .ok_or_else(|| ApiError::path_not_found(&req.path))
        }
        Target::OpenApiV2 => Err(ApiError::path_not_found(&req.path)),
        Target::OpenApiV3(gv) => {
            let store = inner.store.lock().expect("store lock poisoned");
            match gv {
                None => Ok(json_response(200, &openapi::index(&store.registry))),
                Some((g, v)) => openapi::group_version(&store.registry, g, v)
                    .map(|doc| json_response(200, &doc))
                    .ok_or_else(|| ApiError::path_not_found(&req.path)),
            }
        }
        Target::Version => Ok(json_response(200, &discovery::version_info())),
        Target::Health => Ok(bytes_response(200, "text/plain; charset=utf-8", "ok")),
        Target::Unknown => Err(ApiError::path_not_found(&req.path)),
    };
    result.unwrap_or_else(|e| error_response(&e))
}

pub(crate) fn parse_body(req: &ApiRequest) -> ApiResult<Value> {
    if req.body.is_empty() {
        return Ok(json!({}));
    }
    let media = req.content_type.split(';').next().unwrap_or("").trim();
    if media == "application/vnd.kubernetes.protobuf" {
        return super::protobuf::decode(&req.body);
    }
    if media.contains("protobuf") || media.contains("cbor") {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {media})"
        )));
    }
    if media == "application/yaml" {
        return super::patch::parse_yaml_or_json(&req.body);
    }
    serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

pub(crate) fn write_opts(req: &ApiRequest) -> ApiResult<WriteOpts> {
    let strict = match req.query.get("fieldValidation") {
        None | Some("Ignore") | Some("Warn") => false,
        Some("Strict") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation: invalid value \"{other}\": use Ignore, Warn or Strict"
            )))
        }
    };
    match req.query.get("dryRun") {
        None | Some("All") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: invalid value \"{other}\": the only value is All"
            )))
        }
    }
    let mut opts = WriteOpts::new(&req.field_manager(), now());
    opts.dry_run = req.dry_run();
    opts.strict = strict;
    Ok(opts)
}

pub(crate) fn object_response(
    code: u16,
    req: &ApiRequest,
    rt: &ResourceRef,
    version: &str,
    obj: &Arc<Value>,
) -> http::Response<Body> {
    let served = to_served(rt, version, obj);
    if req.wants_table() {
        let include = Include::from_query(req.query.get("includeObject"));
        let meta = json!({"resourceVersion": served["metadata"]["resourceVersion"]});
        return json_response(code, &table::table(rt, version, &[served], include, meta));
    }
    if req.wants_partial_metadata() {
        return json_response(code, &table::partial_metadata(&served));
    }
    json_response(code, &served)
}

/// One resource request: the resource type, the version and the object it names, once the
/// path and the verb have been checked against the resource.
pub(crate) struct Call<'a> {
    pub(crate) inner: &'a Arc<Inner>,
    pub(crate) req: &'a ApiRequest,
    pub(crate) rt: ResourceRef,
    pub(crate) version: &'a str,
    /// The path's namespace; None for a cluster-scoped resource or an all-namespaces list.
    pub(crate) ns: Option<&'a str>,
    /// Empty for a collection.
    pub(crate) name: &'a str,
    pub(crate) subresource: Option<&'a str>,
}

impl Call<'_> {
    /// The namespace as the store keys it: empty for cluster-scoped objects.
    pub(crate) fn ns_str(&self) -> &str {
        self.ns.unwrap_or("")
    }

    pub(crate) fn respond(&self, code: u16, obj: &Arc<Value>) -> http::Response<Body> {
        object_response(code, self.req, &self.rt, self.version, obj)
    }
}

fn resource_request(
    inner: &Arc<Inner>,
    req: &ApiRequest,
    rp: &ResourcePath,
) -> ApiResult<http::Response<Body>> {
    let (call, verb) = resolve(inner, req, rp)?;
    match verb {
        Verb::Get => call.get(),
        Verb::List => list(inner, req, &call.rt, call.version, call.ns),
        Verb::Watch => call.watch(),
        Verb::Create => call.create(),
        Verb::Update => call.update(),
        Verb::Patch => call.patch(),
        Verb::Delete => call.delete(),
        Verb::DeleteCollection => call.delete_collection(),
    }
}

/// The resource the path names and the verb, refused as kube-apiserver refuses them: an
/// unknown resource or a namespace where none belongs is 404, a verb the (sub)resource does
/// not serve is 405.
fn resolve<'a>(
    inner: &'a Arc<Inner>,
    req: &'a ApiRequest,
    rp: &'a ResourcePath,
) -> ApiResult<(Call<'a>, Verb)> {
    let rt = {
        let store = inner.store.lock().expect("store lock poisoned");
        store.registry.lookup(&rp.group, &rp.version, &rp.plural)
    }
    .ok_or_else(|| ApiError::path_not_found(&req.path))?;
    let version = rp.version.as_str();
    let verb = req.verb(rp).ok_or_else(|| {
        ApiError::method_not_allowed(format!("method {} is not supported on {}", req.method, req.path))
    })?;
    let ns = rp.namespace.as_deref();
    let misplaced_namespace = !rt.namespaced && ns.is_some();
    let missing_namespace = rt.namespaced && rp.name.is_some() && ns.is_none();
    if misplaced_namespace || missing_namespace {
        return Err(ApiError::path_not_found(&req.path));
    }
    if let Some(sub) = &rp.subresource {
        let allowed = match sub.as_str() {
            "status" if rt.has_status(version) => matches!(verb, Verb::Get | Verb::Update | Verb::Patch),
            "eviction" | "binding" if rt.is(Builtin::Pod) => verb == Verb::Create,
            _ => return Err(ApiError::path_not_found(&req.path)),
        };
        if !allowed {
            return Err(ApiError::method_not_allowed(format!(
                "{verb} is not supported on {}/{sub}",
                rt.plural
            )));
        }
    }
    let name = rp.name.as_deref().unwrap_or("");
    let call = Call { inner, req, rt, version, ns, name, subresource: rp.subresource.as_deref() };
    Ok((call, verb))
}

fn list(
    inner: &Arc<Inner>,
    req: &ApiRequest,
    rt: &ResourceRef,
    version: &str,
    ns: Option<&str>,
) -> ApiResult<http::Response<Body>> {
    super::list_options::check(&req.query, false)?;
    let filter = Filter::from_query(rt, ns, &req.query)?;
    let page = inner.store.lock().expect("store lock poisoned").list_objects(rt, &filter, &req.query)?;
    let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(c) = &page.continue_token {
        meta["continue"] = json!(c);
    }
    if req.wants_table() {
        let items: Vec<Arc<Value>> = page.items.iter().map(|o| to_served(rt, version, o)).collect();
        let include = Include::from_query(req.query.get("includeObject"));
        return Ok(json_response(200, &table::table(rt, version, &items, include, meta)));
    }
    if req.wants_partial_metadata() {
        return Ok(json_response(200, &table::partial_metadata_list(&page.items, meta)));
    }
    Ok(bytes_response(200, "application/json", list_json(rt, version, &page, |o| to_served(rt, version, o))))
}
