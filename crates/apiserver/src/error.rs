//! Failures as Kubernetes `Status` objects: every error the server gives is one of these, so
//! clients (kube-rs, kubectl) see the same shapes a real API server sends.

use serde_json::{json, Value};

/// A request that failed; becomes a `Status` body with `code` as the HTTP status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    /// The machine-readable `Status.reason` (`NotFound`, `Conflict`, ...).
    pub reason: &'static str,
    pub message: String,
    /// `Status.details`, when the reason has any (name, kind, causes).
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// `resource` is the qualified resource as k8s prints it (`pods`, `migplans.geometer.dev`).
    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(json!({"name": name, "kind": kind_part(resource), "group": group_part(resource)}))
    }

    pub fn path_not_found(path: &str) -> Self {
        Self::new(404, "NotFound", format!("the server could not find the requested resource (path {path})"))
    }

    pub fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{resource} \"{name}\" already exists"))
            .with_details(json!({"name": name, "kind": kind_part(resource), "group": group_part(resource)}))
    }

    pub fn conflict(resource: &str, name: &str, why: &str) -> Self {
        Self::new(409, "Conflict", format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"))
            .with_details(json!({"name": name, "kind": kind_part(resource), "group": group_part(resource)}))
    }

    pub fn stale(resource: &str, name: &str) -> Self {
        Self::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one cause per offending field, the way k8s validation reports.
    pub fn invalid(kind: &str, name: &str, causes: Vec<(String, String)>) -> Self {
        let summary: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let message = format!("{kind} \"{name}\" is invalid: {}", summary.join(", "));
        let causes: Vec<Value> = causes
            .into_iter()
            .map(|(f, m)| json!({"reason": cause_reason(&m), "message": m, "field": f}))
            .collect();
        Self::new(422, "Invalid", message).with_details(json!({"name": name, "kind": kind, "causes": causes}))
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(501, "NotImplemented", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// The `Status` object for the response body (and for watch `ERROR` events).
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// The cause type of a field error, from the words its message starts with (Go's
/// `field.ErrorType.String()`, kubernetes/kubernetes
/// `staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`). A wrong type reads
/// "Invalid value" too and so is reported as `FieldValueInvalid`, not `FieldValueTypeInvalid`.
fn cause_reason(message: &str) -> &'static str {
    const TYPES: &[(&str, &str)] = &[
        ("Required value", "FieldValueRequired"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Forbidden", "FieldValueForbidden"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Not found", "FieldValueNotFound"),
        ("Internal error", "InternalError"),
    ];
    TYPES.iter().find(|(words, _)| message.starts_with(words)).map_or("FieldValueInvalid", |(_, t)| t)
}

fn kind_part(qualified: &str) -> &str {
    qualified.split_once('.').map_or(qualified, |(r, _)| r)
}

fn group_part(qualified: &str) -> &str {
    qualified.split_once('.').map_or("", |(_, g)| g)
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;
