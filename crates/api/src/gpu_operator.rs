//! The NVIDIA GPU Operator's node labels, as Geometer reads and writes them.
//!
//! On a GPU Operator node every operand that keeps the GPUs open (device plugin, GPU feature
//! discovery, DCGM, dcgm-exporter, the MPS daemon, nvsm, third-party `client` DaemonSets) runs
//! only while its `nvidia.com/gpu.deploy.<operand>` label is `true`. NVIDIA's mig-manager pauses
//! them around a MIG change by rewriting those labels to `paused-for-mig-change`, and the
//! Operator keeps any non-empty value it finds (NVIDIA/gpu-operator
//! `controllers/state_manager.go`, the deploy labels it sets; NVIDIA/mig-parted
//! `pkg/mig/reconfigure/reconfigure.go`, the pause and its restore). The driver-upgrade manager
//! pauses the same labels and composes with a pause already there: `X` becomes
//! `X_paused-for-driver-upgrade`, and its restore strips only its own token
//! (NVIDIA/k8s-driver-manager `cmd/driver-manager/main.go`).
//!
//! This module is the one reading of that protocol: [`preflight`] says whether Geometer may
//! start a change on a node (the controller, `geometer plan` and the agent all call it), and
//! [`PausedOperands`] is the record of a pause the agent made, with the value each label gets
//! back ([`OperandLabel::restored`]).

use std::collections::BTreeMap;

use crate::limits::quoted;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Prefix of the labels that gate the Operator's operand DaemonSets.
pub const DEPLOY_PREFIX: &str = "nvidia.com/gpu.deploy.";
/// The device plugin's deploy label: a node carrying it runs the Operator's operands.
pub const DEVICE_PLUGIN_DEPLOY: &str = "nvidia.com/gpu.deploy.device-plugin";
/// mig-manager's deploy label; `false` hands the node's MIG geometry to Geometer.
pub const MIG_MANAGER_DEPLOY: &str = "nvidia.com/gpu.deploy.mig-manager";
/// mig-manager's progress (`pending`, `rebooting`, `success`, `failed`).
pub const MIG_CONFIG_STATE: &str = "nvidia.com/mig.config.state";
/// GPU feature discovery's label for the device plugin's MIG strategy (`none`, `single`,
/// `mixed`).
pub const MIG_STRATEGY: &str = "nvidia.com/mig.strategy";
/// The Operator's driver upgrade state (NVIDIA/k8s-operator-libs `pkg/upgrade/consts.go`,
/// with the driver name `gpu`).
pub const DRIVER_UPGRADE_STATE: &str = "nvidia.com/gpu-driver-upgrade-state";
/// The value mig-manager (and Geometer) writes to pause an operand.
pub const PAUSED_FOR_MIG_CHANGE: &str = "paused-for-mig-change";
/// The token the driver-upgrade manager writes or appends.
pub const PAUSED_FOR_DRIVER_UPGRADE: &str = "paused-for-driver-upgrade";
/// Node annotation holding the record of the agent's pause ([`PausedOperands`] as JSON), so a
/// restarted agent or a person can restore the labels.
pub const PAUSED_OPERANDS_ANNOTATION: &str = "geometer.dev/paused-operands";

/// The labels a pause rewrites: the six mig-manager pauses (NVIDIA/mig-parted
/// `pkg/mig/reconfigure/reconfigure.go`, the component list it reads and pauses).
pub const PAUSED_OPERANDS: [&str; 6] = [
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm",
    "nvidia.com/gpu.deploy.nvsm",
    "nvidia.com/gpu.deploy.client",
];

/// Upgrade states that mean no upgrade is under way (`""`: the label's value when none ran).
const UPGRADE_IDLE: [&str; 2] = ["", "upgrade-done"];

/// Whether the node runs the GPU Operator's operands (it carries the device plugin's deploy
/// label, which the Operator writes on every GPU node it manages).
pub fn runs_operands(labels: &BTreeMap<String, String>) -> bool {
    labels.contains_key(DEVICE_PLUGIN_DEPLOY)
}

/// Why Geometer does not change a node now. Each names what refuses it (a label and its value,
/// or the device stack) and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// mig-manager still applies `nvidia.com/mig.config` to the node.
    MigManagerOwns { value: Option<String> },
    /// mig-manager is in the middle of a change.
    MigConfigInProgress { value: String },
    /// The Operator is upgrading the node's driver.
    DriverUpgrade { label: String, value: String },
    /// The device plugin does not advertise each MIG profile as its own resource.
    MigStrategy { value: String },
    /// NVIDIA's DRA driver in DynamicMIG mode makes and removes the node's instances itself.
    DraDynamicMig,
    /// Both the device plugin and the DRA driver advertise the node's GPUs.
    BothDeviceStacks,
}

impl Refusal {
    /// CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::MigManagerOwns { .. } => "MigManagerOwnsNode",
            Refusal::MigConfigInProgress { .. } => "MigManagerChanging",
            Refusal::DriverUpgrade { .. } => "DriverUpgrade",
            Refusal::MigStrategy { .. } => "MigStrategyNotMixed",
            Refusal::DraDynamicMig => "DraDynamicMig",
            Refusal::BothDeviceStacks => "BothDeviceStacks",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::MigManagerOwns { value } => write!(
                f,
                "the GPU Operator's mig-manager still owns this node ({MIG_MANAGER_DEPLOY}={}); label it {MIG_MANAGER_DEPLOY}=false to hand its MIG geometry to Geometer",
                value.as_deref().map_or("<absent, which the Operator reads as true>".to_string(), quoted)
            ),
            Refusal::MigConfigInProgress { value } => write!(
                f,
                "mig-manager is changing this node ({MIG_CONFIG_STATE}={}); Geometer waits until it ends",
                quoted(value)
            ),
            Refusal::DriverUpgrade { label, value } => write!(
                f,
                "a GPU driver upgrade is under way on this node ({label}={}); Geometer waits until it ends",
                quoted(value)
            ),
            Refusal::MigStrategy { value } => write!(
                f,
                "the device plugin's MIG strategy is {} ({MIG_STRATEGY}); slices of different profiles are only usable with the mixed strategy: set the GPU Operator's mig.strategy=mixed",
                quoted(value)
            ),
            Refusal::DraDynamicMig => f.write_str(
                "NVIDIA's DRA driver runs in DynamicMIG mode here and makes and removes the MIG instances itself (it \
                 destroys any it did not make); Geometer never changes them",
            ),
            Refusal::BothDeviceStacks => f.write_str(
                "both NVIDIA's device plugin and its DRA driver advertise this node's GPUs, so each is given out twice; \
                 run one of them on the node (repository kubernetes-sigs/dra-driver-nvidia-gpu, pull request 82)",
            ),
        }
    }
}

/// Whether Geometer may start changing a node with these labels. `own_pause` is the record of
/// a pause Geometer made itself (the Node's [`PAUSED_OPERANDS_ANNOTATION`]): its
/// `paused-for-mig-change` values are not someone else's. Checks have no side effects.
pub fn preflight(
    labels: &BTreeMap<String, String>,
    own_pause: Option<&PausedOperands>,
) -> Result<(), Refusal> {
    if runs_operands(labels) {
        let value = labels.get(MIG_MANAGER_DEPLOY);
        if value.map(String::as_str) != Some("false") {
            return Err(Refusal::MigManagerOwns { value: value.cloned() });
        }
    }
    if let Some(value) =
        labels.get(MIG_CONFIG_STATE).filter(|v| matches!(v.as_str(), "pending" | "rebooting"))
    {
        return Err(Refusal::MigConfigInProgress { value: value.clone() });
    }
    if let Some(state) = upgrade_state(labels) {
        return Err(state);
    }
    if let Some((label, value)) = foreign_pause(labels, own_pause) {
        return Err(Refusal::DriverUpgrade { label: label.clone(), value: value.clone() });
    }
    match labels.get(MIG_STRATEGY) {
        Some(value) if value != "mixed" => Err(Refusal::MigStrategy { value: value.clone() }),
        _ => Ok(()),
    }
}

/// A deploy label paused by someone other than Geometer (the driver-upgrade manager, or a
/// mig-manager pause left behind).
fn foreign_pause<'l>(
    labels: &'l BTreeMap<String, String>,
    own: Option<&PausedOperands>,
) -> Option<(&'l String, &'l String)> {
    labels.iter().filter(|(k, v)| k.starts_with(DEPLOY_PREFIX) && v.contains("paused-for-")).find(|(k, v)| {
        let ours = v.as_str() == PAUSED_FOR_MIG_CHANGE && own.is_some_and(|r| r.paused(k));
        !ours
    })
}

/// Whether a driver upgrade has paused a label on top of Geometer's own pause (or started
/// meanwhile): the window must close.
/// The refusal names the label that says so.
pub fn upgrade_started(labels: &BTreeMap<String, String>) -> Option<Refusal> {
    upgrade_state(labels).or_else(|| {
        let (label, value) = labels
            .iter()
            .find(|(k, v)| k.starts_with(DEPLOY_PREFIX) && v.contains(PAUSED_FOR_DRIVER_UPGRADE))?;
        Some(Refusal::DriverUpgrade { label: label.clone(), value: value.clone() })
    })
}

/// The Operator's upgrade state, when it says an upgrade is under way (or failed).
fn upgrade_state(labels: &BTreeMap<String, String>) -> Option<Refusal> {
    let value = labels.get(DRIVER_UPGRADE_STATE).filter(|v| !UPGRADE_IDLE.contains(&v.as_str()))?;
    Some(Refusal::DriverUpgrade { label: DRIVER_UPGRADE_STATE.into(), value: value.clone() })
}

/// The record of one pause: each operand label's value before it (absent included), which of
/// them Geometer paused, and when. Written to the Node (annotation) and the MigNode's status
/// before any label changes, cleared once every label is restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PausedOperands {
    #[schemars(length(max = 16))]
    pub labels: Vec<OperandLabel>,
    /// When the pause began.
    pub since: Time,
}

/// One operand label in a pause record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperandLabel {
    pub label: String,
    /// Its value before the pause; unset when the label was absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior: Option<String>,
    /// Whether Geometer set it to `paused-for-mig-change` (only a value of exactly `true` is
    /// paused; `false`, absent and any other value are left alone).
    #[serde(default)]
    pub paused: bool,
}

impl PausedOperands {
    /// The record of pausing `labels` now: every operand label's prior value, and which are
    /// exactly `true` (those are paused).
    pub fn of(labels: &BTreeMap<String, String>, since: Time) -> PausedOperands {
        let labels = PAUSED_OPERANDS
            .iter()
            .map(|&label| {
                let prior = labels.get(label).cloned();
                OperandLabel { label: label.into(), paused: prior.as_deref() == Some("true"), prior }
            })
            .collect();
        PausedOperands { labels, since }
    }

    /// Whether `label` is one this pause set.
    pub fn paused(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l.paused && l.label == label)
    }

    /// The labels this pause set.
    pub fn paused_labels(&self) -> impl Iterator<Item = &OperandLabel> {
        self.labels.iter().filter(|l| l.paused)
    }

    /// Reads the Node annotation; `Err` names what does not parse.
    pub fn from_annotation(value: &str) -> Result<PausedOperands, String> {
        serde_json::from_str(value).map_err(|e| {
            format!("annotation {PAUSED_OPERANDS_ANNOTATION} is not a pause record ({e}); restore the nvidia.com/gpu.deploy.* labels by hand, then remove it")
        })
    }

    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a pause record serializes")
    }
}

impl OperandLabel {
    /// The value to write back when the pause ends, given the label's value now; `None`: leave
    /// it as it is. Only a value that is still Geometer's pause is changed:
    /// - `paused-for-mig-change` gets its prior value back;
    /// - `paused-for-mig-change_paused-for-driver-upgrade` (a driver upgrade paused on top) gets
    ///   the value the driver-upgrade manager would have written over the prior one, so its own
    ///   restore later brings the prior value back and its pause holds until then;
    /// - anything else was set by a person or another controller meanwhile, and stays.
    pub fn restored(&self, now: Option<&str>) -> Option<String> {
        if !self.paused {
            return None;
        }
        let prior = self.prior.clone().unwrap_or_default();
        let composed = format!("{PAUSED_FOR_MIG_CHANGE}_{PAUSED_FOR_DRIVER_UPGRADE}");
        match now {
            Some(PAUSED_FOR_MIG_CHANGE) => Some(prior),
            // NVIDIA/k8s-driver-manager cmd/driver-manager/main.go: `true` becomes the bare
            // token, any other value gets it appended.
            Some(v) if v == composed && prior == "true" => Some(PAUSED_FOR_DRIVER_UPGRADE.into()),
            Some(v) if v == composed => Some(format!("{prior}_{PAUSED_FOR_DRIVER_UPGRADE}")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn operator_node(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut l = labels(&[
            (DEVICE_PLUGIN_DEPLOY, "true"),
            ("nvidia.com/gpu.deploy.dcgm-exporter", "true"),
            ("nvidia.com/gpu.deploy.dcgm", "false"),
            (MIG_MANAGER_DEPLOY, "false"),
            (MIG_STRATEGY, "mixed"),
        ]);
        l.extend(labels(extra));
        l
    }

    fn since() -> Time {
        Time("2026-12-07T00:00:00Z".parse().unwrap())
    }

    #[test]
    fn a_node_handed_over_with_the_mixed_strategy_may_change() {
        assert_eq!(preflight(&operator_node(&[]), None), Ok(()));
        assert_eq!(preflight(&labels(&[]), None), Ok(()), "a node without the Operator");
    }

    /// Extra labels, the refusal's reason, and text its message must hold.
    type Case = (&'static [(&'static str, &'static str)], &'static str, &'static str);

    #[test]
    fn each_refusal_names_the_label_and_its_value() {
        let cases: [Case; 7] = [
            (&[(MIG_MANAGER_DEPLOY, "true")], "MigManagerOwnsNode", "gpu.deploy.mig-manager=\"true\""),
            (&[(MIG_CONFIG_STATE, "pending")], "MigManagerChanging", "mig.config.state=\"pending\""),
            (&[(MIG_CONFIG_STATE, "rebooting")], "MigManagerChanging", "\"rebooting\""),
            (&[(DRIVER_UPGRADE_STATE, "drain-required")], "DriverUpgrade", "\"drain-required\""),
            (&[(DEVICE_PLUGIN_DEPLOY, "paused-for-driver-upgrade")], "DriverUpgrade", "device-plugin"),
            (&[(MIG_STRATEGY, "single")], "MigStrategyNotMixed", "\"single\""),
            (&[(MIG_STRATEGY, "none")], "MigStrategyNotMixed", "mig.strategy=mixed"),
        ];
        for (extra, reason, text) in cases {
            let refused = preflight(&operator_node(extra), None).expect_err(reason);
            assert_eq!(refused.reason(), reason, "{extra:?}");
            assert!(refused.to_string().contains(text), "{extra:?}: {refused}");
        }
        let mut absent = operator_node(&[]);
        absent.remove(MIG_MANAGER_DEPLOY);
        let refused = preflight(&absent, None).unwrap_err();
        assert!(refused.to_string().contains("absent, which the Operator reads as true"), "{refused}");
    }

    #[test]
    fn an_upgrade_that_finished_does_not_refuse() {
        assert_eq!(preflight(&operator_node(&[(DRIVER_UPGRADE_STATE, "upgrade-done")]), None), Ok(()));
    }

    #[test]
    fn geometers_own_pause_is_not_taken_for_someone_elses() {
        let before = operator_node(&[]);
        let record = PausedOperands::of(&before, since());
        let paused = operator_node(&[(DEVICE_PLUGIN_DEPLOY, PAUSED_FOR_MIG_CHANGE)]);
        assert_eq!(preflight(&paused, Some(&record)), Ok(()));
        assert_eq!(
            preflight(&paused, None).unwrap_err().reason(),
            "DriverUpgrade",
            "a pause nobody recorded"
        );
        let dcgm = operator_node(&[("nvidia.com/gpu.deploy.dcgm", PAUSED_FOR_MIG_CHANGE)]);
        assert_eq!(
            preflight(&dcgm, Some(&record)),
            Err(Refusal::DriverUpgrade {
                label: "nvidia.com/gpu.deploy.dcgm".into(),
                value: PAUSED_FOR_MIG_CHANGE.into()
            }),
            "dcgm was false before: not our pause"
        );
    }

    #[test]
    fn only_labels_that_are_exactly_true_are_paused_and_every_prior_value_is_kept() {
        let record = PausedOperands::of(&operator_node(&[("nvidia.com/gpu.deploy.nvsm", "custom")]), since());
        let paused: Vec<&str> = record.paused_labels().map(|l| l.label.as_str()).collect();
        assert_eq!(paused, [DEVICE_PLUGIN_DEPLOY, "nvidia.com/gpu.deploy.dcgm-exporter"]);
        assert_eq!(record.labels.len(), 6);
        let prior = |label: &str| record.labels.iter().find(|l| l.label == label).unwrap().prior.clone();
        assert_eq!(prior("nvidia.com/gpu.deploy.dcgm").as_deref(), Some("false"));
        assert_eq!(prior("nvidia.com/gpu.deploy.nvsm").as_deref(), Some("custom"));
        assert_eq!(prior("nvidia.com/gpu.deploy.client"), None, "absent is recorded as absent");
        let back = PausedOperands::from_annotation(&record.to_annotation()).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn a_restore_gives_back_the_prior_value_keeps_a_driver_upgrade_and_never_overwrites_a_person() {
        let paused =
            OperandLabel { label: DEVICE_PLUGIN_DEPLOY.into(), prior: Some("true".into()), paused: true };
        assert_eq!(paused.restored(Some(PAUSED_FOR_MIG_CHANGE)).as_deref(), Some("true"));
        assert_eq!(
            paused.restored(Some("paused-for-mig-change_paused-for-driver-upgrade")).as_deref(),
            Some(PAUSED_FOR_DRIVER_UPGRADE),
            "the upgrade's pause holds; its own restore turns it back to true"
        );
        assert_eq!(paused.restored(Some("false")), None, "a person's value stays");
        assert_eq!(paused.restored(Some("true")), None, "already restored");
        assert_eq!(paused.restored(None), None, "a person removed it");
        let untouched = OperandLabel { paused: false, ..paused };
        assert_eq!(untouched.restored(Some(PAUSED_FOR_MIG_CHANGE)), None, "never ours to restore");
    }

    #[test]
    fn a_broken_record_is_named_with_what_to_do() {
        let e = PausedOperands::from_annotation("{not json").unwrap_err();
        assert!(e.contains(PAUSED_OPERANDS_ANNOTATION) && e.contains("restore"), "{e}");
    }
}
