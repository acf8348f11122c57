//! The two text formats of `/metrics`. The registry writes OpenMetrics, which Prometheus asks
//! for (`Accept: application/openmetrics-text`); anyone else (curl, `promtool check metrics`,
//! older scrapers) gets the classic text format 0.0.4, as client_golang negotiates it
//! (prometheus/common `expfmt/encode.go`, `Negotiate`). The formats differ in what concerns
//! Geometer only in counters: OpenMetrics names the family `x` and its sample `x_total`, the
//! classic format names both `x_total`; and in the closing `# EOF`.

use std::collections::BTreeSet;

pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub(crate) const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request's `Accept` header asks for OpenMetrics.
pub(crate) fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// OpenMetrics text (as prometheus-client writes it) in the classic format.
pub(crate) fn classic(openmetrics: &str) -> String {
    let counters: BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_with_their_total_and_the_rest_is_kept() {
        let open = "# HELP geometer_rounds Planning rounds by outcome.\n# TYPE geometer_rounds counter\ngeometer_rounds_total{outcome=\"published\"} 3\n# HELP geometer_leader 1 while leading.\n# TYPE geometer_leader gauge\ngeometer_leader 1\n# EOF\n";
        assert_eq!(
            classic(open),
            "# HELP geometer_rounds_total Planning rounds by outcome.\n# TYPE geometer_rounds_total counter\ngeometer_rounds_total{outcome=\"published\"} 3\n# HELP geometer_leader 1 while leading.\n# TYPE geometer_leader gauge\ngeometer_leader 1\n"
        );
        assert!(wants_openmetrics(Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")));
        assert!(!wants_openmetrics(Some("*/*")) && !wants_openmetrics(None));
    }
}
