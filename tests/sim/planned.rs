//! The dynamic strategies driven by the solver's real planners (greedy and ILP).

use geometer_sim::cluster::{parse_cluster_spec, Cluster};
use geometer_sim::engine::{Engine, Timings};
use geometer_sim::mapping::{Mapping, WholeGpus};
use geometer_sim::metrics::Summary;
use geometer_sim::models::resolve;
use geometer_sim::strategy::{PlannerStrategy, StrategyKind};
use geometer_sim::trace::synthetic::Synthetic;
use geometer_sim::trace::{geometer as trace_format, Trace};
use geometer_sim::workload::Workload;
use geometer_solver::catalog::Catalog;

fn cluster(spec: &str) -> Cluster {
    parse_cluster_spec(spec, |m| resolve(Catalog::builtin(), m)).unwrap()
}

fn run(kind: StrategyKind, cluster: &Cluster, trace: &Trace) -> Summary {
    run_forecast(kind, cluster, trace, 0)
}

fn run_forecast(kind: StrategyKind, cluster: &Cluster, trace: &Trace, forecast_ms: u64) -> Summary {
    let workload = Workload::new(trace, cluster, Mapping::Compute, WholeGpus::Whole);
    let mut strategy =
        PlannerStrategy::new(kind, Catalog::builtin(), cluster, &workload, 5_000, forecast_ms).unwrap();
    Engine::new(cluster, &workload, Timings::default(), &mut strategy).run().unwrap()
}

const DYNAMIC: [StrategyKind; 3] =
    [StrategyKind::Greedy, StrategyKind::Geometer, StrategyKind::GeometerEvict];

#[test]
fn an_empty_gpu_is_partitioned_for_the_first_batch() {
    let c = cluster("1xA100-80GB:1");
    let trace =
        trace_format::parse("t.csv", "name,arrival_s,duration_s,mig\na,0,100,3g.40gb\nb,2,100,4g.40gb\n")
            .unwrap();
    for kind in DYNAMIC {
        let s = run(kind, &c, &trace);
        // The batch ends 5 s after b (t=7); reconfigure 10 s and plugin restart 20 s: ready at 37.
        assert_eq!(s.waits, vec![35_000, 37_000], "{kind}");
        assert_eq!((s.served, s.gpus_reconfigured, s.planner_calls, s.evictions), (2, 1, 1, 0), "{kind}");
        // a holds 4 memory slices from 37 to 137, b 4 from 37 to 137.
        assert_eq!(s.memory_integral, 8 * 100_000, "{kind}");
    }
}

#[test]
fn without_eviction_a_whole_gpu_pod_waits_for_the_gpu_to_empty() {
    let c = cluster("1xA100-80GB:1");
    let trace =
        trace_format::parse("t.csv", "name,arrival_s,duration_s,mig\nx,0,1000,4g.40gb\ny,100,100,7g.80gb\n")
            .unwrap();
    for kind in [StrategyKind::Greedy, StrategyKind::Geometer] {
        let s = run(kind, &c, &trace);
        // x runs 35..1035; y is planned at 1040 (batch after the departure) and starts at 1070.
        assert_eq!(s.waits, vec![35_000, 970_000], "{kind}");
        assert_eq!(s.evictions, 0, "{kind}");
    }
}

#[test]
fn planners_are_deterministic_and_respect_do_not_disrupt() {
    let c = cluster("1xA100-80GB:2,1xH100-80GB:2");
    let mut synthetic = Synthetic::mig_80gb(60, 11);
    synthetic.mean_interarrival_s = 20.0;
    synthetic.mean_duration_s = 600.0;
    synthetic.do_not_disrupt = 1.0;
    let protected = synthetic.generate();
    for kind in DYNAMIC {
        let mut a = run(kind, &c, &protected);
        let mut b = run(kind, &c, &protected);
        for s in [&mut a, &mut b] {
            s.planner_time = Default::default();
            s.planner_time_max = Default::default();
        }
        assert_eq!(a, b, "{kind}");
        // Every pod is do-not-disrupt: nobody may be evicted (the engine refuses such a plan).
        assert_eq!(a.evictions, 0, "{kind}");
        assert_eq!(a.served + a.not_served, 60);
    }
}

#[test]
fn the_forecast_readies_slices_before_the_next_pod_arrives() {
    // One node, two A100-80GB. a (4g.40gb) at 0 and b (4g.40gb) at 100. Planning at 5 s gives a
    // GPU 0; a 4g.40gb leaves room for a 3g.40gb there, not another 4g.40gb.
    let c = cluster("1xA100-80GB:2");
    let trace =
        trace_format::parse("t.csv", "name,arrival_s,duration_s,mig\na,0,1000,4g.40gb\nb,100,1000,4g.40gb\n")
            .unwrap();
    for kind in DYNAMIC {
        // Without a forecast b waits for its own batch (to 105) and reconfiguration (to 135).
        let s = run(kind, &c, &trace);
        assert_eq!(s.waits, vec![35_000, 35_000], "{kind} without forecast");
        // With a 60 s window the round at 5 s expects another pod like a and prepares a
        // 4g.40gb on GPU 1, which no pod needs yet: b starts the moment it arrives.
        // The greedy baseline never forecasts.
        let s = run_forecast(kind, &c, &trace, 60_000);
        let b_wait = if kind == StrategyKind::Greedy { 35_000 } else { 0 };
        let mut expected = vec![35_000, b_wait];
        expected.sort_unstable();
        assert_eq!(s.waits, expected, "{kind} with forecast");
        // Either way both GPUs end up partitioned: the forecast only moves the second earlier.
        assert_eq!(s.gpus_reconfigured, 2, "{kind}");
    }
}

#[test]
fn a_node_inside_its_stabilisation_window_is_not_planned_again_until_it_ends() {
    // One A100-80GB. a (4g.40gb) at 0 runs 50 s: planned at 5, ready at 35, gone at 85.
    // b (7g.80gb) at 90 needs the GPU repartitioned.
    let c = cluster("1xA100-80GB:1");
    let trace =
        trace_format::parse("t.csv", "name,arrival_s,duration_s,mig\na,0,50,4g.40gb\nb,90,100,7g.80gb\n")
            .unwrap();
    let workload = Workload::new(&trace, &c, Mapping::Compute, WholeGpus::Whole);
    for (stabilisation, b_wait) in [(0, 35_000), (200_000, 150_000)] {
        for kind in DYNAMIC {
            let mut strategy =
                PlannerStrategy::new(kind, Catalog::builtin(), &c, &workload, 5_000, 0).unwrap();
            let timings = Timings { stabilisation, ..Timings::default() };
            let s = Engine::new(&c, &workload, timings, &mut strategy).run().unwrap();
            // Without a window: batch to 95, ready at 125. With 200 s from the plan at 5: the
            // window ends at 205, the batch then closes at 210 and the GPU is ready at 240.
            assert_eq!(s.waits, vec![35_000, b_wait], "{kind}, stabilisation {stabilisation} ms");
            assert_eq!(s.gpus_reconfigured, 2, "{kind}");
        }
    }
}
