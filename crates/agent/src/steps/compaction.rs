//! Compaction on a DynamicMIG node. The controller names the pods whose instances stand where
//! a claim that fragmentation blocks could go (MigNode `spec.compaction`), after it has made
//! DeviceTaintRules that keep other claims off that placement; the agent evicts those pods
//! through the Eviction API under the policy's rules (PodDisruptionBudgets honoured, a
//! do-not-disrupt pod never evicted), checking each again before it acts: still this node's,
//! the same pod (uid), not protected now. It changes no instance: NVIDIA's driver destroys each
//! when its pod's claim is unprepared, and makes the new ones.

use jiff::Timestamp;
use kube::runtime::events::EventType;

use crate::decide::drain_rules::DrainRules;
use crate::runtime::agent_loop::{Agent, StepError};
use crate::steps::eviction::{self, classify, EvictionOutcome, PodDrain};
use geometer_api::{Compaction, PodRef};
use geometer_solver::PodKey;

impl Agent {
    /// Evicts what `compaction` names and may be evicted now; the rest is said once, and tried
    /// again next round (a budget's refusal) or left (protected, gone, replaced).
    pub(crate) async fn compact(&mut self, compaction: &Compaction, now: Timestamp) -> Result<(), StepError> {
        // No policy, no evictions: the controller asked under a policy that is gone.
        let missing = DrainRules {
            settings: self.cfg.drain.clone(),
            eviction_allowed: false,
            source: format!("MigPolicy {} (not found)", compaction.policy),
            gpu_reset_allowed: false,
        };
        let rules = self.policy_rules(&compaction.policy, missing).await;
        let forbidden = (!rules.eviction_allowed)
            .then(|| format!("{} does not allow evictions (spec.disruption.evictionAllowed)", rules.source));
        for target in &compaction.evict {
            let Some(pod) = self.compaction_target(target).await? else { continue };
            if !geometer_api::do_not_disrupt::comes_back(&pod.metadata) {
                let note = format!("not moving {}: no controller would bring it back", target.pod);
                self.announce_blocked(&target.pod, note).await;
                continue;
            }
            let why = format!("so that {} can have {}", compaction.for_pod, compaction.device);
            match classify(Some(pod), &rules.settings.do_not_disrupt_keys, now, forbidden.as_deref()) {
                PodDrain::Evictable(pod) => match eviction::evict(&self.client, &pod).await? {
                    EvictionOutcome::Evicted => {
                        self.metrics.evicted();
                        let note = format!("evicted {}: it moves {why}", target.pod);
                        self.event(EventType::Normal, "Evicted", "Compact", note, Some(&pod)).await;
                    }
                    EvictionOutcome::Refused { message } => {
                        let note = format!(
                            "eviction of {} refused by a PodDisruptionBudget: {message}; retrying",
                            target.pod
                        );
                        self.announce(&target.pod, "EvictionRefused", note).await;
                    }
                    EvictionOutcome::Gone => {}
                },
                PodDrain::Protected(b) => {
                    self.announce_blocked(&target.pod, format!("not moving {}: {}", target.pod, b.why)).await;
                }
                PodDrain::Forbidden { why } => {
                    self.announce_blocked(&target.pod, format!("not moving {}: {why}", target.pod)).await;
                }
                PodDrain::Gone | PodDrain::Terminating => {}
            }
        }
        Ok(())
    }

    /// The pod `target` names if it is still that pod (same uid) and bound to this node.
    async fn compaction_target(
        &self,
        target: &PodRef,
    ) -> Result<Option<k8s_openapi::api::core::v1::Pod>, StepError> {
        let Ok(key) = PodKey::parse(&target.pod) else { return Ok(None) };
        let pod = self.pods(key.namespace()).get_opt(key.name()).await?;
        Ok(pod.filter(|p| {
            p.metadata.uid.as_deref() == Some(target.uid.as_str())
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.cfg.node.as_str())
        }))
    }
}
