//! The checks kube-apiserver makes on a list's or watch's options before serving it, with its
//! answers: `resourceVersionMatch` and `sendInitialEvents` only in the combinations it allows
//! (422, kind `ListOptions`), as apimachinery's `ValidateListOptions` does
//! (kubernetes, `staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go`).

use super::error::{ApiError, ApiResult};
use super::request::Query;

/// Refuses list or watch options a real server refuses.
pub(crate) fn check(q: &Query, watch: bool) -> ApiResult<()> {
    let send_initial = q.get("sendInitialEvents").map(|_| q.flag("sendInitialEvents"));
    let rv_match = q.get("resourceVersionMatch").filter(|m| !m.is_empty());
    let mut causes: Vec<(String, String)> = Vec::new();
    let mut forbid = |field: &str, why: String| causes.push((field.to_string(), why));
    if watch {
        if send_initial.is_some() && rv_match != Some("NotOlderThan") {
            forbid(
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into(),
            );
        }
        if let Some(m) = rv_match {
            if send_initial.is_none() {
                forbid("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".into());
            }
            if m != "NotOlderThan" {
                forbid(
                    "resourceVersionMatch",
                    format!("Unsupported value: \"{m}\": supported values: \"NotOlderThan\""),
                );
            }
        }
    } else {
        if let Some(m) = rv_match {
            if q.get("resourceVersion").is_none_or(str::is_empty) {
                forbid(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
                );
            }
            if !matches!(m, "Exact" | "NotOlderThan") {
                forbid(
                    "resourceVersionMatch",
                    format!(
                        "Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                    ),
                );
            }
        }
        if send_initial.is_some() {
            forbid("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for list".into());
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("ListOptions.meta.k8s.io", "", causes))
    }
}
