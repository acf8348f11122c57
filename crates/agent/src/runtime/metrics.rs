//! Prometheus metrics of one agent, served as text on its `/metrics`: what an operator needs to
//! see from a node without reading its MigNode (an object it cannot read, the steps it takes and
//! the ones that fail, by reason, how long each phase of a reconfiguration takes, evictions,
//! drains held up, NVML errors by call).

use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use geometer_api::{MigNodePhase, StepAction};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabel {
    call: String,
}

/// Reasons a drain is held up, as the `DrainBlocked` condition names them.
const DRAIN_BLOCKERS: [&str; 4] =
    ["DoNotDisrupt", "PodDisruptionBudget", "EvictionNotAllowed", "ProcessesOutsideKubernetes"];

pub struct AgentMetrics {
    registry: Mutex<Registry>,
    unreadable: Family<KindLabel, Gauge>,
    steps: Family<ActionLabel, Counter>,
    failures: Family<ReasonLabel, Counter>,
    phase_seconds: Family<PhaseLabel, Histogram>,
    evictions: Counter,
    drain_blocked: Family<ReasonLabel, Gauge>,
    nvml_errors: Family<CallLabel, Counter>,
    operands_paused: Gauge,
    /// The phase last written and since when.
    phase: Mutex<Option<(MigNodePhase, Instant)>>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    pub fn new() -> AgentMetrics {
        let metrics = AgentMetrics {
            registry: Mutex::new(Registry::default()),
            unreadable: Family::default(),
            steps: Family::default(),
            failures: Family::default(),
            // 0.1 s .. ~55 min: a repartition takes seconds, a drain may wait for long jobs.
            phase_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.1, 2.0, 16))),
            evictions: Counter::default(),
            drain_blocked: Family::default(),
            nvml_errors: Family::default(),
            operands_paused: Gauge::default(),
            phase: Mutex::new(None),
        };
        {
            let mut registry = metrics.registry.lock().unwrap_or_else(|p| p.into_inner());
            registry.register(
                "geometer_agent_unreadable_objects",
                "Objects of this node the agent cannot decode (1 while its MigNode cannot be read; nothing on the node changes meanwhile)",
                metrics.unreadable.clone(),
            );
            registry.register(
                "geometer_agent_steps",
                "Reconfiguration steps started (first tries and retries), by action",
                metrics.steps.clone(),
            );
            registry.register(
                "geometer_agent_step_failures",
                "Rounds that failed, by the reason written in the MigNode's Failed condition",
                metrics.failures.clone(),
            );
            registry.register(
                "geometer_agent_phase_seconds",
                "Time the node spent in each phase of a reconfiguration (Cordoning, Draining, Repartitioning, Advertising, Uncordoning)",
                metrics.phase_seconds.clone(),
            );
            registry.register(
                "geometer_agent_evictions",
                "Pods evicted to make room for a change",
                metrics.evictions.clone(),
            );
            registry.register(
                "geometer_agent_drain_blocked",
                "1 while the node's drain is held up, by what holds it (the DrainBlocked condition's reason)",
                metrics.drain_blocked.clone(),
            );
            registry.register(
                "geometer_agent_nvml_errors",
                "Failed rounds whose error came from NVML, by the step's NVML call",
                metrics.nvml_errors.clone(),
            );
            registry.register(
                "geometer_agent_operands_paused",
                "1 while the agent holds the GPU Operator's operands paused for a change on this node",
                metrics.operands_paused.clone(),
            );
        }
        metrics.set_drain_blocked(None);
        // Every kind the agent reads is shown, at 0 while readable.
        metrics.set_unreadable("MigNode", false);
        metrics
    }

    pub(crate) fn set_unreadable(&self, kind: &str, unreadable: bool) {
        self.unreadable.get_or_create(&KindLabel { kind: kind.into() }).set(i64::from(unreadable));
    }

    pub(crate) fn step_started(&self, action: StepAction) {
        self.steps.get_or_create(&ActionLabel { action: format!("{action:?}") }).inc();
    }

    pub(crate) fn failed(&self, reason: &str) {
        self.failures.get_or_create(&ReasonLabel { reason: reason.into() }).inc();
    }

    /// The phase written to the MigNode now: the one it leaves is timed, when it is a phase of
    /// a reconfiguration.
    pub(crate) fn phase(&self, phase: MigNodePhase) {
        let mut current = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        match *current {
            Some((old, _)) if old == phase => return,
            Some((old, since)) if reconfiguring(old) => {
                let label = PhaseLabel { phase: format!("{old:?}") };
                self.phase_seconds.get_or_create(&label).observe(since.elapsed().as_secs_f64());
            }
            _ => {}
        }
        if phase != MigNodePhase::Draining {
            self.set_drain_blocked(None);
        }
        *current = Some((phase, Instant::now()));
    }

    pub(crate) fn evicted(&self) {
        self.evictions.inc();
    }

    /// What holds the drain up now (`None`: nothing).
    pub(crate) fn set_drain_blocked(&self, reason: Option<&str>) {
        for r in DRAIN_BLOCKERS {
            self.drain_blocked
                .get_or_create(&ReasonLabel { reason: r.into() })
                .set(i64::from(reason == Some(r)));
        }
    }

    pub(crate) fn set_operands_paused(&self, paused: bool) {
        self.operands_paused.set(i64::from(paused));
    }

    pub(crate) fn nvml_error(&self, call: StepAction) {
        self.nvml_errors.get_or_create(&CallLabel { call: format!("{call:?}") }).inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        geometer_api::metrics_text::openmetrics(&self.registry)
    }
}

fn reconfiguring(phase: MigNodePhase) -> bool {
    matches!(
        phase,
        MigNodePhase::Cordoning
            | MigNodePhase::Draining
            | MigNodePhase::Repartitioning
            | MigNodePhase::Advertising
            | MigNodePhase::Uncordoning
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_back_under_their_labels() {
        let m = AgentMetrics::new();
        assert!(m.encode().contains("geometer_agent_unreadable_objects{kind=\"MigNode\"} 0"));
        m.set_unreadable("MigNode", true);
        m.step_started(StepAction::Cordon);
        m.step_started(StepAction::Cordon);
        m.failed("DrainTimeout");
        let text = m.encode();
        assert!(text.contains("geometer_agent_unreadable_objects{kind=\"MigNode\"} 1"), "{text}");
        assert!(text.contains("geometer_agent_steps_total{action=\"Cordon\"} 2"), "{text}");
        assert!(text.contains("geometer_agent_step_failures_total{reason=\"DrainTimeout\"} 1"), "{text}");
    }

    #[test]
    fn phases_are_timed_when_left_and_a_drain_blockage_clears_with_the_drain() {
        let m = AgentMetrics::new();
        m.phase(MigNodePhase::Ready);
        m.phase(MigNodePhase::Draining);
        m.set_drain_blocked(Some("PodDisruptionBudget"));
        assert!(m.encode().contains("geometer_agent_drain_blocked{reason=\"PodDisruptionBudget\"} 1"));
        m.phase(MigNodePhase::Repartitioning);
        m.evicted();
        m.nvml_error(StepAction::CreateGpuInstance);
        let text = m.encode();
        assert!(text.contains("geometer_agent_phase_seconds_count{phase=\"Draining\"} 1"), "{text}");
        assert!(!text.contains("phase=\"Ready\""), "Ready is not a phase of a reconfiguration: {text}");
        assert!(text.contains("geometer_agent_drain_blocked{reason=\"PodDisruptionBudget\"} 0"), "{text}");
        assert!(text.contains("geometer_agent_evictions_total 1"), "{text}");
        assert!(text.contains("geometer_agent_nvml_errors_total{call=\"CreateGpuInstance\"} 1"), "{text}");
    }
}
