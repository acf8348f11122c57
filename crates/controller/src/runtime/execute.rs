//! Carries out actions against the API server.
//!
//! Status writes are merge patches of what changed (a field that went away is written as
//! `null`, so nothing stale stays behind) and carry the `resourceVersion` the decision was made
//! from: a decision taken on a stale cache fails with 409 Conflict instead of overwriting newer
//! state, and is taken again once the cache caught up.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::resource::v1::DeviceTaintRule;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource};
use serde::Serialize;
use serde_json::{json, Value};

use geometer_api::{merge_patch, MigNode, MigPlan, MigPolicy};

use crate::runtime::actions::{Action, EventSpec};
use crate::world;
use geometer_api::decoded::Decoded;

/// Field manager of every write, so `kubectl get --show-managed-fields` names the controller.
pub(crate) const FIELD_MANAGER: &str = "geometer-controller";

pub struct Executor {
    client: Client,
    recorder: Recorder,
}

/// How a group of actions went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Executed {
    pub done: usize,
    /// Conflicts: the cache was stale; retried on the next pass.
    pub conflicts: usize,
    pub errors: usize,
}

impl Executed {
    fn add(&mut self, other: Executed) {
        self.done += other.done;
        self.conflicts += other.conflicts;
        self.errors += other.errors;
    }
}

impl Executor {
    pub fn new(client: Client, reporter_instance: &str) -> Self {
        let reporter = kube::runtime::events::Reporter {
            controller: FIELD_MANAGER.to_string(),
            instance: Some(reporter_instance.to_string()),
        };
        Executor { recorder: Recorder::new(client.clone(), reporter), client }
    }

    /// Runs one reconcile's actions in order. The first action is the write the rest depend on
    /// (a plan's status before its MigNode writes and events, a plan's creation before the pod
    /// events that name it); when it fails, the rest are skipped.
    pub async fn run_group(&self, actions: Vec<Action>) -> Executed {
        let mut outcome = Executed::default();
        let mut created: Option<ObjectReference> = None;
        for (i, mut action) in actions.into_iter().enumerate() {
            if let (Some(made), Action::Event(event)) = (&created, &mut action) {
                // Events about a plan created in this group name it by its new uid, which
                // `kubectl describe` matches on.
                fill_uid(&mut event.regarding, made);
                if let Some(related) = &mut event.related {
                    fill_uid(related, made);
                }
            }
            let result = self.run(action).await;
            let failed = result.is_err();
            outcome.add(match result {
                Ok(made) => {
                    created = made.or(created);
                    Executed { done: 1, ..Default::default() }
                }
                Err(e) if is_conflict(&e) => {
                    tracing::debug!(error = %e, "write conflicted with a newer version; retrying after the cache catches up");
                    Executed { conflicts: 1, ..Default::default() }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "controller write failed");
                    Executed { errors: 1, ..Default::default() }
                }
            });
            if failed && i == 0 {
                break;
            }
        }
        outcome
    }

    /// Runs one action; a created object's reference comes back.
    async fn run(&self, action: Action) -> Result<Option<ObjectReference>, kube::Error> {
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match action {
            Action::PlanStatus { plan, resource_version, before, status } => {
                let patch = status_patch(resource_version, before.as_ref(), &status);
                Api::<Decoded<MigPlan>>::all(self.client.clone())
                    .patch_status(&plan, &params, &Patch::Merge(patch))
                    .await?;
            }
            Action::PolicyStatus { policy, resource_version, before, status } => {
                let patch = status_patch(resource_version, before.as_ref(), &status);
                // The answer is read as `Decoded`: a policy that cannot be read is told so too.
                Api::<Decoded<MigPolicy>>::all(self.client.clone())
                    .patch_status(&policy, &params, &Patch::Merge(patch))
                    .await?;
            }
            Action::NodeSpec { node, resource_version, spec, written_at } => {
                let patch = node_spec_patch(resource_version, &spec, written_at);
                Api::<Decoded<MigNode>>::all(self.client.clone())
                    .patch(&node, &params, &Patch::Merge(patch))
                    .await?;
            }
            Action::CreatePlan(plan) => {
                let api = Api::<MigPlan>::all(self.client.clone());
                let status = plan.status.clone().unwrap_or_default();
                let created = api
                    .create(
                        &PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() },
                        &plan,
                    )
                    .await?;
                let name = created.metadata.name.clone().unwrap_or_default();
                let patch = status_patch(created.metadata.resource_version.clone(), None, &status);
                api.patch_status(&name, &params, &Patch::Merge(patch)).await?;
                return Ok(Some(created.object_ref(&())));
            }
            Action::Event(spec) => self.publish(spec).await?,
            Action::NodeCompaction { node, compaction } => {
                let patch = json!({ "spec": { "compaction": compaction } });
                Api::<Decoded<MigNode>>::all(self.client.clone())
                    .patch(&node, &params, &Patch::Merge(patch))
                    .await?;
            }
            Action::CreateTaintRule(rule) => {
                let post = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                match Api::<DeviceTaintRule>::all(self.client.clone()).create(&post, &rule).await {
                    Err(e) if is_conflict(&e) => {}
                    other => drop(other?),
                }
            }
            Action::DeleteTaintRule(name) => {
                match Api::<DeviceTaintRule>::all(self.client.clone())
                    .delete(&name, &Default::default())
                    .await
                {
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    other => drop(other?),
                }
            }
        }
        Ok(None)
    }

    async fn publish(&self, spec: EventSpec) -> Result<(), kube::Error> {
        let event = Event {
            type_: if spec.warning { EventType::Warning } else { EventType::Normal },
            reason: spec.reason.to_string(),
            // events.k8s.io/v1 refuses notes over 1 KiB.
            note: Some(geometer_api::limits::cut(&spec.note, 1024)),
            action: spec.action.to_string(),
            secondary: spec.related,
        };
        self.recorder.publish(&event, &spec.regarding).await
    }
}

/// `{"metadata":{"resourceVersion":..},"status":<what changed>}`.
pub(crate) fn status_patch<S: Serialize>(
    resource_version: Option<String>,
    before: Option<&S>,
    after: &S,
) -> Value {
    let after = serde_json::to_value(after).unwrap_or(Value::Null);
    let status = match before.map(serde_json::to_value) {
        Some(Ok(before)) => merge_patch::diff(&before, &after),
        _ => after,
    };
    let mut patch = json!({ "status": status });
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    patch
}

/// The MigNode write: the desired geometry, the plan, and when it was written.
pub(crate) fn node_spec_patch<S: Serialize>(
    resource_version: Option<String>,
    spec: &S,
    written_at: jiff::Timestamp,
) -> Value {
    let mut metadata =
        json!({ "annotations": { world::SPEC_WRITTEN_AT: world::written_at_value(written_at) } });
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({ "metadata": metadata, "spec": spec })
}

fn fill_uid(reference: &mut ObjectReference, made: &ObjectReference) {
    if reference.uid.is_none() && reference.kind == made.kind && reference.name == made.name {
        reference.uid = made.uid.clone();
    }
}

pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_patches_carry_the_resource_version() {
        let patch = status_patch(
            Some("42".into()),
            Some(&json!({"phase": "Proposed"})),
            &json!({"phase": "Applying"}),
        );
        assert_eq!(patch, json!({"metadata": {"resourceVersion": "42"}, "status": {"phase": "Applying"}}));
    }
}
