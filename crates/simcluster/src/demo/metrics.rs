//! The demo's `/metrics` (`geometer demo --metrics-addr`): the controller's metrics and every
//! agent's, as one scrape, each agent's samples labelled with its `node` (in a cluster each
//! agent serves its own and Prometheus adds the pod's labels).

use std::collections::BTreeMap;
use std::sync::Arc;

use geometer_agent::AgentMetrics;
use geometer_controller::Metrics;

/// The OpenMetrics text of the controller and the agents.
pub(super) fn merged(controller: &Metrics, agents: &BTreeMap<String, Arc<AgentMetrics>>) -> String {
    let mut out: String =
        controller.encode().lines().filter(|l| *l != "# EOF").map(|l| format!("{l}\n")).collect();
    // Family -> (header lines, samples of every agent), in the order the first agent writes them.
    let mut families: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    for (node, metrics) in agents {
        let mut current: Option<usize> = None;
        for line in metrics.encode().lines() {
            if line == "# EOF" {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or_default().to_string();
                let at = families.iter().position(|f| f.0 == name).unwrap_or_else(|| {
                    families.push((name, Vec::new(), Vec::new()));
                    families.len() - 1
                });
                if families[at].1.is_empty() {
                    families[at].1.push(line.to_string());
                }
                current = Some(at);
            } else if line.starts_with('#') {
                if let Some(at) = current
                    .filter(|&at| families[at].1.len() < 3 && !families[at].1.contains(&line.to_string()))
                {
                    families[at].1.push(line.to_string());
                }
            } else if let Some(at) = current {
                families[at].2.push(labelled(line, node));
            }
        }
    }
    for (_, header, samples) in families {
        for line in header.iter().chain(&samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}

/// `line` (a sample) with `node="<node>"` added to its labels.
fn labelled(line: &str, node: &str) -> String {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    match rest.strip_prefix('{') {
        Some(labels) if labels.starts_with('}') => format!("{name}{{node=\"{node}\"{labels}"),
        Some(labels) => format!("{name}{{node=\"{node}\",{labels}"),
        None => format!("{name}{{node=\"{node}\"}}{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_sample_is_labelled_with_its_node_under_one_header() {
        assert_eq!(
            labelled("geometer_agent_evictions_total 3", "a"),
            "geometer_agent_evictions_total{node=\"a\"} 3"
        );
        assert_eq!(
            labelled("geometer_agent_steps_total{action=\"Cordon\"} 1", "a"),
            "geometer_agent_steps_total{node=\"a\",action=\"Cordon\"} 1"
        );
        let agents: BTreeMap<String, Arc<AgentMetrics>> =
            ["a", "b"].into_iter().map(|n| (n.to_string(), Arc::new(AgentMetrics::new()))).collect();
        let text = merged(&Metrics::new(), &agents);
        assert_eq!(text.matches("# TYPE geometer_agent_unreadable_objects gauge").count(), 1, "{text}");
        assert!(text.contains("geometer_agent_unreadable_objects{node=\"a\",kind=\"MigNode\"} 0"), "{text}");
        assert!(text.contains("geometer_agent_unreadable_objects{node=\"b\",kind=\"MigNode\"} 0"), "{text}");
        assert!(text.ends_with("# EOF\n") && text.matches("# EOF").count() == 1);
    }
}
