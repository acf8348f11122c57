//! A plan's compact review, kept in the MigPlan's `geometer.dev/review` annotation so that
//! `kubectl describe migplan` shows it first (annotations come before the spec, which lists
//! every instance of every GPU): one before/after line per changed GPU, the pods it helps and
//! those it evicts.

use std::fmt::Write;

use geometer_api::{MigPlanSpec, PlacedInstance};

/// The annotation holding the review.
pub(crate) const REVIEW_ANNOTATION: &str = "geometer.dev/review";
/// Lines of each kind shown; the rest are counted.
const MOST: usize = 40;

fn geometry(list: &[PlacedInstance]) -> String {
    if list.is_empty() {
        return "(empty)".into();
    }
    list.iter().map(|p| format!("{}@{}", p.profile, p.start)).collect::<Vec<_>>().join(" ")
}

/// The review of `spec`.
pub(crate) fn text(spec: &MigPlanSpec) -> String {
    let mut out = String::new();
    let changed: Vec<String> = spec
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter().filter(|g| g.changes()).map(move |g| (n, g)))
        .map(|(n, g)| {
            format!("{} GPU {} ({}): {} -> {}", n.node, g.index, g.model, geometry(&g.from), geometry(&g.to))
        })
        .collect();
    section(&mut out, "changes", &changed);
    let helps: Vec<String> =
        spec.demand.met.iter().map(|m| format!("{} gets {} on {}", m.pod, m.profile, m.node)).collect();
    section(&mut out, "helps", &helps);
    let evicts: Vec<String> =
        spec.evictions.iter().map(|e| format!("{}/{} on {}", e.namespace, e.name, e.node)).collect();
    section(&mut out, "evicts", &evicts);
    out.trim_end().to_string()
}

fn section(out: &mut String, title: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(out, "{title}:");
    for line in lines.iter().take(MOST) {
        let _ = writeln!(out, "  {line}");
    }
    if lines.len() > MOST {
        let _ = writeln!(out, "  ... and {} more", lines.len() - MOST);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_line_per_changed_gpu_then_the_pods_helped_and_evicted() {
        let spec: MigPlanSpec = serde_json::from_value(json!({"policy": "pool",
            "nodes": [{"node": "gpu-a", "gpus": [
                {"index": 0, "model": "H100-80GB", "from": [{"profile": "7g.80gb", "start": 0}],
                 "to": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}],
                 "operations": {"destroy": [{"profile": "7g.80gb", "start": 0}], "create": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}},
                {"index": 1, "model": "H100-80GB", "from": [], "to": [], "operations": {}}]}],
            "evictions": [{"namespace": "ml", "name": "old", "node": "gpu-a", "reason": "makes room"}],
            "demand": {"met": [{"pod": "ml/a", "profile": "3g.40gb", "node": "gpu-a"}], "unmet": []}}))
        .unwrap();
        assert_eq!(
            text(&spec),
            "changes:\n  gpu-a GPU 0 (H100-80GB): 7g.80gb@0 -> 3g.40gb@0 3g.40gb@4\nhelps:\n  ml/a gets 3g.40gb on gpu-a\nevicts:\n  ml/old on gpu-a"
        );
    }
}
