//! The text the controller and every agent serve on `/metrics`: their registry in OpenMetrics
//! (the controller's health server turns it into Prometheus' classic format for scrapers that do
//! not ask for OpenMetrics). The metric names are part of Geometer's interface: dashboards and
//! alerts (deploy/helm/geometer/files) read them.

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

/// The OpenMetrics text of every metric in `registry`, ending in `# EOF`.
pub fn openmetrics(registry: &Mutex<Registry>) -> String {
    let mut out = String::new();
    let registry = registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[test]
    fn a_registered_counter_is_written_with_its_help_and_the_end_marker() {
        let mut registry = Registry::with_prefix("geometer");
        let passes = Counter::<u64>::default();
        registry.register("passes", "Passes finished", passes.clone());
        passes.inc();
        let text = openmetrics(&Mutex::new(registry));
        assert!(text.contains("# HELP geometer_passes Passes finished.\n"), "{text}");
        assert!(text.contains("geometer_passes_total 1\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
