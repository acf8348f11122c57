//! Status conditions, set the way Kubernetes tools expect: one per type, and the transition
//! time moves only when the status does (so `kubectl describe` shows how long it has held).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition to set; `status` true or false.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: bool,
    /// CamelCase machine-readable reason.
    pub reason: &'static str,
    /// What happened and what to do, for a person.
    pub message: String,
}

/// Sets each desired condition in `conditions`, keeping other types as they are.
/// Returns whether anything changed, so callers skip writes that would change nothing.
pub(crate) fn apply(
    conditions: &mut Vec<Condition>,
    desired: &[Desired],
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let mut changed = false;
    for d in desired {
        let status = if d.status { "True" } else { "False" };
        let message = geometer_api::limits::cut(&d.message, geometer_api::limits::MAX_MESSAGE_BYTES);
        match conditions.iter_mut().find(|c| c.type_ == d.type_) {
            Some(c) => {
                let transition = c.status != status;
                if transition
                    || c.reason != d.reason
                    || c.message != message
                    || c.observed_generation != generation
                {
                    changed = true;
                    if transition {
                        c.last_transition_time = Time(now);
                    }
                    c.status = status.to_string();
                    c.reason = d.reason.to_string();
                    c.message = message;
                    c.observed_generation = generation;
                }
            }
            None => {
                changed = true;
                conditions.push(Condition {
                    type_: d.type_.to_string(),
                    status: status.to_string(),
                    reason: d.reason.to_string(),
                    message,
                    observed_generation: generation,
                    last_transition_time: Time(now),
                });
            }
        }
    }
    changed
}

/// The condition of a type, if set.
pub(crate) fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(status: bool, message: &str) -> Desired {
        Desired {
            type_: "Ready",
            status,
            reason: if status { "Valid" } else { "Invalid" },
            message: message.into(),
        }
    }

    #[test]
    fn transition_time_moves_only_when_the_status_does() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let t2 = Timestamp::from_second(3_000).unwrap();
        let mut conditions = vec![];
        assert!(apply(&mut conditions, &[ready(false, "bad profile")], Some(1), t0));
        assert!(apply(&mut conditions, &[ready(false, "another bad profile")], Some(1), t1));
        assert_eq!(conditions[0].last_transition_time, Time(t0));
        assert_eq!(conditions[0].message, "another bad profile");
        assert!(
            !apply(&mut conditions, &[ready(false, "another bad profile")], Some(1), t1),
            "no change, no write"
        );
        assert!(apply(&mut conditions, &[ready(true, "ok")], Some(2), t2));
        assert_eq!(conditions.len(), 1);
        assert_eq!(find(&conditions, "Ready").unwrap().last_transition_time, Time(t2));
        assert_eq!(find(&conditions, "Ready").unwrap().observed_generation, Some(2));
    }
}
