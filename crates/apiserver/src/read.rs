//! get and list: selectors, pagination with continue tokens, resourceVersion semantics.
//!
//! Every page of a paginated list reports the resourceVersion of the first page, so a watch
//! started from it replays whatever changed while the pages were read (later pages show the
//! current state, not a snapshot; reflectors converge either way).

use std::sync::Arc;

use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::events;
use super::request::Query;
use super::resource::{Builtin, ResourceType};
use super::selector::{FieldSelector, LabelSelector};
use super::store::{ObjKey, Store};

/// Label and field selectors of a list or watch, checked against the type.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub(crate) fn from_query(rt: &ResourceType, namespace: Option<&str>, q: &Query) -> ApiResult<Filter> {
        let labels =
            LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
        let mut fields =
            FieldSelector::parse(q.get("fieldSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
        if rt.is(Builtin::EventV1) {
            fields.rename(events::core_field_label);
        }
        for f in fields.fields() {
            if !rt.accepts_field_label(f) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {f} (for {} use one of: metadata.name, metadata.namespace{})",
                    rt.qualified(),
                    rt.field_labels.iter().map(|l| format!(", {l}")).collect::<String>()
                )));
            }
        }
        Ok(Filter { namespace: namespace.map(str::to_string), labels, fields })
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.labels.matches_object(obj) && self.fields.matches(obj)
    }
}

pub(crate) struct Page {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
}

fn encode_token(rv: u64, key: &ObjKey) -> String {
    let raw = format!("{rv}\n{}\n{}", key.0, key.1);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_token(token: &str) -> Option<(u64, ObjKey)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..token.len()).step_by(2).map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok()).collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.splitn(3, '\n');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_string(), parts.next()?.to_string())))
}

impl Store {
    pub(crate) fn get_object(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Arc<Value>> {
        self.get(&rt.storage, ns, name).cloned().ok_or_else(|| ApiError::not_found(&rt.qualified(), name))
    }

    pub(crate) fn list_objects(&self, rt: &ResourceType, filter: &Filter, q: &Query) -> ApiResult<Page> {
        let limit = q.number("limit")?.map(|l| l as usize).filter(|l| *l > 0);
        let (list_rv, start) = match q.get("continue") {
            Some(token) => {
                let (rv, key) = decode_token(token).ok_or_else(|| {
                    ApiError::bad_request(format!("continue key is not valid: \"{token}\""))
                })?;
                self.check_available(rv).map_err(|_| {
                    ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
                })?;
                (rv, Some(key))
            }
            None => (self.current_rv(), None),
        };
        if let (Some(rv), Some("Exact")) = (q.get("resourceVersion"), q.get("resourceVersionMatch")) {
            if rv.parse::<u64>().ok() != Some(self.current_rv()) {
                return Err(ApiError::gone(format!(
                    "resourceVersion {rv} is not available for an exact list: this server keeps only the latest state (current {})",
                    self.current_rv()
                )));
            }
        }
        let ns = filter.namespace.as_deref();
        let mut items = Vec::new();
        let mut last_key = None;
        let mut more = false;
        let candidates: Box<dyn Iterator<Item = &Arc<Value>>> = match (filter.fields.exact_name(), &start) {
            (Some(name), None) => match ns {
                Some(ns) => Box::new(self.get(&rt.storage, ns, name).into_iter()),
                None => self.iter(&rt.storage, None),
            },
            (_, Some(key)) => self.iter_after(&rt.storage, key.clone()),
            (None, None) => self.iter(&rt.storage, ns),
        };
        for obj in candidates {
            if let Some(ns) = ns {
                if obj["metadata"]["namespace"].as_str().unwrap_or("") != ns {
                    continue;
                }
            }
            if !filter.matches(obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            last_key = Some((
                obj["metadata"]["namespace"].as_str().unwrap_or("").to_string(),
                obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
            ));
            items.push(obj.clone());
        }
        let continue_token = match (more, last_key) {
            (true, Some(key)) => Some(encode_token(list_rv, &key)),
            _ => None,
        };
        Ok(Page { items, resource_version: list_rv, continue_token })
    }
}

/// `{"kind": "PodList", ...}` written without building one big Value.
pub(crate) fn list_json(
    rt: &ResourceType,
    version: &str,
    page: &Page,
    convert: impl Fn(&Arc<Value>) -> Arc<Value>,
) -> Vec<u8> {
    let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(c) = &page.continue_token {
        meta["continue"] = json!(c);
    }
    let mut out = Vec::with_capacity(256 + page.items.len() * 512);
    out.extend_from_slice(b"{\"kind\":");
    out.extend_from_slice(json!(rt.list_kind()).to_string().as_bytes());
    out.extend_from_slice(b",\"apiVersion\":");
    out.extend_from_slice(json!(rt.api_version(version)).to_string().as_bytes());
    out.extend_from_slice(b",\"metadata\":");
    out.extend_from_slice(meta.to_string().as_bytes());
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &*convert(item)).expect("serializing a Value to memory cannot fail");
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let key = ("default".to_string(), "pod-1".to_string());
        assert_eq!(decode_token(&encode_token(42, &key)), Some((42, key)));
        assert_eq!(decode_token("zz"), None);
    }
}
