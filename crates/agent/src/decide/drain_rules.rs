//! The disruption rules a drain follows: the MigPolicy's (through the MigPlan named in the
//! MigNode spec) when they can be read, else the agent's own flags.

use std::time::Duration;

use kube::Api;

use crate::runtime::agent_loop::Agent;
use crate::steps::eviction::DrainSettings;
use geometer_api::{MigNodeSpec, MigPlan, MigPolicy};

/// How this change may disrupt pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DrainRules {
    pub settings: DrainSettings,
    /// Whether pods may be evicted at all. When not, the drain waits for them to leave.
    pub eviction_allowed: bool,
    /// Where the rules come from, for messages: `MigPolicy NAME` or `agent flags`.
    pub source: String,
    /// Whether the policy lets the agent reset a GPU whose MIG mode changes only through a
    /// reset (`spec.disruption.allowGpuReset`); the agent also needs `--allow-gpu-reset`.
    /// Without a policy, the agent's flag decides alone.
    pub gpu_reset_allowed: bool,
}

impl Agent {
    /// The rules for the change `spec` asks for. A plan or policy that is not there (none
    /// named, or deleted) leaves the agent's flags in force, said so in the log; one that is
    /// there but cannot be read (an API error, or an object Geometer cannot decode) allows no
    /// eviction until it can be, since the policy might forbid them.
    pub(crate) async fn disruption(&self, spec: &MigNodeSpec) -> DrainRules {
        let flags = DrainRules {
            settings: self.cfg.drain.clone(),
            eviction_allowed: true,
            source: "agent flags".into(),
            gpu_reset_allowed: true,
        };
        let Some(plan_name) = &spec.plan else { return flags };
        let plan = match Api::<MigPlan>::all(self.client.clone()).get_opt(plan_name).await {
            Ok(Some(plan)) => plan,
            Ok(None) => {
                tracing::debug!(plan = %plan_name, "MigPlan not found; the drain follows the agent's flags");
                return flags;
            }
            Err(e) => {
                tracing::warn!(plan = %plan_name, error = %e, "cannot read the MigPlan; no pod is evicted until it can be");
                return DrainRules {
                    eviction_allowed: false,
                    gpu_reset_allowed: false,
                    source: format!("MigPlan {plan_name} (unreadable)"),
                    ..flags
                };
            }
        };
        self.policy_rules(&plan.spec.policy, flags).await
    }

    /// The rules of MigPolicy `policy_name`; `missing` when there is no such policy. One that
    /// cannot be read allows no eviction until it can be.
    pub(crate) async fn policy_rules(&self, policy_name: &str, missing: DrainRules) -> DrainRules {
        let flags = missing;
        match Api::<MigPolicy>::all(self.client.clone()).get_opt(policy_name).await {
            Ok(Some(policy)) => {
                let d = policy.spec.disruption;
                DrainRules {
                    settings: DrainSettings {
                        do_not_disrupt_keys: d.do_not_disrupt_annotations,
                        timeout: Duration::from_secs(d.drain_timeout_seconds.into()),
                    },
                    eviction_allowed: d.eviction_allowed,
                    gpu_reset_allowed: d.allow_gpu_reset,
                    source: format!("MigPolicy {policy_name}"),
                }
            }
            Ok(None) => {
                tracing::debug!(policy = %policy_name, rules = %flags.source, "MigPolicy not found; the drain follows the other rules");
                flags
            }
            Err(e) => {
                tracing::warn!(policy = %policy_name, error = %e, "cannot read the MigPolicy; no pod is evicted until it can be");
                DrainRules {
                    eviction_allowed: false,
                    gpu_reset_allowed: false,
                    source: format!("MigPolicy {policy_name} (unreadable)"),
                    ..flags
                }
            }
        }
    }
}
