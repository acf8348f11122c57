//! The one protobuf body kubectl sends that this JSON-only server decodes: the Namespace of
//! `kubectl create namespace` (kubectl's typed clients send built-in objects as protobuf).
//! Other protobuf bodies get `415` with a pointer to `kubectl apply -f`.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};

const MAGIC: &[u8] = b"k8s\x00";

#[derive(Clone, PartialEq, prost::Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

/// `runtime.Unknown`, the envelope around every protobuf object.
#[derive(Clone, PartialEq, prost::Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(map = "string, string", tag = "11")]
    labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "12")]
    annotations: HashMap<String, String>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NamespaceSpec {
    #[prost(string, repeated, tag = "1")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Namespace {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NamespaceSpec>,
}

fn unsupported(what: &str) -> ApiError {
    ApiError::unsupported_media_type(format!(
        "this in-memory API server reads JSON and YAML bodies, and protobuf only for namespaces; got a protobuf {what}. \
         Write the object as YAML and use `kubectl apply -f`"
    ))
}

/// Decodes a protobuf request body into the JSON the rest of the server works with.
pub(crate) fn decode(body: &[u8]) -> ApiResult<Value> {
    use prost::Message;
    let payload =
        body.strip_prefix(MAGIC).ok_or_else(|| unsupported("body without the k8s protobuf header"))?;
    let envelope =
        Unknown::decode(payload).map_err(|e| ApiError::bad_request(format!("invalid protobuf body: {e}")))?;
    let type_meta = envelope.type_meta.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    if (api_version.as_str(), kind.as_str()) != ("v1", "Namespace") {
        return Err(unsupported(&format!("{api_version} {kind}")));
    }
    let ns = Namespace::decode(envelope.raw.unwrap_or_default().as_slice())
        .map_err(|e| ApiError::bad_request(format!("invalid protobuf Namespace: {e}")))?;
    let meta = ns.metadata.unwrap_or_default();
    let mut metadata = json!({});
    if let Some(name) = meta.name {
        metadata["name"] = json!(name);
    }
    if let Some(g) = meta.generate_name {
        metadata["generateName"] = json!(g);
    }
    if !meta.labels.is_empty() {
        metadata["labels"] = json!(meta.labels);
    }
    if !meta.annotations.is_empty() {
        metadata["annotations"] = json!(meta.annotations);
    }
    if !meta.finalizers.is_empty() {
        metadata["finalizers"] = json!(meta.finalizers);
    }
    let mut out = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata});
    if let Some(spec) = ns.spec.filter(|s| !s.finalizers.is_empty()) {
        out["spec"] = json!({"finalizers": spec.finalizers});
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn decodes_a_namespace_and_refuses_the_rest() {
        let ns = Namespace {
            metadata: Some(ObjectMeta {
                name: Some("team".into()),
                labels: HashMap::from([("a".into(), "b".into())]),
                ..Default::default()
            }),
            spec: None,
        };
        let envelope = Unknown {
            type_meta: Some(TypeMeta { api_version: Some("v1".into()), kind: Some("Namespace".into()) }),
            raw: Some(ns.encode_to_vec()),
        };
        let mut body = MAGIC.to_vec();
        body.extend(envelope.encode_to_vec());
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"a": "b"}}})
        );
        let pod = Unknown {
            type_meta: Some(TypeMeta { api_version: Some("v1".into()), kind: Some("Pod".into()) }),
            raw: None,
        };
        let mut body = MAGIC.to_vec();
        body.extend(pod.encode_to_vec());
        assert_eq!(decode(&body).unwrap_err().code, 415);
    }
}
