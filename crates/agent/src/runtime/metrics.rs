//! Prometheus metrics of one agent, served as text on its `/metrics`: what an operator needs to
//! see from a node without reading its MigNode (an object it cannot read, the steps it takes and
//! the ones that fail, by reason).

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use geometer_api::StepAction;

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

pub struct AgentMetrics {
    registry: Mutex<Registry>,
    unreadable: Family<KindLabel, Gauge>,
    steps: Family<ActionLabel, Counter>,
    failures: Family<ReasonLabel, Counter>,
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
        }
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

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
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
}
