//! mig-parted config -> MigPolicy.
//!
//! A MigPolicy has no field for whole layouts: Geometer chooses each GPU's layout from demand.
//! What a config says about the policy is which profiles the admin wanted on the GPUs, so the
//! configs' profiles become `spec.allowedProfiles` and the counts are not kept.

use std::collections::{BTreeMap, BTreeSet};

use geometer_solver::catalog::{parse_device_id, Catalog};
use serde_json::json;

use geometer_solver::words::quoted;

use super::{DeviceEntry, MigPartedConfig, MigPartedError};
use crate::{MigPolicy, PolicyMode};

/// Profiles read from one config or from all of a file's configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedProfiles {
    /// The configs read, in file (name) order.
    pub configs: Vec<String>,
    /// Every profile with a count above zero, sorted, each once.
    pub profiles: Vec<String>,
    /// Whether an entry keeps GPUs whole (`mig-enabled: false`): the policy then allows both
    /// modes, else MIG only.
    pub whole: bool,
    /// What a person should check: profiles or GPU models Geometer's catalog does not know.
    pub notes: Vec<String>,
}

/// The profiles of config `name`, or of every config when `name` is None. Fails when the file
/// has no such config, when a device filter is not a PCI id, or when the configs create no
/// instances at all: an empty `allowedProfiles` would allow every profile, the opposite of what
/// such a config (e.g. `all-disabled`) says.
pub fn allowed_profiles(
    file: &MigPartedConfig,
    name: Option<&str>,
    catalog: &Catalog,
) -> Result<ImportedProfiles, MigPartedError> {
    let chosen: Vec<(&String, &[DeviceEntry])> = match name {
        Some(n) => {
            let entries = file.config(n)?;
            let key = file.mig_configs.get_key_value(n).map(|(k, _)| k).expect("config() found it");
            vec![(key, entries)]
        }
        None => file.mig_configs.iter().map(|(k, v)| (k, v.as_slice())).collect(),
    };
    let mut profiles = BTreeSet::new();
    let mut notes = BTreeSet::new();
    let mut left_out: BTreeMap<String, String> = BTreeMap::new();
    let mut whole = false;
    for (config, entries) in &chosen {
        for (i, entry) in entries.iter().enumerate() {
            whole |= !entry.mig_enabled;
            let path = format!("mig-configs.{config}[{i}]");
            let mut wanted: Vec<&String> =
                entry.mig_devices.iter().flatten().filter(|(_, &n)| n > 0).map(|(p, _)| p).collect();
            check_against_catalog(&path, entry, &wanted, catalog, &mut notes)?;
            // A profile no GPU of the catalog has is one `geometer plan --policy` and the
            // controller refuse: the policy leaves it out rather than be refused whole.
            let unknown = |p: &String| !catalog.models().iter().any(|m| m.profile(p).is_some());
            for profile in wanted.iter().filter(|p| unknown(p)) {
                left_out.insert((*profile).clone(), path.clone());
            }
            wanted.retain(|p| !unknown(p));
            profiles.extend(wanted.into_iter().cloned());
        }
    }
    let configs: Vec<String> = chosen.iter().map(|(k, _)| (*k).clone()).collect();
    for (profile, path) in &left_out {
        notes.insert(format!(
            "{path}: no GPU model in the catalog has profile {}, so the policy leaves it out (a policy naming \
             it is refused); give a --catalog file with the GPU that offers it to keep it",
            quoted(profile)
        ));
    }
    if profiles.is_empty() && !left_out.is_empty() {
        return Err(MigPartedError::Invalid {
            path: name.map_or_else(|| "mig-configs".to_string(), |n| format!("mig-configs.{n}")),
            message: format!(
                "no GPU model in the catalog has any of its profiles ({}); give a --catalog file with the GPUs it is for",
                left_out.keys().map(|p| quoted(p)).collect::<Vec<_>>().join(", ")
            ),
        });
    }
    if profiles.is_empty() {
        let what = match configs.as_slice() {
            [one] => format!("config {one} creates no"),
            _ => "none of the configs creates any".to_string(),
        };
        return Err(MigPartedError::Invalid {
            path: name.map_or_else(|| "mig-configs".to_string(), |n| format!("mig-configs.{n}")),
            message: format!(
                "{what} MIG instances, so there are no profiles to allow (an empty allowedProfiles would allow every profile); choose a config with mig-devices using --config"
            ),
        });
    }
    let mut profiles: Vec<String> = profiles.into_iter().collect();
    profiles.sort_by_key(|p| size_order(p));
    Ok(ImportedProfiles { configs, profiles, whole, notes: notes.into_iter().collect() })
}

/// `2g.20gb` -> (2, 20, ""): smaller slices first, `1g.5gb` before `1g.10gb`.
fn size_order(profile: &str) -> (u32, u32, String) {
    let number =
        |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(u32::MAX);
    let (compute, rest) = profile.split_once("g.").unwrap_or((profile, ""));
    let memory = number(rest);
    let suffix = rest.trim_start_matches(|c: char| c.is_ascii_digit()).trim_start_matches("gb");
    (number(compute), memory, suffix.to_string())
}

fn check_against_catalog(
    path: &str,
    entry: &DeviceEntry,
    profiles: &[&String],
    catalog: &Catalog,
    notes: &mut BTreeSet<String>,
) -> Result<(), MigPartedError> {
    if entry.device_filter.is_empty() {
        return Ok(());
    }
    for text in &entry.device_filter {
        let id = parse_device_id(text).ok_or_else(|| MigPartedError::Invalid {
            path: format!("{path}.device-filter"),
            message: format!("{} is not a PCI device id such as \"0x233010DE\"", quoted(text)),
        })?;
        let Some(model) = catalog.by_device_id(id) else {
            notes.insert(format!(
                "{path}: device {text} is not in Geometer's catalog; its profiles are not checked against it"
            ));
            continue;
        };
        for profile in profiles {
            if model.profile(profile).is_none() {
                notes.insert(format!(
                    "{path}: Geometer's catalog has no profile {profile} on {} ({text}); the planner will not create it there",
                    model.key
                ));
            }
        }
    }
    Ok(())
}

/// A MigPolicy allowing the imported profiles, and whole GPUs only where the configs keep
/// some (`mig-enabled: false`), with every other setting at its default. Built through the
/// API's own deserialization so that the defaults are exactly the ones the CRD applies.
pub fn policy(
    name: &str,
    imported: &ImportedProfiles,
    mode: PolicyMode,
    node_selector: &BTreeMap<String, String>,
) -> MigPolicy {
    let mut spec = json!({ "allowedProfiles": imported.profiles, "mode": mode });
    if !imported.whole {
        spec["allowedModes"] = json!(["MIG"]);
    }
    if !node_selector.is_empty() {
        spec["nodeSelector"] = json!({ "matchLabels": node_selector });
    }
    let spec = serde_json::from_value(spec).expect("a policy spec built from valid parts deserializes");
    MigPolicy::new(name, spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_MODELS: &str = r#"version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  mixed:
    - device-filter: ["0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "3g.40gb": 1
        "2g.20gb": 0
    - device-filter: "0xFFFF10DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.99gb": 1
"#;

    #[test]
    fn a_config_with_no_instances_is_refused_rather_than_allowing_everything() {
        let file = MigPartedConfig::parse(TWO_MODELS).unwrap();
        let err = allowed_profiles(&file, Some("all-disabled"), Catalog::builtin()).unwrap_err().to_string();
        assert!(err.starts_with("mig-configs.all-disabled: config all-disabled"), "{err}");
        assert!(err.contains("an empty allowedProfiles would allow every profile"), "{err}");
    }

    #[test]
    fn zero_counts_are_not_profiles_and_unknown_devices_are_noted() {
        let file = MigPartedConfig::parse(TWO_MODELS).unwrap();
        let got = allowed_profiles(&file, Some("mixed"), Catalog::builtin()).unwrap();
        assert_eq!(got.profiles, ["1g.10gb", "3g.40gb"], "1g.99gb is on no GPU of the catalog");
        assert!(!got.whole, "every entry of `mixed` enables MIG");
        assert!(
            allowed_profiles(&file, None, Catalog::builtin()).unwrap().whole,
            "all-disabled keeps GPUs whole"
        );
        assert_eq!(got.notes.len(), 2, "{:?}", got.notes);
        assert!(got.notes[0].contains("device 0xFFFF10DE is not in Geometer's catalog"), "{:?}", got.notes);
        assert!(got.notes[1].contains("profile \"1g.99gb\", so the policy leaves it out"), "{:?}", got.notes);
        let only_unknown = MigPartedConfig::parse(
            "version: v1\nmig-configs:\n  odd:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.99gb\": 1}\n",
        )
        .unwrap();
        let err = allowed_profiles(&only_unknown, None, Catalog::builtin()).unwrap_err().to_string();
        assert!(err.contains("\"1g.99gb\"") && err.contains("--catalog"), "{err}");
    }

    #[test]
    fn profiles_come_smallest_first() {
        let mut names = vec!["3g.40gb", "1g.10gb+me", "1g.10gb", "1g.5gb", "2g.10gb", "7g.80gb"];
        names.sort_by_key(|p| size_order(p));
        assert_eq!(names, ["1g.5gb", "1g.10gb", "1g.10gb+me", "2g.10gb", "3g.40gb", "7g.80gb"]);
    }

    #[test]
    fn policy_has_the_profiles_the_mode_and_the_crd_defaults() {
        let selector = BTreeMap::from([("nvidia.com/mig.config".to_string(), "all-balanced".to_string())]);
        let mut imported = ImportedProfiles {
            configs: vec!["all-balanced".into()],
            profiles: vec!["1g.10gb".into(), "3g.40gb".into()],
            whole: false,
            notes: Vec::new(),
        };
        let p = policy("balanced", &imported, PolicyMode::DryRun, &selector);
        assert_eq!(p.metadata.name.as_deref(), Some("balanced"));
        assert_eq!(p.spec.allowed_profiles, ["1g.10gb", "3g.40gb"]);
        assert_eq!(p.spec.allowed_modes, [crate::GpuMode::Mig], "every GPU of the config is in MIG mode");
        imported.whole = true;
        assert!(policy("b", &imported, PolicyMode::DryRun, &selector).spec.allowed_modes.is_empty());
        assert_eq!(p.spec.mode, PolicyMode::DryRun);
        assert_eq!(p.spec.disruption.max_nodes_reconfiguring, 1);
        assert!(!p.spec.disruption.eviction_allowed);
        let labels = p.spec.node_selector.match_labels.unwrap();
        assert_eq!(labels["nvidia.com/mig.config"], "all-balanced");
    }
}
