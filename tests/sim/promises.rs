//! The room a plan makes goes to the pods it was made for: a pod earlier in the queue that was
//! promised another node (still reconfiguring) must not take it.

use geometer_testkit::trace as sim_fixtures;

use geometer_sim::cluster::{Cluster, NodeSpec};
use geometer_sim::engine::{Engine, Timings};
use geometer_sim::mapping::{Mapping, WholeGpus};
use geometer_sim::strategy::{PlanView, Replan, Slot, Strategy, StrategyError, StrategyKind};
use geometer_sim::trace::geometer as trace_format;
use geometer_sim::workload::Workload;
use sim_fixtures::a100;

/// Plans one node per call: first node-b for `pinned` (pod 1), then node-a for `free` (pod 0).
struct TwoPlans {
    three_g: Slot,
    calls: u32,
}

impl Strategy for TwoPlans {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Geometer
    }
    fn initial_geometry(&self, _model: usize) -> Vec<Slot> {
        Vec::new()
    }
    fn plan(&mut self, _view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError> {
        self.calls += 1;
        // GPU 0 is node-a's, GPU 1 node-b's.
        let (gpu, pod, node) = match self.calls {
            1 => (1, 1, 1),
            2 => (0, 0, 0),
            _ => return Ok(None),
        };
        Ok(Some(Replan {
            targets: vec![(gpu, vec![self.three_g])],
            placements: vec![(pod, node)],
            ..Replan::default()
        }))
    }
}

#[test]
fn new_slices_go_to_the_pod_they_were_made_for() {
    let node =
        |name: &str| NodeSpec { name: name.into(), model: 0, gpus: 1, cpu_milli: None, memory_mib: None };
    let cluster = Cluster::new(vec![a100()], vec![node("node-a"), node("node-b")]).unwrap();
    // `free` may run anywhere and is first in the queue; `pinned` may only run on node-b.
    let csv = "name,arrival_s,duration_s,mig,nodes\nfree,0,100,3g.40gb,\npinned,0,100,3g.40gb,node-b\n";
    let trace = trace_format::parse("test.csv", csv).unwrap();
    let w = Workload::new(&trace, &cluster, Mapping::Compute, WholeGpus::Whole);
    let three_g = Slot { profile: w.profiles.iter().position(|p| p == "3g.40gb").unwrap(), start: 0 };
    let mut strategy = TwoPlans { three_g, calls: 0 };
    let s = Engine::new(&cluster, &w, Timings::default(), &mut strategy).run().unwrap();
    // Batch ends at 5 s: node-b planned for `pinned`, ready at 5 + 10 + 20 = 35 s. `free` is
    // still unplaced, so another batch ends at 10 s: node-a for `free`, ready at 40 s. Had
    // `free` taken node-b's slice at 35 s, `pinned` could never run (node-a is not allowed).
    assert_eq!((s.served, s.not_served), (2, 0));
    assert_eq!(s.outcomes[1].first_start, Some(35_000));
    assert_eq!(s.outcomes[0].first_start, Some(40_000));
    assert_eq!(s.waits, vec![35_000, 40_000]);
    assert_eq!(s.planner_calls, 2);
}
