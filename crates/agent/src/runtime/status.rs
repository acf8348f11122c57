//! Writing `MigNode.status`: the phase and step before each step is taken, the inventory, and
//! conditions that always say why the node is in the state it is in.

use serde_json::{Map, Value};

use geometer_api::{merge_patch, Condition, MigNodePhase, MigNodeSpec, MigNodeStatus, StepAction};

/// The phase a step belongs to.
pub(crate) fn phase_of(action: StepAction) -> MigNodePhase {
    match action {
        StepAction::Cordon => MigNodePhase::Cordoning,
        StepAction::Evict => MigNodePhase::Draining,
        StepAction::EnableMigMode
        | StepAction::DisableMigMode
        | StepAction::DestroyComputeInstance
        | StepAction::DestroyGpuInstance
        | StepAction::CreateGpuInstance
        | StepAction::CreateComputeInstance
        | StepAction::PauseOperands
        | StepAction::Verify => MigNodePhase::Repartitioning,
        StepAction::RestoreOperands | StepAction::RestartDevicePlugin | StepAction::WaitForAllocatable => {
            MigNodePhase::Advertising
        }
        StepAction::Uncordon => MigNodePhase::Uncordoning,
    }
}

/// The conditions of a status read raw (a MigNode that does not decode as a whole) that still
/// read one by one; anything else in the list (or a list that is not one) is dropped.
pub(crate) fn readable_conditions(raw: Option<&Value>) -> Vec<Condition> {
    let items = raw.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    items.iter().filter_map(|c| serde_json::from_value(c.clone()).ok()).collect()
}

/// The patch for the status subresource, or `None` when nothing changed.
pub(crate) fn status_patch(old: Option<&MigNodeStatus>, new: &MigNodeStatus) -> Option<Value> {
    let new_json = serde_json::to_value(new).expect("status serialises");
    let old_json = match old {
        Some(old) => serde_json::to_value(old).expect("status serialises"),
        None => Value::Object(Map::new()),
    };
    if old_json == new_json {
        return None;
    }
    Some(serde_json::json!({ "status": merge_patch::diff(&old_json, &new_json) }))
}

/// One line per GPU of the spec that is not at its target yet (`None` when all are), so that a
/// failure never leaves a half-built GPU unreported.
pub fn half_built_summary(spec: &MigNodeSpec, status: &MigNodeStatus) -> Option<String> {
    let mut lines = Vec::new();
    for want in &spec.gpus {
        let Some(have) = status.gpus.iter().find(|g| g.index == want.index) else { continue };
        let mut target: Vec<String> = want.geometry.iter().map(|p| p.to_string()).collect();
        target.sort();
        let mut now: Vec<String> = have.instances.iter().map(|i| i.placed().to_string()).collect();
        now.sort();
        let bare: Vec<String> = have
            .instances
            .iter()
            .filter(|i| i.compute_instance_id.is_none())
            .map(|i| i.placed().to_string())
            .collect();
        if now != target || !bare.is_empty() {
            let mut line =
                format!("GPU {} has [{}], target [{}]", want.index, now.join(", "), target.join(", "));
            if !bare.is_empty() {
                line.push_str(&format!(" ({} without compute instance)", bare.join(", ")));
            }
            lines.push(line);
        }
    }
    (!lines.is_empty()).then(|| format!("Not at target yet: {}.", lines.join("; ")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn conditions_that_read_are_kept_and_the_rest_dropped() {
        let raw = json!([
            {"type": "Ready", "status": "True", "reason": "Converged", "message": "",
             "lastTransitionTime": "2025-01-01T00:00:00Z"},
            {"type": 7},
        ]);
        let kept = readable_conditions(Some(&raw));
        assert_eq!(kept.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), ["Ready"]);
        assert!(readable_conditions(Some(&json!("not a list"))).is_empty());
        assert!(readable_conditions(None).is_empty());
    }

    #[test]
    fn an_unchanged_status_needs_no_write() {
        let s = MigNodeStatus::default();
        assert_eq!(status_patch(Some(&s), &s), None);
        let mut ready = s.clone();
        ready.phase = MigNodePhase::Ready;
        assert_eq!(status_patch(Some(&s), &ready), Some(json!({"status": {"phase": "Ready"}})));
    }
}
