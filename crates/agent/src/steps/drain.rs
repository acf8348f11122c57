//! The drain step: evict what may be evicted, wait for the rest, and say why in the
//! `DrainBlocked` condition and in events.
//!
//! A pod protected by do-not-disrupt blocks the whole drain: nothing is evicted while any pod
//! that must leave is protected, so that no pod is disrupted for a change that may time out.

use std::time::Duration;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};

use crate::observe::observation::Context;
use crate::runtime::agent_loop::{Agent, EvictionRetry, NextRound, StepError};
use crate::runtime::conditions;
use crate::steps::eviction::{self, EvictionOutcome, PodDrain};
use geometer_api::MigNodeStatus;
use geometer_solver::PodKey;

/// What keeps a drain from finishing this round, and when to look again.
struct Blockage {
    /// One line per pod or instance that holds the drain up.
    blocked: Vec<String>,
    /// The condition's reason: the first kind of blockage met.
    reason: Option<&'static str>,
    pause: Duration,
}

impl Blockage {
    fn add(&mut self, line: String, reason: &'static str) {
        self.blocked.push(line);
        self.reason.get_or_insert(reason);
    }
}

impl Agent {
    pub(crate) async fn drain(&mut self, cx: &mut Context) -> Result<NextRound, StepError> {
        let now = self.clock.now();
        let mut held = Blockage { blocked: Vec::new(), reason: None, pause: self.cfg.poll_interval };
        let protected = cx.pods.iter().any(|(_, p)| p.blocks());
        for (pod_ref, state) in &cx.pods {
            match state {
                PodDrain::Protected(b) => {
                    held.add(format!("{pod_ref}: {}", b.why), "DoNotDisrupt");
                    if let Some(until) = b.until {
                        held.pause = held.pause.min(self.clock.until(until));
                    }
                    let note = format!("not evicting {pod_ref}: {}; the MIG change waits for it", b.why);
                    self.announce_blocked(pod_ref, note).await;
                }
                PodDrain::Forbidden { why } => {
                    held.add(format!("{pod_ref}: {why}"), "EvictionNotAllowed");
                    self.announce_blocked(pod_ref, format!("not evicting {pod_ref}: {why}")).await;
                }
                PodDrain::Evictable(_) if protected => {}
                PodDrain::Evictable(pod) => self.evict_one(pod_ref, pod, now, &mut held).await?,
                PodDrain::Terminating | PodDrain::Gone => {}
            }
        }
        for gpu in &cx.work.gpus {
            for i in gpu.busy_without_pod() {
                let line = format!(
                    "GPU {}: {} runs {} process(es) outside Kubernetes; waiting for them to end",
                    gpu.index,
                    i.placed(),
                    i.processes
                );
                held.add(line, "ProcessesOutsideKubernetes");
            }
        }
        self.report_drain(cx, held, now).await
    }

    /// The first time a pod holds the drain up, a warning says why.
    pub(crate) async fn announce_blocked(&mut self, pod_ref: &str, note: String) {
        self.announce(pod_ref, "DrainBlocked", note).await;
    }

    /// A warning with `reason` on the MigNode and the pod, the first time the pod holds
    /// something up.
    pub(crate) async fn announce(&mut self, pod_ref: &str, reason: &str, note: String) {
        if self.mem.announced.insert(pod_ref.to_string()) {
            self.warn_about_pod(pod_ref, reason, note).await;
        }
    }

    /// Evicts one pod unless its last refusal's backoff still runs; a refusal (429: a
    /// PodDisruptionBudget) is remembered with its next try.
    async fn evict_one(
        &mut self,
        pod_ref: &str,
        pod: &k8s_openapi::api::core::v1::Pod,
        now: jiff::Timestamp,
        held: &mut Blockage,
    ) -> Result<(), StepError> {
        if let Some(retry) = self.mem.evictions.get(pod_ref).filter(|r| r.next_try > now) {
            held.add(
                format!("{pod_ref}: eviction refused by a PodDisruptionBudget; retrying"),
                "PodDisruptionBudget",
            );
            held.pause = held.pause.min(self.clock.until(retry.next_try));
            return Ok(());
        }
        match eviction::evict(&self.client, pod).await? {
            EvictionOutcome::Evicted => {
                self.mem.evictions.remove(pod_ref);
                self.metrics.evicted();
                let note = format!("evicted {pod_ref}: its MIG instance is being removed");
                self.event(EventType::Normal, "Evicted", "Evict", note, None).await;
            }
            EvictionOutcome::Refused { message } => {
                let retry = self
                    .mem
                    .evictions
                    .entry(pod_ref.to_string())
                    .or_insert(EvictionRetry { refusals: 0, next_try: now });
                retry.refusals += 1;
                let delay = self.cfg.eviction_backoff.delay(retry.refusals);
                retry.next_try = now
                    .checked_add(SignedDuration::try_from(delay).unwrap_or(SignedDuration::MAX))
                    .unwrap_or(now);
                let first = retry.refusals == 1;
                held.pause = held.pause.min(delay);
                let line =
                    format!("{pod_ref}: eviction refused by a PodDisruptionBudget ({message}); retrying");
                held.add(line, "PodDisruptionBudget");
                if first {
                    let note = format!(
                        "eviction of {pod_ref} refused by a PodDisruptionBudget: {message}; retrying with backoff"
                    );
                    self.warn_about_pod(pod_ref, "EvictionRefused", note).await;
                }
            }
            EvictionOutcome::Gone => {}
        }
        Ok(())
    }

    /// The `DrainBlocked` condition (what holds the drain up and when it fails, or what it
    /// waits for), written to status; the next round comes after the pause, or at the deadline.
    async fn report_drain(
        &mut self,
        cx: &mut Context,
        mut held: Blockage,
        now: jiff::Timestamp,
    ) -> Result<NextRound, StepError> {
        let g = Some(cx.generation);
        // The step is written to status before it is taken; a drain without one fails the
        // round (retried with backoff) rather than the agent.
        let Some(step) = cx.status.step.as_mut() else {
            return Err(StepError::Verify(
                "the drain step is missing from the MigNode's status, where it is recorded before the drain runs; the agent records it again on its next round".into(),
            ));
        };
        step.pod = cx.pods.first().map(|(p, _)| p.clone());
        let timeout = SignedDuration::try_from(cx.disruption.settings.timeout).unwrap_or(SignedDuration::MAX);
        let deadline = step.started_at.0.checked_add(timeout).ok();
        if let Some(deadline) = deadline {
            held.pause = held.pause.min(self.clock.until(deadline).max(Duration::from_millis(1)));
        }
        self.metrics.set_drain_blocked(held.reason);
        let (blocked, reason, message) = match held.reason {
            Some(reason) => {
                let mut message = held.blocked.join("; ");
                if let Some(deadline) = deadline {
                    message.push_str(&format!(". The drain fails at {deadline} if they have not left"));
                }
                (true, reason, message)
            }
            None => (false, "Draining", format!("waiting for {} to leave", waiting_for(cx))),
        };
        conditions::set(
            &mut cx.status.conditions,
            MigNodeStatus::DRAIN_BLOCKED,
            blocked,
            reason,
            message,
            g,
            now,
        );
        self.write_status(&cx.status).await?;
        Ok(NextRound::Wait(held.pause))
    }

    /// A warning event on the MigNode and on the pod, so `kubectl describe pod` shows it too.
    async fn warn_about_pod(&self, pod_ref: &str, reason: &str, note: String) {
        self.event(EventType::Warning, reason, "Evict", note.clone(), None).await;
        let Ok(key) = PodKey::parse(pod_ref) else { return };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(key.namespace().into()),
            name: Some(key.name().into()),
            ..Default::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Evict".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, pod = pod_ref, "could not publish event on pod");
        }
    }
}

/// What the drain still waits for, for messages: each pod with where it stands, and
/// instances used outside Kubernetes.
pub(crate) fn waiting_for(cx: &Context) -> String {
    let mut parts: Vec<String> = cx
        .pods
        .iter()
        .map(|(pod, state)| match state {
            PodDrain::Gone => format!("{pod} (deleted, device not released yet)"),
            PodDrain::Terminating => format!("{pod} (terminating)"),
            PodDrain::Protected(b) => format!("{pod} ({})", b.why),
            PodDrain::Forbidden { why } => format!("{pod} ({why})"),
            PodDrain::Evictable(_) => format!("{pod} (eviction pending)"),
        })
        .collect();
    for gpu in &cx.work.gpus {
        for i in gpu.busy_without_pod() {
            parts.push(format!(
                "GPU {} {} ({} process(es) outside Kubernetes)",
                gpu.index,
                i.placed(),
                i.processes
            ));
        }
    }
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(", ")
    }
}
