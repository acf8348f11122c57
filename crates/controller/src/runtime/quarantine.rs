//! Objects the controller cannot use: those that do not decode, pods whose requests cannot be
//! read (a quantity that is not one, a fractional or absurd MIG count) and nodes whose taints or
//! allocatable cannot be. Each is left out of the pass, so that it never stops the others,
//! and reported once for what is wrong with it now: a Warning event on the object, a log line
//! naming it (never its body), a `Ready=False` condition when it is a MigPolicy, and the
//! `geometer_skipped_objects{kind}` gauge while it stays bad. This is what Kubernetes
//! controllers do with an object they cannot handle (kubernetes/kubernetes,
//! `pkg/controller/`: record an event, keep syncing the rest).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource;

use geometer_api::MigPolicyStatus;

use crate::runtime::actions::{Action, EventSpec};
use geometer_api::decoded::Unreadable;

/// One object left out, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BadObject {
    pub(crate) kind: &'static str,
    pub(crate) reference: ObjectReference,
    /// What is wrong: the field, the value and what was expected.
    pub(crate) why: String,
    /// Whether it did not decode at all (else it decoded but its content cannot be used).
    pub(crate) unreadable: bool,
}

impl BadObject {
    /// An object that did not decode.
    pub(crate) fn unreadable<K: Resource<DynamicType = ()>>(u: &Unreadable) -> BadObject {
        let meta = &u.meta;
        BadObject {
            kind: kind_name::<K>(),
            reference: ObjectReference {
                api_version: Some(K::api_version(&()).to_string()),
                kind: Some(K::kind(&()).to_string()),
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                ..ObjectReference::default()
            },
            why: format!("cannot be read: {}", u.error),
            unreadable: true,
        }
    }

    /// An object of a kind known only at run time (a PodGroup) whose content cannot be used.
    pub(crate) fn invalid_dynamic(
        object: &kube::core::DynamicObject,
        ar: &kube::core::ApiResource,
        why: String,
    ) -> BadObject {
        let meta = &object.metadata;
        BadObject {
            kind: "PodGroup",
            reference: ObjectReference {
                api_version: Some(ar.api_version.clone()),
                kind: Some(ar.kind.clone()),
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                ..ObjectReference::default()
            },
            why,
            unreadable: false,
        }
    }

    /// An object that decoded but whose content cannot be used; `why` names the field.
    pub(crate) fn invalid<K: Resource<DynamicType = ()>>(object: &K, why: String) -> BadObject {
        BadObject { kind: kind_name::<K>(), reference: object.object_ref(&()), why, unreadable: false }
    }

    fn key(&self) -> (String, String) {
        let r = &self.reference;
        (r.namespace.clone().unwrap_or_default(), r.name.clone().unwrap_or_default())
    }

    fn describe(&self) -> String {
        let (ns, name) = self.key();
        if ns.is_empty() {
            format!("{} {name}", self.kind)
        } else {
            format!("{} {ns}/{name}", self.kind)
        }
    }
}

fn kind_name<K: Resource<DynamicType = ()>>() -> &'static str {
    match &*K::kind(&()) {
        "Pod" => "Pod",
        "Node" => "Node",
        "MigNode" => "MigNode",
        "MigPolicy" => "MigPolicy",
        "MigPlan" => "MigPlan",
        _ => "object",
    }
}

/// What has been reported, so that each bad object is reported once for each thing wrong
/// with it (again when its uid or its problem changes), not on every pass.
#[derive(Debug, Default)]
pub(crate) struct Quarantine {
    reported: BTreeMap<(&'static str, String, String), (Option<String>, String)>,
}

impl Quarantine {
    /// The reports due for `bad` (one group per object), forgetting objects no longer bad.
    pub(crate) fn report(&mut self, bad: &[BadObject], now: Timestamp) -> Vec<Vec<Action>> {
        let mut still = BTreeMap::new();
        let mut groups = Vec::new();
        for object in bad {
            let (ns, name) = object.key();
            let key = (object.kind, ns, name);
            let state = (object.reference.uid.clone(), object.why.clone());
            if self.reported.get(&key) != Some(&state) {
                tracing::warn!(object = %object.describe(), problem = %object.why, "left out of planning until fixed");
                groups.push(actions_for(object, now));
            }
            still.insert(key, state);
        }
        self.reported = still;
        groups
    }
}

/// Counts of bad objects by kind, for the gauge.
pub(crate) fn count_by_kind(bad: &[BadObject]) -> BTreeMap<&'static str, i64> {
    let mut counts = BTreeMap::new();
    for object in bad {
        *counts.entry(object.kind).or_default() += 1;
    }
    counts
}

fn actions_for(object: &BadObject, now: Timestamp) -> Vec<Action> {
    let note = format!("{} is left out of planning until fixed: {}", object.describe(), object.why);
    let mut actions = Vec::new();
    if object.kind == "MigPolicy" && object.unreadable {
        let condition = Condition {
            type_: crate::policy::validation::READY.to_string(),
            status: "False".into(),
            reason: "Unreadable".into(),
            message: note.clone(),
            observed_generation: None,
            last_transition_time: Time(now),
        };
        actions.push(Action::PolicyStatus {
            policy: object.reference.name.clone().unwrap_or_default(),
            resource_version: None,
            before: None,
            status: MigPolicyStatus { conditions: vec![condition], ..MigPolicyStatus::default() },
        });
    }
    actions.push(Action::Event(EventSpec {
        regarding: object.reference.clone(),
        related: None,
        warning: true,
        reason: if object.unreadable { "Unreadable" } else { "InvalidObject" },
        action: "Read",
        note,
    }));
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use geometer_api::decode::DecodeError;
    use geometer_api::MigPolicy;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn bad_policy(uid: &str, field: &str) -> BadObject {
        let u = Unreadable {
            meta: ObjectMeta { name: Some("p".into()), uid: Some(uid.into()), ..ObjectMeta::default() },
            error: DecodeError {
                field: field.into(),
                value: Some("4294967296".into()),
                problem: "too big".into(),
            },
        };
        BadObject::unreadable::<MigPolicy>(&u)
    }

    #[test]
    fn an_unreadable_policy_gets_a_condition_and_an_event_once() {
        let mut q = Quarantine::default();
        let now = Timestamp::UNIX_EPOCH;
        let first = q.report(&[bad_policy("u1", "spec.solver.timeLimitMs")], now);
        assert_eq!(first.len(), 1);
        let Action::PolicyStatus { status, .. } = &first[0][0] else { panic!("{first:?}") };
        let ready = &status.conditions[0];
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Unreadable"));
        assert!(ready.message.contains("spec.solver.timeLimitMs") && ready.message.contains("4294967296"));
        let Action::Event(event) = &first[0][1] else { panic!("{first:?}") };
        assert!(event.warning && event.note.contains("MigPolicy p"), "{event:?}");

        assert!(q.report(&[bad_policy("u1", "spec.solver.timeLimitMs")], now).is_empty(), "reported once");
        assert_eq!(q.report(&[bad_policy("u1", "spec.headroom")], now).len(), 1, "a new problem is reported");
        assert!(q.report(&[], now).is_empty());
        assert_eq!(q.report(&[bad_policy("u1", "spec.headroom")], now).len(), 1, "bad again after a fix");
        assert_eq!(count_by_kind(&[bad_policy("u1", "x"), bad_policy("u2", "y")])["MigPolicy"], 2);
    }
}
