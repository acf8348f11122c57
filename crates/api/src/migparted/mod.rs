//! NVIDIA mig-parted configs: the file format of `nvidia-mig-parted` and of the GPU Operator's
//! mig-manager (ConfigMap `default-mig-parted-config`).
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   all-balanced:
//!     - device-filter: ["0x233010DE"]   # optional: PCI device ids the entry applies to
//!       devices: all                    # or GPU indices: [0, 1]
//!       mig-enabled: true
//!       mig-devices:                    # profile -> instance count, no placements
//!         "1g.10gb": 2
//!         "2g.20gb": 1
//!         "3g.40gb": 1
//! ```
//!
//! A config names instance counts per profile, never placements: mig-parted picks placements
//! itself. Reading one therefore yields profiles ([`import`]); writing one from a Geometer
//! geometry keeps the counts and drops the starts ([`export`]).
//!
//! Parsing follows mig-parted's own rules (`api/spec/v1`): `version` must be `v1`, every config
//! needs at least one entry, `devices` and `mig-enabled` are required, `mig-devices` is required
//! when MIG is enabled and must be empty when it is not, and unknown fields are errors.

pub mod export;
pub mod import;

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use geometer_solver::words::{path_key, quote, quoted};

/// The only format version mig-parted knows.
pub const VERSION: &str = "v1";

/// A mig-parted config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigPartedConfig {
    pub version: String,
    /// Named configs; a node applies one (mig-manager reads its name from the node label
    /// `nvidia.com/mig.config`).
    #[serde(rename = "mig-configs")]
    pub mig_configs: BTreeMap<String, Vec<DeviceEntry>>,
}

/// One entry of a config: which GPUs, and what they should look like.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceEntry {
    /// PCI device ids (`0x233010DE`) the entry applies to; empty: every GPU model.
    #[serde(rename = "device-filter", skip_serializing_if = "Vec::is_empty", serialize_with = "flow_seq")]
    pub device_filter: Vec<String>,
    pub devices: Devices,
    #[serde(rename = "mig-enabled")]
    pub mig_enabled: bool,
    /// Instances per profile. Always written when MIG is enabled (mig-parted requires the
    /// field then, even when empty), never when it is not.
    #[serde(rename = "mig-devices", skip_serializing_if = "Option::is_none")]
    pub mig_devices: Option<BTreeMap<String, u32>>,
}

/// `devices: all` or `devices: [0, 1, 2]` (GPU indices as NVML numbers them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    All,
    Indices(Vec<u32>),
}

impl Serialize for Devices {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Devices::All => serializer.serialize_str("all"),
            // Flow style (`[0, 1]`), as NVIDIA's files write it.
            Devices::Indices(indices) => serde_saphyr::FlowSeq(indices).serialize(serializer),
        }
    }
}

fn flow_seq<S: serde::Serializer>(items: &Vec<String>, serializer: S) -> Result<S::Ok, S::Error> {
    serde_saphyr::FlowSeq(items).serialize(serializer)
}

/// What is wrong with a mig-parted config, naming the field (`mig-configs.NAME[i].FIELD`) and
/// the value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MigPartedError {
    #[error("not a YAML document: {0}")]
    Yaml(String),
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("there is no mig-config named {}; the file has {available}", quoted(name))]
    UnknownConfig { name: String, available: String },
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> MigPartedError {
    MigPartedError::Invalid { path: path.into(), message: message.into() }
}

impl MigPartedConfig {
    /// Parses a config file's text (YAML or JSON) with mig-parted's rules.
    pub fn parse(text: &str) -> Result<MigPartedConfig, MigPartedError> {
        let value: Value =
            geometer_solver::yaml::from_str(text).map_err(|e| MigPartedError::Yaml(e.to_string()))?;
        Self::from_value(&value)
    }

    /// The config as YAML, in the layout NVIDIA's files use.
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(self).expect("a mig-parted config always serializes")
    }

    /// The config named `name`, or an error listing the names the file has.
    pub fn config(&self, name: &str) -> Result<&[DeviceEntry], MigPartedError> {
        self.mig_configs.get(name).map(Vec::as_slice).ok_or_else(|| MigPartedError::UnknownConfig {
            name: name.to_string(),
            available: self.names_for_message(),
        })
    }

    fn names_for_message(&self) -> String {
        let names: Vec<&str> = self.mig_configs.keys().map(String::as_str).collect();
        match names.len() {
            0 => "none".to_string(),
            n if n <= 12 => names.join(", "),
            n => format!("{} and {} more", names[..12].join(", "), n - 12),
        }
    }

    fn from_value(value: &Value) -> Result<MigPartedConfig, MigPartedError> {
        let top = value.as_object().ok_or_else(|| {
            invalid(
                "(top level)",
                format!("expected a mapping with version and mig-configs, found {}", kind(value)),
            )
        })?;
        for key in top.keys() {
            if key != "version" && key != "mig-configs" {
                return Err(invalid(
                    path_key(key),
                    "unexpected field (mig-parted v1 has version and mig-configs)",
                ));
            }
        }
        let version = match top.get("version") {
            Some(Value::String(v)) => v.clone(),
            Some(other) => {
                return Err(invalid(
                    "version",
                    format!("expected the string v1, found {}", quote(&other.to_string())),
                ))
            }
            None => return Err(invalid("version", "missing; mig-parted configs start with `version: v1`")),
        };
        if version != VERSION {
            return Err(invalid(
                "version",
                format!("{} is not a version mig-parted knows; only v1 is", quoted(&version)),
            ));
        }
        let configs = match top.get("mig-configs") {
            Some(Value::Object(map)) => map,
            Some(other) => {
                return Err(invalid(
                    "mig-configs",
                    format!("expected a mapping from config name to entries, found {}", kind(other)),
                ))
            }
            None => return Err(invalid("mig-configs", "missing; there is nothing to read")),
        };
        if configs.is_empty() {
            return Err(invalid("mig-configs", "at least one config is required"));
        }
        let mut mig_configs = BTreeMap::new();
        for (name, entries) in configs {
            let path = format!("mig-configs.{name}");
            let list = entries.as_array().ok_or_else(|| {
                invalid(path.as_str(), format!("expected a list of entries, found {}", kind(entries)))
            })?;
            if list.is_empty() {
                return Err(invalid(path, "at least one entry is required"));
            }
            let parsed = list
                .iter()
                .enumerate()
                .map(|(i, entry)| parse_entry(&format!("{path}[{i}]"), entry))
                .collect::<Result<Vec<_>, _>>()?;
            mig_configs.insert(name.clone(), parsed);
        }
        Ok(MigPartedConfig { version, mig_configs })
    }
}

fn parse_entry(path: &str, value: &Value) -> Result<DeviceEntry, MigPartedError> {
    let map = value
        .as_object()
        .ok_or_else(|| invalid(path, format!("expected a mapping, found {}", kind(value))))?;
    for key in map.keys() {
        if !matches!(key.as_str(), "device-filter" | "devices" | "mig-enabled" | "mig-devices") {
            return Err(invalid(
                format!("{path}.{}", path_key(key)),
                "unexpected field (an entry has device-filter, devices, mig-enabled and mig-devices)",
            ));
        }
    }
    let device_filter = match map.get("device-filter") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str().map(str::to_string).ok_or_else(|| {
                    invalid(
                        format!("{path}.device-filter"),
                        format!(
                            "expected PCI device ids such as \"0x233010DE\", found {}",
                            quote(&item.to_string())
                        ),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(invalid(
                format!("{path}.device-filter"),
                format!("expected a PCI device id or a list of them, found {}", quote(&other.to_string())),
            ))
        }
    };
    let devices = match map.get("devices") {
        None => {
            return Err(invalid(format!("{path}.devices"), "missing; write `all` or a list of GPU indices"))
        }
        Some(Value::String(s)) if s == "all" => Devices::All,
        Some(Value::Array(items)) => Devices::Indices(
            items
                .iter()
                .map(|item| {
                    let max = crate::limits::MAX_GPUS_PER_NODE;
                    item.as_u64().filter(|n| *n < max as u64).and_then(|n| u32::try_from(n).ok()).ok_or_else(
                        || {
                            invalid(
                                format!("{path}.devices"),
                                format!("{item} is not a GPU index (a whole number from 0 to {})", max - 1),
                            )
                        },
                    )
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(other) => {
            return Err(invalid(
                format!("{path}.devices"),
                format!("{other} is neither `all` nor a list of GPU indices"),
            ))
        }
    };
    let mig_enabled = match map.get("mig-enabled") {
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(invalid(
                format!("{path}.mig-enabled"),
                format!("expected true or false, found {}", quote(&other.to_string())),
            ))
        }
        None => return Err(invalid(format!("{path}.mig-enabled"), "missing; write true or false")),
    };
    let mig_devices = match map.get("mig-devices") {
        None | Some(Value::Null) => None,
        Some(Value::Object(counts)) => Some(parse_counts(&format!("{path}.mig-devices"), counts)?),
        Some(other) => {
            return Err(invalid(
                format!("{path}.mig-devices"),
                format!("expected a mapping from profile to count, found {}", kind(other)),
            ))
        }
    };
    match (&mig_devices, mig_enabled) {
        (None, true) => {
            return Err(invalid(
                format!("{path}.mig-devices"),
                "required when mig-enabled is true (write `{}` for no instances)",
            ))
        }
        (Some(counts), false) if !counts.is_empty() => {
            return Err(invalid(
                format!("{path}.mig-devices"),
                "instances are listed but mig-enabled is false",
            ))
        }
        _ => {}
    }
    Ok(DeviceEntry { device_filter, devices, mig_enabled, mig_devices })
}

fn parse_counts(
    path: &str,
    counts: &serde_json::Map<String, Value>,
) -> Result<BTreeMap<String, u32>, MigPartedError> {
    let mut out = BTreeMap::new();
    for (profile, count) in counts {
        let here = format!("{path}.{}", quoted(profile));
        if let Some(problem) = profile_problem(profile) {
            return Err(invalid(here, problem));
        }
        let n = count.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
            invalid(&here, format!("{count} is not an instance count (a whole number from 0)"))
        })?;
        out.insert(profile.clone(), n);
    }
    if let Some(problem) = counts_problem(&out) {
        return Err(invalid(path, problem));
    }
    Ok(out)
}

/// Why `profile` cannot stand in a config Geometer reads, if it cannot. Export asks the same
/// question, so it never writes a config that import refuses.
pub(crate) fn profile_problem(profile: &str) -> Option<String> {
    if let Some((ci, gi)) = compute_instance_profile(profile) {
        return Some(format!(
            "{} splits a {gi} GPU instance into {ci} compute instances; Geometer creates one \
             compute instance per GPU instance and cannot express it",
            quoted(profile)
        ));
    }
    (!crate::is_profile_name(profile)).then(|| {
        format!("{} is not a MIG profile name such as 1g.10gb, 3g.40gb or 1g.10gb+me", quoted(profile))
    })
}

/// Why one GPU's instance counts cannot be real, if they cannot: no MIG GPU holds more than
/// [`MAX_INSTANCES_PER_GPU`](crate::limits::MAX_INSTANCES_PER_GPU) instances.
pub(crate) fn counts_problem(counts: &BTreeMap<String, u32>) -> Option<String> {
    let total = counts.values().fold(0u64, |sum, n| sum.saturating_add(u64::from(*n)));
    let max = crate::limits::MAX_INSTANCES_PER_GPU;
    (total > max as u64).then(|| format!("{total} instances on one GPU; a MIG GPU holds at most {max}"))
}

/// `1c.3g.20gb` (compute-instance profile `1c` of GPU instance `3g.20gb`) -> ("1c", "3g.20gb").
fn compute_instance_profile(name: &str) -> Option<(&str, &str)> {
    let (ci, rest) = name.split_once('.')?;
    let digits = ci.strip_suffix('c')?;
    (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) && crate::is_profile_name(rest))
        .then_some((ci, rest))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        MigPartedConfig::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn counts_a_gpu_cannot_hold_and_indices_past_the_node_are_refused() {
        assert_eq!(
            err("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 4294967295}}]}"),
            "mig-configs.a[0].mig-devices: 4294967295 instances on one GPU; a MIG GPU holds at most 16"
        );
        assert_eq!(
            err("version: v1\nmig-configs: {a: [{devices: [0, 16], mig-enabled: false}]}"),
            "mig-configs.a[0].devices: 16 is not a GPU index (a whole number from 0 to 15)"
        );
        let seven =
            "version: v1\nmig-configs: {a: [{devices: [15], mig-enabled: true, mig-devices: {1g.10gb: 7}}]}";
        assert!(MigPartedConfig::parse(seven).is_ok());
    }

    #[test]
    fn errors_name_the_field_and_the_value() {
        assert_eq!(
            err("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}"),
            "version: \"v2\" is not a version mig-parted knows; only v1 is"
        );
        assert!(err("mig-configs: {a: [{devices: all, mig-enabled: false}]}").starts_with("version: missing"));
        assert_eq!(
            err("version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n"),
            "mig-configs.a[0].devices: \"some\" is neither `all` nor a list of GPU indices"
        );
        assert_eq!(
            err("version: v1\nmig-configs:\n  a:\n    - devices: [0, -1]\n      mig-enabled: false\n"),
            "mig-configs.a[0].devices: -1 is not a GPU index (a whole number from 0 to 15)"
        );
        assert!(err("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n")
            .starts_with("mig-configs.a[0].mig-devices: required"));
        assert_eq!(
            err("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.10gb\": 1}\n"),
            "mig-configs.a[0].mig-devices: instances are listed but mig-enabled is false"
        );
        assert_eq!(
            err("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gbx\": 1}\n"),
            "mig-configs.a[0].mig-devices.\"1g.10gbx\": \"1g.10gbx\" is not a MIG profile name such as 1g.10gb, 3g.40gb or 1g.10gb+me"
        );
        assert!(err("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1c.3g.20gb\": 3}\n")
            .contains("compute instances"));
        assert_eq!(
            err("version: v1\nmig-configs:\n  a:\n    - devices: all\n      migenabled: true\n"),
            "mig-configs.a[0].migenabled: unexpected field (an entry has device-filter, devices, mig-enabled and mig-devices)"
        );
        assert_eq!(
            err("version: v1\nmig-configs:\n  a: []\n"),
            "mig-configs.a: at least one entry is required"
        );
    }

    #[test]
    fn device_filter_is_a_string_or_a_list() {
        let cfg = MigPartedConfig::parse(
            "version: v1\nmig-configs:\n  a:\n    - device-filter: \"0x20B710DE\"\n      devices: all\n      mig-enabled: true\n      mig-devices: {}\n    - device-filter: [\"0x233010DE\", \"0x233110DE\"]\n      devices: [0, 1]\n      mig-enabled: false\n",
        )
        .unwrap();
        let a = cfg.config("a").unwrap();
        assert_eq!(a[0].device_filter, ["0x20B710DE"]);
        assert_eq!(a[0].mig_devices, Some(BTreeMap::new()));
        assert_eq!(a[1].device_filter, ["0x233010DE", "0x233110DE"]);
        assert_eq!(a[1].devices, Devices::Indices(vec![0, 1]));
        assert_eq!(
            cfg.config("b").unwrap_err().to_string(),
            "there is no mig-config named \"b\"; the file has a"
        );
    }
}
