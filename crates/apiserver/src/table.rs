//! Server-side printing: `Accept: application/json;as=Table;g=meta.k8s.io;v=v1` gets a
//! `meta.k8s.io/v1` Table, which is what `kubectl get` renders. Also the
//! `PartialObjectMetadata` views that metadata-only clients ask for.

use std::sync::Arc;

use serde_json::{json, Value};

use super::jsonpath::JsonPath;
use super::printers;
use super::resource::{Printer, PrinterColumn, ResourceType};

/// Kubernetes' `duration.HumanDuration`, which kubectl's AGE column shows.
pub(crate) fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age_of(now: jiff::Timestamp) -> impl Fn(&Value) -> String {
    move |t: &Value| match t.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) {
        Some(ts) => human_duration(now.duration_since(ts).as_secs()),
        None => "<unknown>".into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub(crate) fn from_query(v: Option<&str>) -> Include {
        match v {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

pub(crate) fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

pub(crate) fn partial_metadata_list(items: &[Arc<Value>], list_meta: Value) -> Value {
    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "items": items.iter().map(|i| partial_metadata(i)).collect::<Vec<_>>()})
}

fn column_def(name: &str, type_: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority})
}

fn custom_cell(col: &PrinterColumn, obj: &Value, age: &dyn Fn(&Value) -> String) -> Value {
    let Ok(path) = JsonPath::parse(&col.json_path) else { return Value::Null };
    let found = path.find(obj);
    let one = |v: &Value| -> Value {
        match (col.type_.as_str(), v) {
            ("date", Value::String(_)) => json!(age(v)),
            ("integer", Value::Number(n)) if n.is_i64() || n.is_u64() => v.clone(),
            ("number", Value::Number(_)) | ("boolean", Value::Bool(_)) => v.clone(),
            ("string", Value::String(_)) => v.clone(),
            ("string", other) => json!(other.to_string()),
            _ => Value::Null,
        }
    };
    match found.as_slice() {
        [] => Value::Null,
        [v] => one(v),
        many => json!(many
            .iter()
            .map(|v| match one(v) {
                Value::String(s) => s,
                Value::Null => String::new(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")),
    }
}

/// A Table of `objects` (already in the served version).
pub(crate) fn table(
    rt: &ResourceType,
    version: &str,
    objects: &[Arc<Value>],
    include: Include,
    list_meta: Value,
) -> Value {
    let age = age_of(jiff::Timestamp::now());
    let printer = rt.version(version).map(|v| v.printer.clone()).unwrap_or(Printer::Default);
    let mut defs = vec![column_def(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically.",
        0,
    )];
    match &printer {
        Printer::Builtin(b) => defs.extend(
            printers::columns(*b).iter().map(|c| column_def(c.name, c.type_, "", c.description, c.priority)),
        ),
        Printer::Columns(cols) => defs.extend(
            cols.iter().map(|c| column_def(&c.name, &c.type_, &c.format, &c.description, c.priority)),
        ),
        Printer::Default => defs.push(column_def(
            "Age",
            "date",
            "",
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
            0,
        )),
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut cells = vec![obj["metadata"]["name"].clone()];
            match &printer {
                Printer::Builtin(b) => cells.extend(printers::cells(*b, obj, &age)),
                Printer::Columns(cols) => cells.extend(cols.iter().map(|c| custom_cell(c, obj, &age))),
                Printer::Default => cells.push(json!(age(&obj["metadata"]["creationTimestamp"]))),
            }
            let mut row = json!({"cells": cells});
            match include {
                Include::None => {}
                Include::Metadata => row["object"] = partial_metadata(obj),
                Include::Object => row["object"] = (**obj).clone(),
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(130), "2m10s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(50 * 3600), "2d2h");
        assert_eq!(human_duration(-5), "<invalid>");
    }
}
