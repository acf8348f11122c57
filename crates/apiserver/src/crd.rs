//! CustomResourceDefinitions: checking one, turning it into a served type, and the status
//! (`Established`, `NamesAccepted`) the server reports back for it.

use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::registry::Registry;
use super::resource::{Printer, PrinterColumn, ResourceType, StorageKey, VersionInfo};

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str().unwrap_or("")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Checks a CRD the way the real API server's validation would, and builds its served type.
pub(crate) fn resource_from_crd(crd: &Value, registry: &Registry) -> ApiResult<ResourceType> {
    let name = str_at(crd, &["metadata", "name"]);
    let spec = &crd["spec"];
    let group = str_at(spec, &["group"]);
    let names = &spec["names"];
    let plural = str_at(names, &["plural"]);
    let kind = str_at(names, &["kind"]);
    let mut causes: Vec<(String, String)> = Vec::new();
    if group.is_empty() || !group.contains('.') {
        causes.push((
            "spec.group".into(),
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if !is_dns_label(plural) {
        causes.push((
            "spec.names.plural".into(),
            format!("Invalid value: \"{plural}\": a lowercase DNS-1035 label is required"),
        ));
    }
    if kind.is_empty() {
        causes.push(("spec.names.kind".into(), "Required value".into()));
    }
    if name != format!("{plural}.{group}") {
        causes.push((
            "metadata.name".into(),
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group (\"{plural}.{group}\")"),
        ));
    }
    let scope = str_at(spec, &["scope"]);
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push((
            "spec.scope".into(),
            format!("Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""),
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push((
            "spec.versions".into(),
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    let storage_count = versions.iter().filter(|v| v["storage"].as_bool() == Some(true)).count();
    if !versions.is_empty() && storage_count != 1 {
        causes.push((
            "spec.versions".into(),
            format!("Invalid value: must have exactly one version marked as storage version, found {storage_count}"),
        ));
    }
    let mut served = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let vname = str_at(v, &["name"]);
        if !is_dns_label(vname) {
            causes.push((
                format!("spec.versions[{i}].name"),
                format!("Invalid value: \"{vname}\": a DNS-1035 label is required"),
            ));
        }
        if v["schema"]["openAPIV3Schema"].is_null() {
            causes.push((
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required".into(),
            ));
        }
        if v["served"].as_bool() != Some(true) {
            continue;
        }
        let columns = printer_columns(&v["additionalPrinterColumns"], i, &mut causes);
        served.push((
            v["storage"].as_bool() == Some(true),
            VersionInfo {
                name: vname.to_string(),
                schema: Some(v["schema"]["openAPIV3Schema"].clone()),
                printer: if columns.is_empty() { Printer::Default } else { Printer::Columns(columns) },
                status_subresource: v["subresources"]["status"].is_object(),
            },
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("CustomResourceDefinition", name, causes));
    }
    if let Some(other) =
        registry.all().iter().find(|t| t.group == group && t.kind == kind && t.plural != plural)
    {
        return Err(ApiError::invalid(
            "CustomResourceDefinition",
            name,
            vec![(
                "spec.names.kind".into(),
                format!("Invalid value: \"{kind}\": is already in use by {}", other.qualified()),
            )],
        ));
    }
    // Preferred version first: the storage version, as kubectl expects from discovery.
    served.sort_by_key(|(storage, _)| !storage);
    let selectable = spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| v["selectableFields"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["jsonPath"].as_str().map(|p| p.trim_start_matches('.').to_string()))
        .collect();
    Ok(ResourceType {
        group: group.to_string(),
        versions: served.into_iter().map(|(_, v)| v).collect(),
        plural: plural.to_string(),
        singular: match str_at(names, &["singular"]) {
            "" => kind.to_lowercase(),
            s => s.to_string(),
        },
        kind: kind.to_string(),
        namespaced: scope == "Namespaced",
        short_names: strings(&names["shortNames"]),
        categories: strings(&names["categories"]),
        storage: StorageKey::new(group, plural),
        builtin: None,
        field_labels: selectable,
    })
}

fn printer_columns(
    v: &Value,
    version_index: usize,
    causes: &mut Vec<(String, String)>,
) -> Vec<PrinterColumn> {
    let mut out = Vec::new();
    for (i, c) in v.as_array().into_iter().flatten().enumerate() {
        let field = format!("spec.versions[{version_index}].additionalPrinterColumns[{i}]");
        let type_ = str_at(c, &["type"]);
        if !matches!(type_, "string" | "integer" | "number" | "boolean" | "date") {
            causes.push((
                format!("{field}.type"),
                format!("Unsupported value: \"{type_}\": supported values: \"boolean\", \"date\", \"integer\", \"number\", \"string\""),
            ));
        }
        let json_path = str_at(c, &["jsonPath"]);
        if let Err(e) = super::jsonpath::JsonPath::parse(json_path) {
            causes.push((format!("{field}.jsonPath"), format!("Invalid value: \"{json_path}\": {e}")));
        }
        out.push(PrinterColumn {
            name: str_at(c, &["name"]).to_string(),
            type_: type_.to_string(),
            format: str_at(c, &["format"]).to_string(),
            description: str_at(c, &["description"]).to_string(),
            priority: c["priority"].as_i64().unwrap_or(0),
            json_path: json_path.to_string(),
        });
    }
    out
}

/// The status a real server reports once a CRD's names are accepted and it is served.
pub(crate) fn established_status(crd: &Value, now: &str) -> Value {
    let names = &crd["spec"]["names"];
    let mut accepted = names.clone();
    if accepted["singular"].as_str().unwrap_or("").is_empty() {
        accepted["singular"] = json!(str_at(names, &["kind"]).to_lowercase());
    }
    if accepted["listKind"].as_str().unwrap_or("").is_empty() {
        accepted["listKind"] = json!(format!("{}List", str_at(names, &["kind"])));
    }
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .map(|v| v["name"].clone())
        .collect();
    json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": stored,
    })
}
