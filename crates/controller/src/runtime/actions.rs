//! What a reconcile decided to do, as data. Decisions are pure functions returning actions;
//! [`crate::runtime::execute`] carries them out against the API server. Tests assert on the actions for
//! the logic and on the API requests for their shape.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;

use geometer_api::{Compaction, MigNodeSpec, MigPlan, MigPlanStatus, MigPolicyStatus};
use k8s_openapi::api::resource::v1::DeviceTaintRule;

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Change a plan's status from `before` (what the decision saw) to `status`.
    /// `resource_version` guards against acting on a stale cache.
    PlanStatus {
        plan: String,
        resource_version: Option<String>,
        before: Option<MigPlanStatus>,
        status: MigPlanStatus,
    },
    /// Write a MigNode's desired geometry.
    NodeSpec {
        node: String,
        resource_version: Option<String>,
        spec: MigNodeSpec,
        written_at: Timestamp,
    },
    PolicyStatus {
        policy: String,
        resource_version: Option<String>,
        before: Option<MigPolicyStatus>,
        status: MigPolicyStatus,
    },
    /// Publish a new plan (created, then its status set to Proposed).
    CreatePlan(Box<MigPlan>),
    Event(EventSpec),
    /// DynamicMIG compaction: set (or clear) a MigNode's `spec.compaction`.
    NodeCompaction {
        node: String,
        compaction: Option<Box<Compaction>>,
    },
    /// DynamicMIG compaction: make a DeviceTaintRule (one that exists already is kept).
    CreateTaintRule(Box<DeviceTaintRule>),
    /// DynamicMIG compaction: delete a DeviceTaintRule (one that is gone already is no error).
    DeleteTaintRule(String),
}

/// An event for `kubectl describe`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    pub regarding: ObjectReference,
    /// A second object the event is about (the plan, on a pod's event).
    pub related: Option<ObjectReference>,
    pub warning: bool,
    /// CamelCase, e.g. `SlicePlanned`.
    pub reason: &'static str,
    /// CamelCase verb of what the controller did, e.g. `Plan`.
    pub action: &'static str,
    pub note: String,
}
