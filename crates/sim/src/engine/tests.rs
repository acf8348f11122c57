//! Whole GPUs (MIG mode off) in the engine, checked after every event: whole-GPU pods only run
//! on GPUs with MIG off, a GPU whose whole-GPU pod runs never changes mode, and the strategies
//! that must not turn MIG off never do.

use std::collections::BTreeMap;

use geometer_solver::catalog::Catalog;

use super::*;
use crate::cluster::parse_cluster_spec;
use crate::mapping::{Mapping, WholeGpus};
use crate::models::{resolve, static_geometry};
use crate::strategy::{PlannerStrategy, StaticLayout, StaticStrategy, StrategyKind, WholeGpu};
use crate::trace::geometer as trace_format;

fn cluster(spec: &str) -> Cluster {
    parse_cluster_spec(spec, |m| resolve(Catalog::builtin(), m)).expect("test cluster")
}

fn workload(csv: &str, cluster: &Cluster, whole: WholeGpus) -> Workload {
    let trace = trace_format::parse("t.csv", csv).expect("test trace");
    Workload::new(&trace, cluster, Mapping::Compute, whole)
}

fn planner(kind: StrategyKind, cluster: &Cluster, workload: &Workload) -> PlannerStrategy {
    PlannerStrategy::new(kind, Catalog::builtin(), cluster, workload, 5_000, 0).expect("planner")
}

/// What a run showed, event by event.
#[derive(Debug, Default)]
struct Seen {
    /// The most GPUs with MIG off at once.
    most_whole: u32,
    /// Whole-GPU pods that ever started.
    whole_pods_started: usize,
    /// Per GPU, how often its mode changed.
    mode_changes: BTreeMap<usize, u32>,
}

/// Runs the engine one event at a time and checks the whole-GPU rules after each.
fn run_checked(mut engine: Engine<'_>) -> (Summary, Seen) {
    let mut seen = Seen::default();
    let mut started = vec![false; engine.pods.len()];
    engine.submit();
    loop {
        // Before the event: the GPUs a running whole-GPU pod holds, with their geometry.
        let before: Vec<(PodIdx, u32, usize, Vec<Slot>)> = whole_holders(&engine);
        let modes: Vec<bool> = engine.state.gpus.iter().map(|g| g.is_whole()).collect();
        if !engine.step().expect("the run goes on") {
            break;
        }
        for (g, gpu) in engine.state.gpus.iter().enumerate() {
            // A GPU with MIG off is that one instance and nothing else.
            if gpu.is_whole() {
                assert_eq!(gpu.slots.len(), 1, "GPU {g} mixes the whole GPU with slices at {}", engine.now);
                assert_eq!(gpu.slots[0].slot.start, 0);
            }
            if gpu.is_whole() != modes[g] {
                *seen.mode_changes.entry(g).or_default() += 1;
            }
        }
        assert_eq!(
            engine.state.whole_gpus as usize,
            engine.state.gpus.iter().filter(|g| g.is_whole()).count(),
            "the whole-GPU count follows the GPUs"
        );
        for (p, run) in engine.pods.iter().enumerate() {
            let Some((_, held)) = &run.running else { continue };
            let asks_whole = engine.requests[p].iter().any(|&(k, _)| k == WHOLE_GPU);
            for (g, slot) in held {
                let on_whole = engine.state.gpus[*g].is_whole();
                assert_eq!(slot.profile == WHOLE_GPU, on_whole, "pod {p} holds {slot:?} on GPU {g}");
                assert_eq!(asks_whole, on_whole, "pod {p} asks whole: {asks_whole}, runs on GPU {g}");
            }
            if asks_whole && !started[p] {
                started[p] = true;
                seen.whole_pods_started += 1;
            }
        }
        // A whole-GPU pod still running on the same GPUs: those GPUs kept their geometry.
        for (p, generation, g, slots) in before {
            let run = &engine.pods[p];
            if run.run == generation
                && run.running.as_ref().is_some_and(|(_, h)| h.iter().any(|(x, _)| *x == g))
            {
                let now: Vec<Slot> = engine.state.gpus[g].slots.iter().map(|s| s.slot).collect();
                assert_eq!(now, slots, "GPU {g} changed under whole-GPU pod {p} at {}", engine.now);
            }
        }
        seen.most_whole = seen.most_whole.max(engine.state.whole_gpus);
    }
    (engine.summary(), seen)
}

fn whole_holders(engine: &Engine<'_>) -> Vec<(PodIdx, u32, usize, Vec<Slot>)> {
    let mut out = Vec::new();
    for (p, run) in engine.pods.iter().enumerate() {
        let Some((_, held)) = &run.running else { continue };
        for (g, _) in held.iter().filter(|(_, s)| s.profile == WHOLE_GPU) {
            out.push((p, run.run, *g, engine.state.gpus[*g].slots.iter().map(|s| s.slot).collect()));
        }
    }
    out
}

const DYNAMIC: [StrategyKind; 3] =
    [StrategyKind::Greedy, StrategyKind::Geometer, StrategyKind::GeometerEvict];

/// Four slice pods, then a burst of three one-GPU training pods and one two-GPU pod, then
/// slices again once the burst is over.
const BURST: &str = "name,arrival_s,duration_s,mig,num_gpu\n\
    s0,0,2000,3g.40gb,\n\
    s1,0,2000,3g.40gb,\n\
    s2,0,2000,4g.40gb,\n\
    s3,1,2000,2g.20gb,\n\
    t0,100,600,,1\n\
    t1,100,600,,1\n\
    t2,101,600,,1\n\
    t3,102,600,,2\n\
    s4,900,500,1g.10gb,\n\
    s5,900,500,1g.10gb,\n\
    s6,901,500,4g.40gb,\n";

#[test]
fn whole_gpu_pods_only_ever_run_on_gpus_with_mig_off() {
    let c = cluster("2xH100-80GB:4");
    let w = workload(BURST, &c, WholeGpus::Whole);
    for kind in DYNAMIC {
        let mut strategy = planner(kind, &c, &w);
        let (s, seen) = run_checked(Engine::new(&c, &w, Timings::default(), &mut strategy));
        assert_eq!((s.served, s.not_served), (11, 0), "{kind}");
        assert_eq!(seen.whole_pods_started, 4, "{kind}: the checks saw every training pod run");
        // Three one-GPU pods and a two-GPU pod: five GPUs with MIG off at the peak.
        assert!(seen.most_whole >= 5, "{kind}: {seen:?}");
    }
    // Without MIG at all every pod runs on a whole GPU, and the same checks hold.
    let (s, seen) = run_checked(Engine::new(&c, &w, Timings::default(), &mut WholeGpu));
    assert_eq!((s.served, seen.most_whole, s.whole_gpus_end), (11, 8, 8));
    assert!(seen.mode_changes.is_empty());
}

#[test]
fn geometer_turns_idle_gpus_mig_off_for_a_burst_and_serves_it() {
    let c = cluster("1xH100-80GB:4");
    let w = workload(BURST, &c, WholeGpus::Whole);
    let mut strategy = planner(StrategyKind::Geometer, &c, &w);
    let (s, seen) = run_checked(Engine::new(&c, &w, Timings::default(), &mut strategy));
    // The four slices fit on two GPUs; the other two leave MIG for two of the one-GPU pods
    // (arrived at 100-101 s, batch until 107 s, ready 30 s later). The third and t3 (two GPUs)
    // wait for GPUs that training or slices hold.
    let early = ["t0", "t1", "t2"]
        .iter()
        .filter(|name| {
            let p = w.pods.iter().position(|p| p.name == **name).unwrap();
            s.outcomes[p].first_start.is_some_and(|t| t <= 140_000)
        })
        .count();
    assert_eq!(early, 2, "{:?}", s.outcomes);
    assert_eq!(s.served, 11);
    assert!(seen.most_whole >= 2, "{seen:?}");
    assert!(seen.whole_pods_started == 4);
    // The slices of the last wave need MIG back on some GPU.
    assert!(seen.mode_changes.values().any(|&n| n >= 2), "{seen:?}");
    assert!(s.whole_gpus_mean() > 0.0);
}

#[test]
fn full_profile_keeps_every_gpu_in_mig_mode() {
    let c = cluster("2xH100-80GB:4");
    let w = workload(BURST, &c, WholeGpus::FullProfile);
    let full = w.profiles.iter().position(|p| p == "7g.80gb").unwrap();
    let t3 = w.pods.iter().find(|p| p.name == "t3").unwrap();
    assert_eq!(t3.mig, vec![(full, 2)], "the old mapping: the full-GPU profile per GPU");
    for kind in DYNAMIC {
        let mut strategy = planner(kind, &c, &w);
        let (s, seen) = run_checked(Engine::new(&c, &w, Timings::default(), &mut strategy));
        assert_eq!(s.served, 11, "{kind}");
        assert_eq!((seen.most_whole, seen.whole_pods_started, s.whole_gpus_end), (0, 0, 0), "{kind}");
        assert_eq!(s.whole_gpu_integral, 0, "{kind}");
    }
}

#[test]
fn a_gpu_with_a_running_whole_gpu_pod_never_changes_mode() {
    // One GPU. `train` takes it whole at 0 for 1000 s; slice pods arrive at 50 s. Without
    // eviction (or with, but `train` may not be disrupted) they wait for `train` to finish.
    let c = cluster("1xH100-80GB:1");
    let csv = "name,arrival_s,duration_s,mig,num_gpu,do_not_disrupt\n\
        train,0,1000,,1,true\n\
        a,50,100,3g.40gb,,\n\
        b,50,100,3g.40gb,,\n";
    let w = workload(csv, &c, WholeGpus::Whole);
    for kind in DYNAMIC {
        let mut strategy = planner(kind, &c, &w);
        let (s, seen) = run_checked(Engine::new(&c, &w, Timings::default(), &mut strategy));
        // train: batch to 5 s, ready at 35 s, runs to 1035 s. The GPU returns to MIG only then.
        assert_eq!(s.outcomes[0].first_start, Some(35_000), "{kind}");
        for pod in [1, 2] {
            assert!(s.outcomes[pod].first_start.is_some_and(|t| t > 1_035_000), "{kind}: {:?}", s.outcomes);
        }
        assert_eq!(seen.mode_changes.get(&0), Some(&2), "{kind}: off for train, on for the slices");
        assert_eq!((s.served, s.evictions, s.whole_gpus_end), (3, 0, 0), "{kind}");
    }
}

#[test]
fn static_layouts_never_serve_whole_gpu_pods() {
    let c = cluster("1xH100-80GB:2");
    let w = workload(BURST, &c, WholeGpus::Whole);
    let model = Catalog::builtin().find("H100-80GB").unwrap();
    for layout in [StaticLayout::AllBalanced, StaticLayout::All1g] {
        let geometry = static_geometry(layout, model, &w).unwrap();
        let mut strategy = StaticStrategy { layout, geometries: vec![geometry] };
        let (s, seen) = run_checked(Engine::new(&c, &w, Timings::default(), &mut strategy));
        for (pod, outcome) in w.pods.iter().zip(&s.outcomes) {
            if pod.name.starts_with('t') {
                assert!(!outcome.served && outcome.first_start.is_none(), "{layout}: {} served", pod.name);
            }
        }
        assert_eq!((seen.most_whole, s.whole_gpus_end, s.gpus_reconfigured), (0, 0, 0), "{layout}");
    }
}

#[test]
fn the_layout_counts_every_gpu_by_its_final_geometry_and_marks_held_instances() {
    // Pods that never finish: what they hold at the end is what the layout shows.
    let c = cluster("1xA100-80GB:3");
    let csv = "name,arrival_s,duration_s,mig,num_gpu\n\
        big,0,,7g.80gb,\n\
        half,0,,4g.40gb,\n";
    let w = workload(csv, &c, WholeGpus::Whole);
    let mut strategy = planner(StrategyKind::Geometer, &c, &w);
    let (s, _) = run_checked(Engine::new(&c, &w, Timings::default(), &mut strategy));
    assert_eq!(s.served, 2);
    assert_eq!(s.layout.iter().map(|l| l.gpus).sum::<u32>(), 3, "{:?}", s.layout);
    assert!(s.layout.iter().all(|l| l.model == "A100-80GB"));
    let geometries: Vec<&str> = s.layout.iter().map(|l| l.geometry.as_str()).collect();
    assert!(geometries.contains(&"7g.80gb*"), "{geometries:?}");
    let half = geometries.iter().find(|g| g.starts_with("4g.40gb*")).expect("the 4g.40gb pod's GPU");
    // The rest of that GPU is carved but free: no star after it.
    assert_eq!(half.matches('*').count(), 1, "{half}");
    // The third GPU is left as it started (MIG mode, no instance).
    assert!(geometries.contains(&"-"), "{geometries:?}");
}
