//! A pod's `namespace/name`: the one way Geometer names a pod across the planner, the plan,
//! the controller, the agent and the simulated cluster. It is written as that one string (in
//! snapshots, plans and MigNode status) and taken apart only here.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

/// `namespace/name` of a pod. Orders as its text does, so maps keyed by it iterate in the
/// same order as the `namespace/name` strings they replace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    text: String,
    /// Byte offset of the `/` between namespace and name.
    slash: usize,
}

/// A text that is not `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{text:?} is not a pod reference: a pod reference is `namespace/name`, both parts non-empty")]
pub struct PodKeyError {
    pub text: String,
}

impl PodKey {
    /// The key of pod `name` in `namespace`. Kubernetes names never contain `/`; the
    /// snapshot's validation rejects a pod whose name does.
    pub fn new(namespace: &str, name: &str) -> PodKey {
        // Not `format!`: the controller keys every cached pod on every pass.
        let mut text = String::with_capacity(namespace.len() + 1 + name.len());
        text.push_str(namespace);
        text.push('/');
        text.push_str(name);
        PodKey { text, slash: namespace.len() }
    }

    /// Reads `namespace/name`: exactly one `/`, with text on both sides.
    pub fn parse(text: &str) -> Result<PodKey, PodKeyError> {
        match text.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(PodKey::new(ns, name))
            }
            _ => Err(PodKeyError { text: text.to_string() }),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.text[..self.slash]
    }

    pub fn name(&self) -> &str {
        &self.text[self.slash + 1..]
    }

    /// `namespace/name`.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for PodKey {
    type Err = PodKeyError;

    fn from_str(text: &str) -> Result<PodKey, PodKeyError> {
        PodKey::parse(text)
    }
}

impl PartialEq<str> for PodKey {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for PodKey {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl Serialize for PodKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for PodKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<PodKey, D::Error> {
        let text = String::deserialize(deserializer)?;
        PodKey::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for PodKey {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PodKey".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_splits_into_namespace_and_name() {
        let key = PodKey::parse("ml/train-0").expect("valid");
        assert_eq!((key.namespace(), key.name(), key.as_str()), ("ml", "train-0", "ml/train-0"));
        assert_eq!(key, PodKey::new("ml", "train-0"));
    }

    #[test]
    fn text_that_is_not_namespace_slash_name_is_refused_by_value() {
        for bad in ["lonely", "/x", "ml/", "a/b/c", ""] {
            let err = PodKey::parse(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn keys_order_as_their_text() {
        // A tuple (namespace, name) order would put "a/x" first; the text puts '-' before '/'.
        let mut keys = [PodKey::new("a", "x"), PodKey::new("a-b", "x")];
        keys.sort();
        assert_eq!(keys.iter().map(PodKey::as_str).collect::<Vec<_>>(), ["a-b/x", "a/x"]);
    }

    #[test]
    fn a_key_reads_and_writes_as_one_string() {
        let key: PodKey = serde_json::from_str("\"ml/a\"").expect("valid");
        assert_eq!(serde_json::to_string(&key).expect("writes"), "\"ml/a\"");
        assert!(serde_json::from_str::<PodKey>("\"ml\"").is_err());
    }
}
