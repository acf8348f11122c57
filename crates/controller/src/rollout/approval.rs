//! Approving a plan (`kubectl geometer approve PLAN`): checks that approval means something for
//! this plan, then sets `spec.approved: true` with the same merge patch a person would send with
//! `kubectl patch`, guarded by the resourceVersion that was checked.

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use thiserror::Error;

use geometer_api::{MigPlan, MigPolicy, PolicyMode};

/// What approving did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approved {
    /// `spec.approved` is now true.
    Now { plan: String, policy: String },
    /// It was already true.
    Already { plan: String },
    /// The policy is in Auto mode: plans apply without approval; nothing was written.
    NotNeeded { plan: String, policy: String },
}

impl std::fmt::Display for Approved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Approved::Now { plan, policy } => write!(
                f,
                "migplan {plan} approved; the controller applies it within the disruption limits of policy {policy}. Follow it with: kubectl get migplan {plan} -w"
            ),
            Approved::Already { plan } => write!(f, "migplan {plan} was already approved"),
            Approved::NotNeeded { plan, policy } => write!(
                f,
                "migplan {plan} needs no approval: policy {policy} is in Auto mode and applies plans at once"
            ),
        }
    }
}

#[derive(Debug, Error)]
pub enum ApprovalError {
    #[error("no MigPlan named {0:?}; list them with `kubectl get migplans`")]
    NoSuchPlan(String),
    #[error("migplan {plan} is {phase}{detail}; only a Proposed or Approved plan can be approved{hint}")]
    Final { plan: String, phase: String, detail: String, hint: String },
    #[error(
        "migplan {plan} belongs to policy {policy}, which no longer exists; the plan will be superseded"
    )]
    NoPolicy { plan: String, policy: String },
    #[error("policy {policy} is in DryRun mode, so its plans are never applied; to apply plans, set its mode first: kubectl patch migpolicy {policy} --type=merge -p '{{\"spec\":{{\"mode\":\"Approve\"}}}}'")]
    DryRun { policy: String },
    #[error("migplan {0} changed while it was being approved (another phase?); look at it again and rerun")]
    Changed(String),
    #[error("talking to the API server: {0}")]
    Api(#[from] kube::Error),
}

impl ApprovalError {
    /// Exit code: 2 for a name that does not exist (bad input), 1 for "no", 1 for API errors.
    pub fn exit_code(&self) -> u8 {
        match self {
            ApprovalError::NoSuchPlan(_) => 2,
            _ => 1,
        }
    }
}

pub async fn approve(client: Client, plan_name: &str) -> Result<Approved, ApprovalError> {
    let plans: Api<MigPlan> = Api::all(client.clone());
    let plan =
        plans.get_opt(plan_name).await?.ok_or_else(|| ApprovalError::NoSuchPlan(plan_name.to_string()))?;
    let status = plan.status.clone().unwrap_or_default();
    if status.phase.is_final() {
        let newest = newest_of_policy(&plans, &plan.spec.policy).await?;
        return Err(ApprovalError::Final {
            plan: plan_name.to_string(),
            phase: format!("{:?}", status.phase),
            detail: status.message.map(|m| format!(" ({m})")).unwrap_or_default(),
            hint: match newest {
                Some(n) if n != plan_name => {
                    format!("; the newest plan of policy {} is {n}", plan.spec.policy)
                }
                _ => String::new(),
            },
        });
    }
    if plan.spec.approved {
        return Ok(Approved::Already { plan: plan_name.to_string() });
    }
    let policy_name = plan.spec.policy.clone();
    let policy = Api::<MigPolicy>::all(client).get_opt(&policy_name).await?.ok_or_else(|| {
        ApprovalError::NoPolicy { plan: plan_name.to_string(), policy: policy_name.clone() }
    })?;
    match policy.spec.mode {
        PolicyMode::DryRun => return Err(ApprovalError::DryRun { policy: policy_name }),
        PolicyMode::Auto => {
            return Ok(Approved::NotNeeded { plan: plan_name.to_string(), policy: policy_name })
        }
        PolicyMode::Approve => {}
    }
    let patch = json!({
        "metadata": {"resourceVersion": plan.resource_version()},
        "spec": {"approved": true}
    });
    match plans
        .patch(
            plan_name,
            &PatchParams { field_manager: Some("geometer-approve".into()), ..Default::default() },
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(Approved::Now { plan: plan_name.to_string(), policy: policy_name }),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(ApprovalError::Changed(plan_name.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// The newest plan of `policy`; a plan that cannot be read (another policy's, stored by an
/// older Geometer) does not stop the approval of this one.
async fn newest_of_policy(plans: &Api<MigPlan>, policy: &str) -> Result<Option<String>, kube::Error> {
    let plans: Api<crate::Decoded<MigPlan>> = Api::all(plans.clone().into_client());
    let all = plans.list(&Default::default()).await?;
    Ok(all
        .items
        .iter()
        .filter_map(|p| p.read())
        .filter(|p| p.spec.policy == policy)
        .max_by_key(|p| (p.creation_timestamp().map(|t| t.0), p.name_any()))
        .map(|p| p.name_any()))
}
