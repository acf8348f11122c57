//! The simulator's accounting on traces small enough to work out by hand.

use geometer_testkit::trace as sim_fixtures;

use geometer_sim::cluster::{Cluster, NodeSpec};
use geometer_sim::engine::{Engine, SimError, Timings};
use geometer_sim::mapping::{Mapping, WholeGpus};
use geometer_sim::metrics::Summary;
use geometer_sim::strategy::{
    PlanView, Replan, Slot, StaticLayout, StaticStrategy, Strategy, StrategyError, StrategyKind, WholeGpu,
};
use geometer_sim::trace::{geometer as trace_format, Trace};
use geometer_sim::workload::Workload;
use sim_fixtures::a100;

fn cluster(gpus: u32) -> Cluster {
    let node = NodeSpec { name: "node-a".into(), model: 0, gpus, cpu_milli: None, memory_mib: None };
    Cluster::new(vec![a100()], vec![node]).unwrap()
}

fn workload(csv: &str, cluster: &Cluster) -> Workload {
    let trace: Trace = trace_format::parse("test.csv", csv).unwrap();
    Workload::new(&trace, cluster, Mapping::Compute, WholeGpus::Whole)
}

fn slot(w: &Workload, profile: &str, start: u8) -> Slot {
    Slot { profile: w.profiles.iter().position(|p| p == profile).unwrap(), start }
}

fn run(cluster: &Cluster, w: &Workload, strategy: &mut dyn Strategy) -> Result<Summary, SimError> {
    Engine::new(cluster, w, Timings::default(), strategy).run()
}

const THREE_PODS: &str = "name,arrival_s,duration_s,mig\n\
    p0,0,10,1g.10gb\n\
    p1,0,20,1g.10gb\n\
    p2,5,10,1g.10gb\n";

#[test]
fn whole_gpus_make_the_third_pod_wait_for_the_first() {
    let c = cluster(2);
    let w = workload(THREE_PODS, &c);
    let s = run(&c, &w, &mut WholeGpu).unwrap();
    assert_eq!((s.served, s.not_served), (3, 0));
    // p2 arrives at 5 s and gets p0's GPU when p0 ends at 10 s.
    assert_eq!(s.waits, vec![0, 0, 5_000]);
    assert_eq!(s.end, 20_000);
    // Both GPUs (8 memory slices each) are held for all 20 s.
    assert_eq!(s.memory_integral, 16 * 20_000);
    assert_eq!(s.compute_integral, 14 * 20_000);
    assert!((s.memory_share() - 1.0).abs() < 1e-12);
    assert_eq!((s.gpus_reconfigured, s.evictions, s.planner_calls), (0, 0, 0));
}

#[test]
fn one_g_slices_serve_all_three_at_once_and_use_an_eighth() {
    let c = cluster(2);
    let w = workload(THREE_PODS, &c);
    let all_1g =
        [slot(&w, "1g.10gb", 0); 7].iter().enumerate().map(|(i, s)| Slot { start: i as u8, ..*s }).collect();
    let mut strategy = StaticStrategy { layout: StaticLayout::All1g, geometries: vec![all_1g] };
    let s = run(&c, &w, &mut strategy).unwrap();
    assert_eq!(s.waits, vec![0, 0, 0]);
    assert_eq!(s.end, 20_000);
    // One memory slice each: p0 for 10 s, p1 for 20 s, p2 for 10 s.
    assert_eq!(s.memory_integral, 40_000);
    assert!((s.memory_share() - 40.0 / (16.0 * 20.0)).abs() < 1e-12);
    // Demand (3 slices) never reaches capacity (16).
    assert_eq!(s.saturated_memory_share(), None);
}

#[test]
fn a_profile_the_layout_lacks_is_never_served() {
    let c = cluster(1);
    let w = workload("name,arrival_s,duration_s,mig\nbig,0,10,4g.40gb\nsmall,0,10,3g.40gb\n", &c);
    let balanced =
        vec![slot(&w, "3g.40gb", 4), slot(&w, "2g.20gb", 2), slot(&w, "1g.10gb", 0), slot(&w, "1g.10gb", 1)];
    let mut strategy = StaticStrategy { layout: StaticLayout::AllBalanced, geometries: vec![balanced] };
    let s = run(&c, &w, &mut strategy).unwrap();
    assert_eq!((s.served, s.not_served), (1, 1));
    assert_eq!(s.series.last().unwrap().pending, 1);
    // On one whole GPU `big` runs first and `small` waits for it: compared on the pod both
    // served, the layout's wait is 0 s and the whole GPU's 10 s.
    let whole = run(&c, &w, &mut WholeGpu).unwrap();
    assert_eq!(whole.waits, vec![0, 10_000]);
    assert_eq!(s.shared_wait_percentile(&whole, 0.95), Some((0.0, 10.0)));
    assert_eq!(whole.shared_wait_percentile(&s, 0.95), Some((10.0, 0.0)));
}

/// A dynamic strategy whose plans a closure computes from what the engine shows it.
struct Scripted {
    kind: StrategyKind,
    initial: Vec<Slot>,
    decide: Box<dyn FnMut(&PlanView<'_>) -> Replan>,
    calls: Vec<(u64, Vec<usize>)>,
}

impl Scripted {
    fn new(
        kind: StrategyKind,
        initial: Vec<Slot>,
        decide: impl FnMut(&PlanView<'_>) -> Replan + 'static,
    ) -> Self {
        Scripted { kind, initial, decide: Box::new(decide), calls: Vec::new() }
    }
}

impl Strategy for Scripted {
    fn kind(&self) -> StrategyKind {
        self.kind
    }
    fn initial_geometry(&self, _model: usize) -> Vec<Slot> {
        self.initial.clone()
    }
    fn plan(&mut self, view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError> {
        self.calls.push((view.now, view.demand.clone()));
        Ok(Some((self.decide)(view)))
    }
}

#[test]
fn a_new_slice_arrives_after_batch_reconfiguration_and_plugin_restart() {
    let c = cluster(1);
    let w = workload("name,arrival_s,duration_s,mig\na,0,100,3g.40gb\n", &c);
    let target = vec![slot(&w, "3g.40gb", 0)];
    let mut strategy = Scripted::new(StrategyKind::Geometer, vec![], move |_| Replan {
        targets: vec![(0, target.clone())],
        placements: vec![(0, 0)],
        ..Replan::default()
    });
    let s = run(&c, &w, &mut strategy).unwrap();
    // Batch closes 5 s after the arrival; reconfigure 10 s + plugin restart 20 s; no drain.
    assert_eq!(s.waits, vec![35_000]);
    assert_eq!(s.end, 135_000);
    assert_eq!((s.gpus_reconfigured, s.planner_calls, s.evictions), (1, 1, 0));
    assert_eq!(strategy.calls, vec![(5_000, vec![0])]);
    assert_eq!(s.memory_integral, 4 * 100_000);
}

#[test]
fn eviction_drains_repartitions_and_the_evicted_pod_waits_again() {
    let c = cluster(1);
    let w = workload("name,arrival_s,duration_s,mig\nx,0,1000,4g.40gb\ny,1,100,7g.80gb\n", &c);
    let split = vec![slot(&w, "4g.40gb", 0), slot(&w, "3g.40gb", 4)];
    let whole = vec![slot(&w, "7g.80gb", 0)];
    let back = split.clone();
    let mut strategy = Scripted::new(StrategyKind::GeometerEvict, split, move |view| {
        let gpu_busy = view.gpus[0].slots.iter().any(|(_, pod)| pod.is_some());
        if view.demand.contains(&1) {
            // Make room for y (pod 1) by evicting x (pod 0).
            Replan {
                targets: vec![(0, whole.clone())],
                evictions: vec![0],
                placements: vec![(1, 0)],
                ..Replan::default()
            }
        } else if !gpu_busy {
            Replan { targets: vec![(0, back.clone())], placements: vec![(0, 0)], ..Replan::default() }
        } else {
            Replan::default()
        }
    });
    let s = run(&c, &w, &mut strategy).unwrap();
    // y: arrives 1, batch ends 6, drain 30 + reconfigure 10 + plugin 20: starts at 66.
    // x: evicted at 6; y leaves at 166; batch ends 171; reconfigure + plugin: restarts at 201.
    assert_eq!(s.waits, vec![65_000, 195_000]);
    assert_eq!((s.served, s.evictions, s.gpus_reconfigured), (2, 1, 2));
    assert_eq!(s.end, 1_201_000);
    // No call while the only node reconfigures (6..66); at 71 y holds the GPU, so nothing to do.
    assert_eq!(strategy.calls, vec![(6_000, vec![1]), (71_000, vec![0]), (171_000, vec![0])]);
    assert_eq!(s.planner_calls, 3);
    // x holds 4 slices for 6 s, y holds 8 for 100 s, x holds 4 again for 1000 s.
    assert_eq!(s.memory_integral, 4 * 6_000 + 8 * 100_000 + 4 * 1_000_000);
}

#[test]
fn evicting_a_do_not_disrupt_pod_is_refused() {
    let c = cluster(1);
    let w = workload(
        "name,arrival_s,duration_s,mig,do_not_disrupt\nx,0,1000,4g.40gb,true\ny,1,100,7g.80gb,false\n",
        &c,
    );
    let split = vec![slot(&w, "4g.40gb", 0), slot(&w, "3g.40gb", 4)];
    let whole = vec![slot(&w, "7g.80gb", 0)];
    let mut strategy = Scripted::new(StrategyKind::GeometerEvict, split, move |_| Replan {
        targets: vec![(0, whole.clone())],
        evictions: vec![0],
        placements: vec![(1, 0)],
        ..Replan::default()
    });
    let e = run(&c, &w, &mut strategy).unwrap_err().to_string();
    assert!(e.contains("do-not-disrupt pod x"), "{e}");
}

#[test]
fn a_plan_that_destroys_a_running_pods_slice_is_refused() {
    let c = cluster(1);
    let w = workload("name,arrival_s,duration_s,mig\nx,0,1000,4g.40gb\ny,1,100,7g.80gb\n", &c);
    let split = vec![slot(&w, "4g.40gb", 0), slot(&w, "3g.40gb", 4)];
    let whole = vec![slot(&w, "7g.80gb", 0)];
    let mut strategy = Scripted::new(StrategyKind::Geometer, split, move |_| Replan {
        targets: vec![(0, whole.clone())],
        placements: vec![(1, 0)],
        ..Replan::default()
    });
    let e = run(&c, &w, &mut strategy).unwrap_err().to_string();
    assert!(e.contains("running pod x"), "{e}");
}

#[test]
fn demand_above_capacity_counts_as_saturated() {
    // One GPU; two whole-GPU pods: from 0 to 10 s demand (16 slices) exceeds capacity (8).
    let c = cluster(1);
    let w = workload("name,arrival_s,duration_s,num_gpu\na,0,10,1\nb,0,10,1\n", &c);
    let s = run(&c, &w, &mut WholeGpu).unwrap();
    assert_eq!(s.waits, vec![0, 10_000]);
    assert_eq!(s.saturated_time, 10_000);
    assert_eq!(s.saturated_memory_share(), Some(1.0));
}

#[test]
fn memory_out_of_play_while_saturated_is_split_by_reconfiguration_and_stabilisation() {
    // One GPU; a 3g.40gb and a 7g.80gb pod at 0 s ask for 12 memory slices of 8 until the
    // 3g.40gb pod finishes at 135 s. The plan at 5 s makes its slice: the node reconfigures
    // until 35 s (all 8 slices held by no pod), then holds 4 free slices in its stabilisation
    // window until 65 s; after that they are on a node a plan could change.
    let c = cluster(1);
    let w = workload("name,arrival_s,duration_s,mig\na,0,100,3g.40gb\nb,0,100,7g.80gb\n", &c);
    let target = vec![slot(&w, "3g.40gb", 0)];
    let mut strategy = Scripted::new(StrategyKind::Geometer, vec![], move |view| {
        if view.demand.contains(&0) {
            Replan { targets: vec![(0, target.clone())], placements: vec![(0, 0)], ..Replan::default() }
        } else {
            Replan::default()
        }
    });
    let timings = Timings { stabilisation: 60_000, ..Timings::default() };
    let s = Engine::new(&c, &w, timings, &mut strategy).run().unwrap();
    assert_eq!(s.waits, vec![35_000], "b never fits beside a, and nothing replans for it");
    assert_eq!(s.saturated_time, 135_000);
    assert_eq!(s.saturated_reconfiguring_integral, 8 * 30_000);
    assert_eq!(s.saturated_stabilising_integral, 4 * 30_000);
    let (reconfiguring, stabilising) = s.saturated_unheld_shares().unwrap();
    assert!((reconfiguring - 30.0 / 135.0).abs() < 1e-9, "{reconfiguring}");
    assert!((stabilising - 15.0 / 135.0).abs() < 1e-9, "{stabilising}");
}
