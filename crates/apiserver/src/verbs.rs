//! What each verb does to the store once the router has checked the request: get, watch,
//! create (with the pod `eviction` and `binding` subresources), update, patch, delete and
//! deletecollection. Lists are the router's.

use std::time::Duration;

use serde_json::json;

use super::convert::to_served;
use super::delete::DeleteOpts;
use super::error::{ApiError, ApiResult};
use super::now;
use super::patch::{PatchKind, PatchRequest};
use super::read::{list_json, Filter, Page};
use super::request::Query;
use super::resource::Builtin;
use super::response::{bytes_response, json_response, streamed, Body};
use super::router::{parse_body, write_opts, Call};
use super::selector::FieldSelector;
use super::table::Include;
use super::watch::{self, Format, WatchSpec};

type Response = ApiResult<http::Response<Body>>;

impl Call<'_> {
    pub(crate) fn get(&self) -> Response {
        let obj = self.inner.store.lock().expect("store lock poisoned").get_object(
            &self.rt,
            self.ns_str(),
            self.name,
        )?;
        Ok(self.respond(200, &obj))
    }

    pub(crate) fn watch(&self) -> Response {
        let req = self.req;
        super::list_options::check(&req.query, true)?;
        let mut filter = Filter::from_query(&self.rt, self.ns, &req.query)?;
        if !self.name.is_empty() {
            let named = format!("metadata.name={}", self.name);
            filter.fields = FieldSelector::parse(&named).map_err(ApiError::bad_request)?;
        }
        let from = match req.query.get("resourceVersion") {
            None | Some("0") => None,
            Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resourceVersion \"{rv}\": must be a number"))
            })?),
        };
        let send_initial = req.query.flag("sendInitialEvents");
        let format = if req.wants_table() {
            Format::Table(Include::from_query(req.query.get("includeObject")))
        } else if req.wants_partial_metadata() {
            Format::Metadata
        } else {
            Format::Json
        };
        let spec = WatchSpec {
            rt: self.rt.clone(),
            version: self.version.to_string(),
            filter,
            from: if send_initial { None } else { from },
            bookmarks: req.query.flag("allowWatchBookmarks"),
            initial_events_end: send_initial,
            timeout: req.query.number("timeoutSeconds")?.map(Duration::from_secs),
            format,
        };
        let rx = watch::start(self.inner, spec);
        Ok(http::Response::builder()
            .status(200)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(streamed(rx))
            .expect("static headers are valid"))
    }

    pub(crate) fn create(&self) -> Response {
        let body = parse_body(self.req)?;
        let opts = write_opts(self.req)?;
        let (ns, name) = (self.ns_str(), self.name);
        let mut store = self.inner.store.lock().expect("store lock poisoned");
        match self.subresource {
            Some("eviction") => {
                Ok(json_response(201, &store.evict(ns, name, &body, opts.dry_run, &opts.now)?))
            }
            Some("binding") => Ok(json_response(201, &store.bind(ns, name, &body, opts.dry_run, &opts.now)?)),
            _ if !name.is_empty() => Err(ApiError::method_not_allowed(format!(
                "POST is not supported on a named {}; use PUT or PATCH",
                self.rt.kind
            ))),
            _ => {
                let obj = store.create(&self.rt, self.version, self.ns, body, &opts)?;
                drop(store);
                Ok(self.respond(201, &obj))
            }
        }
    }

    pub(crate) fn update(&self) -> Response {
        let body = parse_body(self.req)?;
        let opts = write_opts(self.req)?;
        let obj = self.inner.store.lock().expect("store lock poisoned").update(
            &self.rt,
            self.version,
            self.ns_str(),
            self.name,
            body,
            self.subresource,
            &opts,
        )?;
        Ok(self.respond(200, &obj))
    }

    pub(crate) fn patch(&self) -> Response {
        let req = self.req;
        let kind = PatchKind::from_content_type(&self.rt, &req.content_type)?;
        let opts = write_opts(req)?;
        let patch = PatchRequest {
            kind,
            body: &req.body,
            subresource: self.subresource,
            force: req.query.flag("force"),
            explicit_manager: req.query.get("fieldManager"),
        };
        let mut store = self.inner.store.lock().expect("store lock poisoned");
        let existed = store.get(&self.rt.storage, self.ns_str(), self.name).is_some();
        let obj = store.patch(&self.rt, self.version, self.ns_str(), self.name, &patch, &opts)?;
        drop(store);
        Ok(self.respond(if existed { 200 } else { 201 }, &obj))
    }

    pub(crate) fn delete(&self) -> Response {
        let opts = self.delete_opts()?;
        let deleted = self.inner.store.lock().expect("store lock poisoned").delete(
            &self.rt,
            self.ns_str(),
            self.name,
            &opts,
            &now(),
        )?;
        // A terminating pod is still there: 200 with the pod, as kube-apiserver answers.
        if self.rt.is(Builtin::Pod) {
            return Ok(self.respond(200, &deleted.object));
        }
        if !deleted.gone {
            return Ok(self.respond(202, &deleted.object));
        }
        let rt = &self.rt;
        Ok(json_response(
            200,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": self.name, "group": rt.group, "kind": rt.plural, "uid": deleted.object["metadata"]["uid"]}}),
        ))
    }

    pub(crate) fn delete_collection(&self) -> Response {
        let opts = self.delete_opts()?;
        let filter = Filter::from_query(&self.rt, self.ns, &self.req.query)?;
        let mut store = self.inner.store.lock().expect("store lock poisoned");
        let page = store.list_objects(&self.rt, &filter, &Query::default())?;
        let mut deleted = Vec::new();
        let now = now();
        for obj in &page.items {
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
            let name = obj["metadata"]["name"].as_str().unwrap_or("");
            if let Ok(d) = store.delete(&self.rt, ns, name, &opts, &now) {
                deleted.push(d.object);
            }
        }
        let done = Page { items: deleted, resource_version: store.current_rv(), continue_token: None };
        drop(store);
        let (rt, version) = (&self.rt, self.version);
        Ok(bytes_response(
            200,
            "application/json",
            list_json(rt, version, &done, |o| to_served(rt, version, o)),
        ))
    }

    fn delete_opts(&self) -> ApiResult<DeleteOpts> {
        let body = parse_body(self.req)?;
        DeleteOpts::parse(&body, self.req.query.get("propagationPolicy"), self.req.dry_run())
    }
}
