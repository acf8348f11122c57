//! Gangs in the simulator: members run only together; a gang-aware plan never leaves a slice
//! idle for a gang that has not started, a gang-unaware one does.

use geometer_testkit::trace as sim_fixtures;

use geometer_sim::cluster::{parse_cluster_spec, Cluster, NodeSpec};
use geometer_sim::engine::{Engine, Timings};
use geometer_sim::mapping::{Mapping, WholeGpus};
use geometer_sim::metrics::Summary;
use geometer_sim::models::resolve;
use geometer_sim::strategy::{
    PlanView, PlannerStrategy, Replan, Slot, Strategy, StrategyError, StrategyKind,
};
use geometer_sim::trace::synthetic::Synthetic;
use geometer_sim::trace::{geometer as trace_format, Trace};
use geometer_sim::workload::Workload;
use geometer_solver::catalog::Catalog;
use sim_fixtures::a100;

fn cluster(spec: &str) -> Cluster {
    parse_cluster_spec(spec, |m| resolve(Catalog::builtin(), m)).unwrap()
}

fn run(kind: StrategyKind, cluster: &Cluster, trace: &Trace) -> Summary {
    let workload = Workload::new(trace, cluster, Mapping::Compute, WholeGpus::Whole);
    let mut strategy = PlannerStrategy::new(kind, Catalog::builtin(), cluster, &workload, 5_000, 0).unwrap();
    Engine::new(cluster, &workload, Timings::default(), &mut strategy).run().unwrap()
}

/// One node of two A100-80GB. `solo` (4g.40gb, never ends, never evicted) is planned at 5 s
/// and runs from 35 s. Gang `big` (four 3g.40gb workers, all needed) arrives at 40 s: with
/// `solo` running, only three 3g.40gb fit (one beside `solo`, two on the other GPU), so it can
/// never start. Gang `pair` (two 1g.10gb) arrives at 400 s and fits.
const PARTIAL: &str = "name,arrival_s,duration_s,mig,do_not_disrupt,gang,gang_min\n\
    solo,0,,4g.40gb,true,,\n\
    big-0,40,100,3g.40gb,,big,\n\
    big-1,40,100,3g.40gb,,big,\n\
    big-2,40,100,3g.40gb,,big,\n\
    big-3,40,100,3g.40gb,,big,\n\
    pair-0,400,100,1g.10gb,,pair,2\n\
    pair-1,400,100,1g.10gb,,pair,2\n";

#[test]
fn a_gang_aware_plan_holds_no_slice_idle_for_a_gang_that_cannot_start() {
    let c = cluster("1xA100-80GB:2");
    let trace = trace_format::parse("t.csv", PARTIAL).unwrap();
    for kind in [StrategyKind::Geometer, StrategyKind::GeometerEvict] {
        let s = run(kind, &c, &trace);
        assert_eq!(s.gang_idle_memory_integral, 0, "{kind}: no slice held idle");
        assert_eq!((s.gang_timeouts, s.gpus_reconfigured_for_nothing), (0, 0), "{kind}");
        assert_eq!((s.gangs, s.gangs_started), (2, 1), "{kind}: pair starts, big cannot");
        // solo and the pair run; big's four workers wait to the end.
        assert_eq!((s.served, s.not_served), (3, 4), "{kind}");
    }
}

#[test]
fn a_gang_unaware_plan_gives_part_of_a_gang_slices_it_holds_idle() {
    let c = cluster("1xA100-80GB:2");
    let trace = trace_format::parse("t.csv", PARTIAL).unwrap();

    // The ILP without gangs planned solo's GPU as 4g.40gb + 3g.40gb at 5 s. At 45 s it places
    // big-0 on that free 3g.40gb and big-1, big-2 on two new ones on the other GPU; ready at
    // 75 s, big-1 and big-2 are assumed there (first-fit puts big-1 on the GPU of solo) and
    // wait; the rest of the gang cannot start, so the scheduler assumes no more of it. At 135 s
    // the Permit timeout gives both slices back: 2 x 4 memory slices x 60 s. The pair is served
    // at 435 s (the other GPU reshaped to 1g.10gb slices); when it ends the planner places
    // big-2 on a new 3g.40gb again, which it holds alone from 570 s to the timeout at 630 s:
    // 4 x 60 s more.
    let s = run(StrategyKind::GeometerNoGangs, &c, &trace);
    assert_eq!(s.gang_idle_memory_integral, (2 * 4 + 4) * 60_000);
    assert_eq!(s.gang_timeouts, 2);
    assert_eq!((s.gangs, s.gangs_started, s.served), (2, 1, 3));
    // The last reshaping of the second GPU made slices only big-2 ever held.
    assert_eq!(s.gpus_reconfigured_for_nothing, 1);

    // The greedy baseline reshapes both GPUs at 45 s for three of big's workers, which hold
    // their slices from 75 s to the timeout: 3 x 4 memory slices x 60 s, both reconfigurations
    // for nothing. Then it keeps counting the free 3g.40gb slices as theirs (it plans each
    // worker on its own, and each fits), so it never makes room for the pair.
    let s = run(StrategyKind::Greedy, &c, &trace);
    assert_eq!(s.gang_idle_memory_integral, 3 * 4 * 60_000);
    assert_eq!((s.gang_timeouts, s.gpus_reconfigured_for_nothing), (1, 2));
    assert_eq!((s.gangs, s.gangs_started, s.served), (2, 0, 1));
}

#[test]
fn a_gang_starts_when_its_last_member_is_placed_and_waits_count() {
    // Two 2g.20gb workers; a 4g.40gb pod already fills the rest of the only GPU... until it
    // ends at 100 s. Gang-aware: planned once the GPU can hold both.
    let c = cluster("1xA100-80GB:1");
    let csv = "name,arrival_s,duration_s,mig,gang\n\
        first,0,65,4g.40gb,\n\
        w0,10,50,2g.20gb,job\n\
        w1,10,50,2g.20gb,job\n";
    let trace = trace_format::parse("t.csv", csv).unwrap();
    let s = run(StrategyKind::Geometer, &c, &trace);
    assert_eq!((s.gangs_started, s.gang_idle_memory_integral), (1, 0));
    let (w0, w1) = (s.outcomes[1], s.outcomes[2]);
    assert!(w0.served && w1.served);
    assert_eq!(w0.first_start, w1.first_start, "the members start together");
    assert_eq!(w0.waited, w0.first_start.unwrap() - 10_000);
}

/// Places only `members` of the workload's pods, on new 3g.40gb slices of GPU 0, once.
struct PartOfAGang {
    members: Vec<usize>,
    three_g: Slot,
    planned: bool,
}

impl Strategy for PartOfAGang {
    fn kind(&self) -> StrategyKind {
        StrategyKind::GeometerNoGangs
    }
    fn initial_geometry(&self, _model: usize) -> Vec<Slot> {
        Vec::new()
    }
    fn plan(&mut self, _view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError> {
        if std::mem::replace(&mut self.planned, true) {
            return Ok(None);
        }
        let slots = (0..self.members.len()).map(|i| Slot { start: 4 * i as u8, ..self.three_g }).collect();
        Ok(Some(Replan {
            targets: vec![(0, slots)],
            placements: self.members.iter().map(|&p| (p, 0)).collect(),
            ..Replan::default()
        }))
    }
}

#[test]
fn members_wait_at_permit_until_the_timeout_gives_their_slices_back() {
    let node = NodeSpec { name: "node-a".into(), model: 0, gpus: 1, cpu_milli: None, memory_mib: None };
    let c = Cluster::new(vec![a100()], vec![node]).unwrap();
    let csv = "name,arrival_s,duration_s,mig,gang\nw0,0,10,3g.40gb,g\nw1,0,10,3g.40gb,g\nw2,0,10,3g.40gb,g\n";
    let trace = trace_format::parse("t.csv", csv).unwrap();
    let w = Workload::new(&trace, &c, Mapping::Compute, WholeGpus::Whole);
    assert_eq!((w.gangs.len(), w.gangs[0].min_members), (1, 3));
    let three_g = Slot { profile: w.profiles.iter().position(|p| p == "3g.40gb").unwrap(), start: 0 };
    for (timeout, held_for) in [(60_000u64, 60_000u64), (20_000, 20_000)] {
        let mut strategy = PartOfAGang { members: vec![0, 1], three_g, planned: false };
        let timings = Timings { gang_timeout: timeout, ..Timings::default() };
        let s = Engine::new(&c, &w, timings, &mut strategy).run().unwrap();
        // Planned at 5 s, ready at 35 s: w0 and w1 hold 4 memory slices each until the timeout.
        assert_eq!(s.gang_idle_memory_integral, 2 * 4 * u128::from(held_for));
        assert_eq!((s.gang_timeouts, s.gangs_started, s.served), (1, 0, 0));
        assert_eq!(s.gpus_reconfigured_for_nothing, 1);
        // The end of the run counts the wait so far, held or pending.
        // The last event is the batch that follows the timeout, 5 s later.
        assert_eq!(s.end, 40_000 + held_for);
        assert!(s.outcomes.iter().all(|o| o.waited == s.end));
    }
}

#[test]
fn synthetic_gangs_geometer_never_holds_a_slice_idle() {
    let c = cluster("1xA100-80GB:4,1xH100-80GB:4");
    let mut synthetic = Synthetic::mig_80gb(120, 5).with_gangs(0.4);
    synthetic.mean_interarrival_s = 15.0;
    synthetic.mean_duration_s = 900.0;
    let trace = synthetic.generate();
    let aware = run(StrategyKind::Geometer, &c, &trace);
    let unaware = run(StrategyKind::GeometerNoGangs, &c, &trace);
    assert!(aware.gangs > 5, "{}", aware.gangs);
    assert_eq!(aware.gang_idle_memory_integral, 0);
    assert_eq!((aware.gang_timeouts, aware.gpus_reconfigured_for_nothing), (0, 0));
    assert!(unaware.gang_idle_memory_integral > 0);
    assert!(aware.gangs_started >= unaware.gangs_started);
}

/// Plans gang `g` once: a new 3g.40gb (start 4) beside the existing one on node-b's GPU for
/// `new`, and the free 3g.40gb slices that already exist for `existing` (kept for them, or not).
struct ExistingAndNew {
    new: usize,
    existing: Vec<(usize, usize)>,
    three_g: Slot,
    keep: bool,
    planned: bool,
}

impl Strategy for ExistingAndNew {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Geometer
    }
    fn initial_geometry(&self, _model: usize) -> Vec<Slot> {
        vec![self.three_g]
    }
    fn plan(&mut self, _view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError> {
        if std::mem::replace(&mut self.planned, true) {
            return Ok(None);
        }
        Ok(Some(Replan {
            targets: vec![(1, vec![self.three_g, Slot { start: 4, ..self.three_g }])],
            placements: vec![(self.new, 1)],
            reservations: if self.keep { self.existing.clone() } else { Vec::new() },
            ..Replan::default()
        }))
    }
}

/// `node-a` and `node-b`, one A100-80GB each.
fn two_one_gpu_a100_nodes() -> Cluster {
    let nodes = ["node-a", "node-b"].map(|name| NodeSpec {
        name: name.into(),
        model: 0,
        gpus: 1,
        cpu_milli: None,
        memory_mib: None,
    });
    Cluster::new(vec![a100()], nodes.to_vec()).unwrap()
}

#[test]
fn slices_a_plan_puts_gang_members_on_are_kept_from_a_pod_arriving_meanwhile() {
    // Two nodes of one A100-80GB, each with one free 3g.40gb. Gang g (three 3g.40gb) arrives
    // at 0 s; at 5 s the plan puts w0 and w1 on those two slices and w2 on a new one on
    // node-b, ready at 35 s. A lone 3g.40gb pod x arrives at 10 s, in between.
    let c = two_one_gpu_a100_nodes();
    let csv = "name,arrival_s,duration_s,mig,gang\n\
        w0,0,10,3g.40gb,g\nw1,0,10,3g.40gb,g\nw2,0,10,3g.40gb,g\nx,10,1000,3g.40gb,\n";
    let trace = trace_format::parse("t.csv", csv).unwrap();
    let w = Workload::new(&trace, &c, Mapping::Compute, WholeGpus::Whole);
    let three_g = Slot { profile: w.profiles.iter().position(|p| p == "3g.40gb").unwrap(), start: 0 };
    let plan =
        |keep| ExistingAndNew { new: 2, existing: vec![(0, 0), (1, 1)], three_g, keep, planned: false };

    // Kept (nominated): x cannot take them and waits; at 35 s w2 gets the new slice, w0 and w1
    // theirs, and the gang starts at once. x runs when the gang ends at 45 s.
    let mut strategy = plan(true);
    let s = Engine::new(&c, &w, Timings::default(), &mut strategy).run().unwrap();
    assert_eq!(s.gang_idle_memory_integral, 0);
    assert_eq!((s.gang_timeouts, s.gangs_started, s.served), (0, 1, 4));
    assert_eq!(s.outcomes[0].first_start, Some(35_000));
    assert_eq!(s.outcomes[3].first_start, Some(45_000));

    // Not kept: x takes node-a's slice at 10 s; at 35 s w2 and w1 get node-b's two slices
    // and w2 holds its 4 memory slices idle to the Permit timeout at 95 s, as w0 has nowhere
    // to go. The gang starts when x ends.
    let mut strategy = plan(false);
    let s = Engine::new(&c, &w, Timings::default(), &mut strategy).run().unwrap();
    assert_eq!(s.gang_idle_memory_integral, 4 * 60_000);
    assert_eq!((s.gang_timeouts, s.gangs_started, s.served), (1, 1, 4));
    assert_eq!(s.outcomes[3].first_start, Some(10_000));
    assert_eq!(s.outcomes[0].first_start, Some(1_010_000));
}

/// Starts every GPU as `initial` and plays back `plans`, one per planner call.
struct Scripted {
    initial: Vec<Slot>,
    plans: Vec<Replan>,
}

impl Strategy for Scripted {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Geometer
    }
    fn initial_geometry(&self, _model: usize) -> Vec<Slot> {
        self.initial.clone()
    }
    fn plan(&mut self, _view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError> {
        Ok((!self.plans.is_empty()).then(|| self.plans.remove(0)))
    }
}

#[test]
fn a_member_takes_its_kept_slice_on_a_node_cordoned_since() {
    // Two nodes of one A100-80GB split 3g.40gb + 3g.40gb. Gang g: w0 (3g.40gb) and w1
    // (2g.20gb), from 0 s. At 5 s a plan remakes node-b (4g + 2g + 1g) for w1 and keeps
    // node-a's first 3g.40gb for w0. A 1g.10gb pod x arrives at 10 s; at 15 s a second plan
    // remakes node-a around w0's kept slice (destroying the other 3g.40gb, so node-a is
    // cordoned until 45 s). When node-b is ready at 35 s, w0 is already assumed on its kept
    // slice, as a pod waiting at Permit is on a node cordoned after it: the gang starts then,
    // and w1's slices are not held idle until the Permit timeout.
    let c = two_one_gpu_a100_nodes();
    let csv = "name,arrival_s,duration_s,mig,gang\n\
        w0,0,10,3g.40gb,g\nw1,0,10,2g.20gb,g\nx,10,1000,1g.10gb,\n";
    let trace = trace_format::parse("t.csv", csv).unwrap();
    let w = Workload::new(&trace, &c, Mapping::Compute, WholeGpus::Whole);
    let slot =
        |profile: &str, start| Slot { profile: w.profiles.iter().position(|p| p == profile).unwrap(), start };
    let remade = |first: &str| vec![slot(first, 0), slot("2g.20gb", 4), slot("1g.10gb", 6)];
    let for_w1 = Replan {
        targets: vec![(1, remade("4g.40gb"))],
        placements: vec![(1, 1)],
        reservations: vec![(0, 0)],
        ..Replan::default()
    };
    let for_x =
        Replan { targets: vec![(0, remade("3g.40gb"))], placements: vec![(2, 0)], ..Replan::default() };
    let mut strategy =
        Scripted { initial: vec![slot("3g.40gb", 0), slot("3g.40gb", 4)], plans: vec![for_w1, for_x] };
    let s = Engine::new(&c, &w, Timings::default(), &mut strategy).run().unwrap();
    assert_eq!((s.gang_idle_memory_integral, s.gang_timeouts, s.gangs_started), (0, 0, 1));
    assert_eq!((s.outcomes[0].first_start, s.outcomes[1].first_start), (Some(35_000), Some(35_000)));
}
