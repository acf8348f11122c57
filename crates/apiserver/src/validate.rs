//! Checks every write goes through: names, labels, and for built-in types that the object
//! decodes as its k8s-openapi type (plus the few semantic rules Geometer's code could trip).

use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::resource::{Builtin, ResourceType};

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && (s.is_empty()
            || (s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()))
}

fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

/// Name, namespace-name and label rules, as 422 Invalid with one cause per field.
pub(crate) fn metadata(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    let mut causes = Vec::new();
    let name_ok = if rt.is(Builtin::Namespace) { is_dns_label(name) } else { is_dns_subdomain(name) };
    if !name_ok {
        let rule = if rt.is(Builtin::Namespace) {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
        } else {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        };
        causes.push(("metadata.name".to_string(), format!("Invalid value: \"{name}\": {rule}")));
    }
    for (k, v) in meta["labels"].as_object().into_iter().flatten() {
        if !is_label_key(k) {
            causes.push(("metadata.labels".to_string(), format!("Invalid value: \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")));
        }
        match v.as_str() {
            Some(s) if is_label_value(s) => {}
            _ => causes.push(("metadata.labels".to_string(), format!("Invalid value: {v}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"))),
        }
    }
    for (k, v) in meta["annotations"].as_object().into_iter().flatten() {
        if !v.is_string() {
            causes.push((
                format!("metadata.annotations.{k}"),
                format!("Invalid value: {v}: annotation values must be strings"),
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&rt.kind, name, causes))
    }
}

fn decode<T: serde::de::DeserializeOwned>(rt: &ResourceType, obj: &Value) -> ApiResult<T> {
    T::deserialize(obj).map_err(|e| {
        ApiError::bad_request(format!(
            "{} in version \"v1\" cannot be handled as a {}: {e}",
            rt.kind, rt.kind
        ))
    })
}

/// Type checks for built-in kinds (objects in storage form).
pub(crate) fn builtin(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    use k8s_openapi::api::{coordination::v1 as coordination, core::v1 as core, policy::v1 as policy};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    match rt.builtin {
        Some(Builtin::Pod) => {
            let pod: core::Pod = decode(rt, obj)?;
            if pod.spec.as_ref().is_none_or(|s| s.containers.is_empty()) {
                return Err(ApiError::invalid(
                    "Pod",
                    name,
                    vec![("spec.containers".into(), "Required value".into())],
                ));
            }
            pod_quantities(rt, name, &pod)?;
        }
        Some(Builtin::Node) => {
            decode::<core::Node>(rt, obj)?;
        }
        Some(Builtin::Namespace) => {
            decode::<core::Namespace>(rt, obj)?;
        }
        Some(Builtin::Event | Builtin::EventV1) => {
            decode::<core::Event>(rt, obj)?;
        }
        Some(Builtin::PodDisruptionBudget) => {
            let pdb: policy::PodDisruptionBudget = decode(rt, obj)?;
            if let Some(spec) = &pdb.spec {
                if spec.min_available.is_some() && spec.max_unavailable.is_some() {
                    return Err(ApiError::invalid(
                        "PodDisruptionBudget",
                        name,
                        vec![(
                            "spec".into(),
                            "Invalid value: minAvailable and maxUnavailable cannot be both set".into(),
                        )],
                    ));
                }
            }
        }
        Some(Builtin::Lease) => {
            decode::<coordination::Lease>(rt, obj)?;
        }
        Some(Builtin::CustomResourceDefinition) => {
            decode::<apiext::CustomResourceDefinition>(rt, obj)?;
        }
        None => {}
    }
    Ok(())
}

/// A quantity's form, as apimachinery's parser takes it (kubernetes/apimachinery,
/// `pkg/api/resource/quantity.go`, `splitREString`).
const QUANTITY: &str = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Container requests and limits: each a quantity (else 400, as the real server fails to
/// decode the pod), and an extended resource (`example.com/gpu`) a whole number (else 422,
/// `validateResourceQuantityValue` in kubernetes `pkg/apis/core/validation/validation.go`).
fn pod_quantities(rt: &ResourceType, name: &str, pod: &k8s_openapi::api::core::v1::Pod) -> ApiResult<()> {
    let form = regex::Regex::new(QUANTITY).expect("a valid pattern");
    let spec = pod.spec.as_ref();
    let containers = spec.map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
    let mut causes = Vec::new();
    for (i, c) in containers.into_iter().flatten().enumerate() {
        let Some(res) = &c.resources else { continue };
        for (field, map) in [("limits", &res.limits), ("requests", &res.requests)] {
            for (resource, q) in map.iter().flatten() {
                if !form.is_match(&q.0) {
                    return Err(ApiError::bad_request(format!(
                        "{} in version \"v1\" cannot be handled as a {}: quantities must match the regular expression '{QUANTITY}'",
                        rt.kind, rt.kind
                    )));
                }
                let extended = resource.contains('/') && !resource.contains("kubernetes.io/");
                let whole = q.0.bytes().all(|b| {
                    b.is_ascii_digit() || matches!(b, b'k' | b'M' | b'G' | b'T' | b'P' | b'E' | b'i')
                });
                if extended && !whole {
                    causes.push((
                        format!("spec.containers[{i}].resources.{field}[{resource}]"),
                        format!("Invalid value: \"{}\": must be an integer", q.0),
                    ));
                }
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("Pod", name, causes))
    }
}

/// Pods are mostly immutable: Kubernetes lets updates change only images, the active
/// deadline, tolerations (additions) and scheduling gates (removals). The node is set by
/// the `binding` subresource, not by an update.
pub(crate) fn pod_spec_update(name: &str, old: &Value, new: &Value) -> ApiResult<()> {
    let mut a = old["spec"].clone();
    let mut b = new["spec"].clone();
    for spec in [&mut a, &mut b] {
        if let Some(m) = spec.as_object_mut() {
            for field in
                ["activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds"]
            {
                m.remove(field);
            }
            for list in ["containers", "initContainers"] {
                for c in m.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                    if let Some(c) = c.as_object_mut() {
                        c.remove("image");
                    }
                }
            }
        }
    }
    if a == b {
        return Ok(());
    }
    let message = if old["spec"]["nodeName"] != new["spec"]["nodeName"] {
        "Forbidden: pod updates may not change spec.nodeName; bind a pod with the pods/binding subresource"
    } else {
        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
    };
    Err(ApiError::invalid("Pod", name, vec![("spec".into(), message.into())]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels() {
        assert!(is_dns_subdomain("gpu-node-1.example"));
        assert!(!is_dns_subdomain("Gpu"));
        assert!(!is_dns_label("a.b"));
        assert!(is_label_key("geometer.dev/managed"));
        assert!(!is_label_key("bad key"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-x"));
    }
}
