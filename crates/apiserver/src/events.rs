//! `events.k8s.io/v1` is another view of core/v1 events (one storage, as in Kubernetes), so
//! `kubectl describe` shows events that kube-rs's `Recorder` writes through events.k8s.io.

use serde_json::{Map, Value};

/// `(events.k8s.io/v1 field, core/v1 field)`
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(obj: &Value, api_version: &str, from_events_v1: bool) -> Value {
    let Some(m) = obj.as_object() else { return obj.clone() };
    let mut out = Map::new();
    for (k, v) in m {
        let key = RENAMES
            .iter()
            .find(|(new, old)| if from_events_v1 { new == k } else { old == k })
            .map(|(new, old)| if from_events_v1 { *old } else { *new })
            .unwrap_or(k.as_str());
        out.insert(key.to_string(), v.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    Value::Object(out)
}

/// An events.k8s.io/v1 Event as stored (core/v1 field names).
pub(crate) fn to_core(event: &Value) -> Value {
    rename(event, "v1", true)
}

/// A stored event as events.k8s.io/v1 shows it.
pub(crate) fn to_events_v1(event: &Value) -> Value {
    rename(event, "events.k8s.io/v1", false)
}

/// Field selector labels of the events.k8s.io view, in stored (core) names.
pub(crate) fn core_field_label(label: &str) -> Option<String> {
    for (new, old) in RENAMES {
        if let Some(rest) = label.strip_prefix(new) {
            if rest.is_empty() || rest.starts_with('.') {
                return Some(format!("{old}{rest}"));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "regarding": {"name": "n"}, "note": "hi",
            "reportingController": "geometer", "reason": "Drained"});
        let core = to_core(&v1);
        assert_eq!(core["involvedObject"]["name"], "n");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(to_events_v1(&core), v1);
        assert_eq!(core_field_label("regarding.name").as_deref(), Some("involvedObject.name"));
        assert_eq!(core_field_label("reason"), None);
    }
}
