//! Prometheus metrics of the controller, served as text on `/metrics`.
//!
//! Gauges that describe the cluster (plans by phase, demand by profile, GPUs by state) are set
//! from a full recount each round, clearing first, so a label that dropped to nothing reads 0
//! rather than its last value.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProfileLabel {
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabel {
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SliceLabel {
    profile: String,
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabel {
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

/// What a planning round ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundOutcome {
    /// A new plan was published.
    Published,
    /// The world matched the last plan's; nothing was published.
    Unchanged,
    /// The policy is invalid or a node is settling; no plan.
    Skipped,
    /// The round failed (API or solver error); it is retried.
    Error,
}

impl RoundOutcome {
    fn as_str(self) -> &'static str {
        match self {
            RoundOutcome::Published => "published",
            RoundOutcome::Unchanged => "unchanged",
            RoundOutcome::Skipped => "skipped",
            RoundOutcome::Error => "error",
        }
    }
}

pub struct Metrics {
    registry: Mutex<Registry>,
    plans: Family<PhaseLabel, Gauge>,
    demand: Family<ProfileLabel, Gauge>,
    gpus: Family<StateLabel, Gauge>,
    skipped: Family<KindLabel, Gauge>,
    dynamic_mig_blocked: Family<ReasonLabel, Gauge>,
    solve_seconds: Histogram,
    rounds: Family<OutcomeLabel, Counter>,
    passes: Counter,
    leader: Gauge,
    reclaimable: Family<NamespaceLabel, Gauge>,
    admissions: Family<OutcomeLabel, Counter>,
    advertised: Family<SliceLabel, Gauge>,
    allocated: Family<SliceLabel, Gauge>,
    demand_age: Family<ProfileLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    plan_apply: Histogram,
    gap: Family<PolicyLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("geometer");
        let plans = Family::<PhaseLabel, Gauge>::default();
        registry.register("plans", "MigPlans by phase", plans.clone());
        let demand = Family::<ProfileLabel, Gauge>::default();
        registry.register(
            "demand_slices",
            "MIG slices requested by pending, unschedulable pods, by profile",
            demand.clone(),
        );
        let gpus = Family::<StateLabel, Gauge>::default();
        registry.register(
            "gpus",
            "Managed GPUs by state of their node (Ready, Reconfiguring, Failed)",
            gpus.clone(),
        );
        let skipped = Family::<KindLabel, Gauge>::default();
        registry.register(
            "skipped_objects",
            "Objects left out of planning because they cannot be read or are invalid, by kind (each has a Warning event)",
            skipped.clone(),
        );
        let dynamic_mig_blocked = Family::<ReasonLabel, Gauge>::default();
        registry.register(
            "dynamic_mig_blocked_claims",
            "Pending pods' DRA claim profiles that fit no DynamicMIG GPU now, by reason: fragmentation (packing a GPU's instances would make room) or capacity",
            dynamic_mig_blocked.clone(),
        );
        // 1 ms .. ~65 s: the solver's time limit is seconds, small clusters solve in milliseconds.
        let solve_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 17));
        registry.register("solve_seconds", "Time the solver took per planning round", solve_seconds.clone());
        let rounds = Family::<OutcomeLabel, Counter>::default();
        registry.register("rounds", "Planning rounds by outcome", rounds.clone());
        let passes = Counter::default();
        registry.register(
            "passes",
            "Passes over the cluster (read, move plans along, plan when a batch is due), finished",
            passes.clone(),
        );
        let leader = Gauge::default();
        registry.register("leader", "1 while this controller holds the leader lease", leader.clone());
        let reclaimable = Family::<NamespaceLabel, Gauge>::default();
        registry.register(
            "rightsizing_reclaimable_gpus",
            "Whole GPUs that right-sizing would give back if the measured workloads asked for the recommended slices, by namespace",
            reclaimable.clone(),
        );
        let admissions = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "rightsizing_admissions",
            "Pods the right-sizing webhook answered, by outcome (rightsized, would_rightsize, unchanged)",
            admissions.clone(),
        );
        let advertised = Family::<SliceLabel, Gauge>::default();
        registry.register(
            "mig_slices_advertised",
            "MIG slices (and whole GPUs, profile whole) that exist on the policy's nodes, by profile",
            advertised.clone(),
        );
        let allocated = Family::<SliceLabel, Gauge>::default();
        registry.register(
            "mig_slices_allocated",
            "MIG slices (and whole GPUs) the kubelet gave to pods on the policy's nodes, by profile",
            allocated.clone(),
        );
        let demand_age = Family::<ProfileLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "demand_oldest_seconds",
            "Seconds the oldest pending pod asking for the profile has existed",
            demand_age.clone(),
        );
        // 10 s .. ~2.8 h: a plan drains and repartitions nodes one batch after another.
        let plan_apply = Histogram::new(exponential_buckets(10.0, 2.0, 11));
        registry.register(
            "plan_apply_seconds",
            "Seconds from a MigPlan's publication to its last node finishing, for plans that succeeded",
            plan_apply.clone(),
        );
        let gap = Family::<PolicyLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "plan_gap_ratio",
            "The last round's (bound - demand met) / bound: 0 when the plan is proven optimal",
            gap.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            plans,
            demand,
            gpus,
            skipped,
            dynamic_mig_blocked,
            solve_seconds,
            rounds,
            passes,
            leader,
            reclaimable,
            admissions,
            advertised,
            allocated,
            demand_age,
            plan_apply,
            gap,
        }
    }

    pub fn set_reclaimable_by_namespace(&self, counts: &BTreeMap<String, i64>) {
        self.reclaimable.clear();
        for (namespace, n) in counts {
            self.reclaimable.get_or_create(&NamespaceLabel { namespace: namespace.clone() }).set(*n);
        }
    }

    /// `(profile, policy) -> (advertised, allocated)`.
    pub fn set_slices(&self, slices: &BTreeMap<(String, String), (i64, i64)>) {
        self.advertised.clear();
        self.allocated.clear();
        for ((profile, policy), (advertised, allocated)) in slices {
            let label = SliceLabel { profile: profile.clone(), policy: policy.clone() };
            self.advertised.get_or_create(&label).set(*advertised);
            self.allocated.get_or_create(&label).set(*allocated);
        }
    }

    pub fn set_demand_age(&self, oldest: &BTreeMap<String, f64>) {
        self.demand_age.clear();
        for (profile, seconds) in oldest {
            self.demand_age.get_or_create(&ProfileLabel { profile: profile.clone() }).set(*seconds);
        }
    }

    pub fn observe_plan_applied(&self, seconds: f64) {
        self.plan_apply.observe(seconds);
    }

    pub fn set_gap(&self, policy: &str, gap: f64) {
        self.gap.get_or_create(&PolicyLabel { policy: policy.to_string() }).set(gap);
    }

    pub fn count_admission(&self, outcome: &str) {
        self.admissions.get_or_create(&OutcomeLabel { outcome: outcome.to_string() }).inc();
    }

    pub fn set_plans_by_phase(&self, counts: &BTreeMap<String, i64>) {
        self.plans.clear();
        for (phase, n) in counts {
            self.plans.get_or_create(&PhaseLabel { phase: phase.clone() }).set(*n);
        }
    }

    pub fn set_demand_by_profile(&self, slices: &BTreeMap<String, i64>) {
        self.demand.clear();
        for (profile, n) in slices {
            self.demand.get_or_create(&ProfileLabel { profile: profile.clone() }).set(*n);
        }
    }

    pub fn set_gpus_by_state(&self, counts: &BTreeMap<String, i64>) {
        self.gpus.clear();
        for (state, n) in counts {
            self.gpus.get_or_create(&StateLabel { state: state.clone() }).set(*n);
        }
    }

    /// The last round's claims blocked on DynamicMIG nodes, by reason (both always present).
    pub fn set_dynamic_mig_blocked(&self, blocked: &[crate::adapter::dynamic_mig::Blocked]) {
        let fragmented = blocked.iter().filter(|b| b.by_fragmentation).count() as i64;
        let by =
            |reason: &str| self.dynamic_mig_blocked.get_or_create(&ReasonLabel { reason: reason.into() });
        by("fragmentation").set(fragmented);
        by("capacity").set(blocked.len() as i64 - fragmented);
    }

    pub fn set_skipped_by_kind(&self, counts: &BTreeMap<&'static str, i64>) {
        self.skipped.clear();
        for (kind, n) in counts {
            self.skipped.get_or_create(&KindLabel { kind: kind.to_string() }).set(*n);
        }
    }

    pub fn observe_solve(&self, seconds: f64) {
        self.solve_seconds.observe(seconds);
    }

    pub fn count_round(&self, outcome: RoundOutcome) {
        self.rounds.get_or_create(&OutcomeLabel { outcome: outcome.as_str().to_string() }).inc();
    }

    pub fn count_pass(&self) {
        self.passes.inc();
    }

    /// Passes finished so far (`geometer_passes_total`).
    pub fn passes(&self) -> u64 {
        self.passes.get()
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        geometer_api::metrics_text::openmetrics(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn exposes_each_metric_with_its_labels() {
        let m = Metrics::new();
        m.set_plans_by_phase(&counts(&[("Proposed", 2), ("Succeeded", 5)]));
        m.set_demand_by_profile(&counts(&[("1g.10gb", 3)]));
        m.set_gpus_by_state(&counts(&[("Ready", 8), ("Reconfiguring", 1)]));
        m.observe_solve(0.25);
        m.count_round(RoundOutcome::Published);
        m.count_round(RoundOutcome::Unchanged);
        m.count_round(RoundOutcome::Unchanged);
        m.set_leader(true);
        m.set_reclaimable_by_namespace(&counts(&[("ml", 3)]));
        let blocked = |by_fragmentation| crate::adapter::dynamic_mig::Blocked {
            pod: geometer_solver::PodKey::new("ml", "a"),
            profile: "3g.40gb".into(),
            by_fragmentation,
            why: String::new(),
        };
        m.set_dynamic_mig_blocked(&[blocked(true), blocked(true), blocked(false)]);
        let text = m.encode();
        for line in [
            "geometer_rightsizing_reclaimable_gpus{namespace=\"ml\"} 3",
            "geometer_plans{phase=\"Proposed\"} 2",
            "geometer_plans{phase=\"Succeeded\"} 5",
            "geometer_demand_slices{profile=\"1g.10gb\"} 3",
            "geometer_gpus{state=\"Reconfiguring\"} 1",
            "geometer_solve_seconds_count 1",
            "geometer_solve_seconds_sum 0.25",
            "geometer_rounds_total{outcome=\"unchanged\"} 2",
            "geometer_leader 1",
            "geometer_dynamic_mig_blocked_claims{reason=\"fragmentation\"} 2",
            "geometer_dynamic_mig_blocked_claims{reason=\"capacity\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_recount_drops_labels_that_went_away() {
        let m = Metrics::new();
        m.set_demand_by_profile(&counts(&[("1g.10gb", 3), ("3g.40gb", 1)]));
        m.set_demand_by_profile(&counts(&[("3g.40gb", 2)]));
        let text = m.encode();
        assert!(!text.contains("1g.10gb"), "{text}");
        assert!(text.contains("geometer_demand_slices{profile=\"3g.40gb\"} 2"));
    }
}
