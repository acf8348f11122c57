//! Conditions on `MigNode.status`, set the way Kubernetes expects: one per type,
//! `lastTransitionTime` moves only when the status flips, reasons are CamelCase.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use geometer_api::Condition;

/// Sets condition `type_`; returns whether anything changed.
pub(crate) fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let status = if status { "True" } else { "False" }.to_string();
    let message = geometer_api::limits::cut(&message.into(), geometer_api::limits::MAX_MESSAGE_BYTES);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let before = c.clone();
            if c.status != status {
                c.last_transition_time = Time(now);
            }
            c.status = status;
            c.reason = reason.to_string();
            c.message = message;
            c.observed_generation = generation;
            *c != before
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status,
                reason: reason.to_string(),
                message,
                observed_generation: generation,
                last_transition_time: Time(now),
            });
            true
        }
    }
}

pub(crate) fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

pub(crate) fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let mut cs = Vec::new();
        assert!(set(
            &mut cs,
            "DrainBlocked",
            true,
            "DoNotDisrupt",
            "ml/a is protected",
            Some(3),
            at("2025-01-01T00:00:00Z")
        ));
        assert!(set(
            &mut cs,
            "DrainBlocked",
            true,
            "PodDisruptionBudget",
            "ml/a: PDB",
            Some(3),
            at("2025-01-01T00:01:00Z")
        ));
        assert_eq!(cs[0].last_transition_time, Time(at("2025-01-01T00:00:00Z")));
        assert_eq!(cs[0].reason, "PodDisruptionBudget");
        assert!(!set(
            &mut cs,
            "DrainBlocked",
            true,
            "PodDisruptionBudget",
            "ml/a: PDB",
            Some(3),
            at("2025-01-01T00:02:00Z")
        ));
        assert!(set(&mut cs, "DrainBlocked", false, "Drained", "", Some(3), at("2025-01-01T00:03:00Z")));
        assert_eq!(cs[0].last_transition_time, Time(at("2025-01-01T00:03:00Z")));
        assert_eq!(cs.len(), 1);
        assert!(!is_true(&cs, "DrainBlocked"));
    }

    #[test]
    fn overlong_messages_are_cut_to_what_the_api_accepts() {
        let mut cs = Vec::new();
        set(
            &mut cs,
            "Failed",
            true,
            "NvmlError",
            "é".repeat(geometer_api::limits::MAX_MESSAGE_BYTES),
            None,
            Timestamp::UNIX_EPOCH,
        );
        assert!(
            cs[0].message.len() <= geometer_api::limits::MAX_MESSAGE_BYTES && cs[0].message.ends_with("...")
        );
    }
}
