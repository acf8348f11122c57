//! Nodes a plan changes stay as planned for the policy's stabilisation window
//! (`stabilisationSeconds`): no plan may touch any of their GPUs until it ends. A GPU such a
//! node keeps in MIG mode with no instance serves no pod all that time, so the plan shapes it
//! too: it gets the geometry the plan gives most of the node's changed GPUs of its model, unless
//! that is slices and the GPU could still turn whole (a Hopper), as `ilp::tiebreak` keeps such
//! GPUs for whole-GPU pods.
//!
//! The objective never asks for this: its "GPUs changed" level keeps every GPU the pods do not
//! need as it is, which is right when the next plan may change it. Under a window it left, on
//! the simulator's replays, H100s empty beside the ones turned whole for whole-GPU pods, and
//! the next whole-GPU pods waited up to nine minutes for the node (BENCHMARKS.md, "Simulator").
//! Only GPUs with no instance are shaped: no pod loses anything, the node is reconfiguring
//! anyway, and an instance left free can be changed again without an eviction once the window
//! ends.

use crate::geometry::Geometry;

use super::prepare::Problem;
use super::realize::changed_gpus;

/// Shapes the empty GPUs of the nodes `targets` changes (see the module); returns them in
/// order. Stops where the policy's `maxGpusChanged` would be passed.
pub(super) fn shape_empty_gpus(problem: &Problem, targets: &mut [Geometry]) -> Vec<usize> {
    if problem.stabilisation_seconds == 0 {
        return Vec::new();
    }
    let mut changed = changed_gpus(problem, targets).count() as u32;
    let mut shaped = Vec::new();
    for node in &problem.nodes {
        let new_shapes = node_shapes(problem, targets, &node.gpus);
        if new_shapes.is_empty() {
            continue;
        }
        for &g in &node.gpus {
            if problem.max_gpus_changed.is_some_and(|max| changed >= max) {
                return shaped;
            }
            let gpu = &problem.gpus[g];
            if !gpu.current.instances().is_empty() || targets[g] != gpu.current {
                continue;
            }
            if let Some(shape) = most_given(&new_shapes, gpu.model).filter(|s| allowed_on(problem, g, s)) {
                targets[g] = shape.clone();
                changed += 1;
                shaped.push(g);
            }
        }
    }
    shaped
}

/// The geometries the plan gives the changed GPUs of one node: `(model, geometry, GPUs)`.
fn node_shapes(problem: &Problem, targets: &[Geometry], gpus: &[usize]) -> Vec<(usize, Geometry, u32)> {
    let mut shapes: Vec<(usize, Geometry, u32)> = Vec::new();
    for &g in gpus {
        let target = &targets[g];
        if *target == problem.gpus[g].current || target.instances().is_empty() {
            continue;
        }
        let model = problem.gpus[g].model;
        match shapes.iter_mut().find(|(m, t, _)| *m == model && t == target) {
            Some(shape) => shape.2 += 1,
            None => shapes.push((model, target.clone(), 1)),
        }
    }
    shapes
}

/// The geometry given to most GPUs of `model` (the first such on the node on a tie).
fn most_given(shapes: &[(usize, Geometry, u32)], model: usize) -> Option<&Geometry> {
    let mut best: Option<(&Geometry, u32)> = None;
    for (m, shape, count) in shapes {
        let (m, count) = (*m, *count);
        if m == model && best.is_none_or(|(_, c)| count > c) {
            best = Some((shape, count));
        }
    }
    best.map(|(shape, _)| shape)
}

/// Whether `gpu` may take `shape`: a whole GPU only where it may be made one without a reset;
/// slices only on a GPU that could not take a whole-GPU pod anyway (an Ampere), since a Hopper
/// left empty can still turn whole for one, and slices on it, once a pod holds one, keep it
/// from doing so for as long as that pod runs; and each profile allowed by the policy (the
/// shape came from a GPU of the same model, which may have kept an instance of a profile the
/// policy no longer allows).
fn allowed_on(problem: &Problem, gpu: usize, shape: &Geometry) -> bool {
    let (whole, may_be_whole) = (shape.is_whole(problem.model_of(gpu)), problem.can_be_whole(gpu));
    if whole || may_be_whole {
        return whole && may_be_whole;
    }
    let allowed = &problem.allowed[problem.gpus[gpu].model];
    shape.instances().iter().all(|p| allowed.contains(&p.profile))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::plan::PlanOptions;
    use crate::snapshot::{Gpu, Node, Policy, Snapshot};

    fn node(name: &str, model: &str, gpus: u32) -> Node {
        Node {
            name: name.into(),
            gpus: (0..gpus).map(|i| Gpu { index: i, model: model.into(), instances: Vec::new() }).collect(),
            ..Node::default()
        }
    }

    fn snapshot(nodes: Vec<Node>, stabilisation_seconds: u32, max_gpus_changed: Option<u32>) -> Snapshot {
        Snapshot {
            nodes,
            policy: Some(Policy { stabilisation_seconds, max_gpus_changed, ..Policy::default() }),
            ..Snapshot::default()
        }
    }

    /// Targets where GPU 0 of every node becomes `shape` (a profile list of the model).
    fn first_gpus_become(problem: &Problem, shape: &[&str]) -> Vec<Geometry> {
        let mut targets: Vec<Geometry> = problem.gpus.iter().map(|g| g.current.clone()).collect();
        for node in &problem.nodes {
            let g = node.gpus[0];
            targets[g] = geometry_of(problem, g, shape);
        }
        targets
    }

    fn geometry_of(problem: &Problem, g: usize, shape: &[&str]) -> Geometry {
        let model = problem.model_of(g);
        let mut placed = Vec::new();
        let mut start = 0u8;
        for name in shape {
            let id = model.profile(name).expect("profile");
            let at = model.profile_info(id).starts.iter().copied().find(|&s| s >= start).expect("placement");
            placed.push(crate::geometry::Placed { profile: id, start: at });
            start = at + model.profile_info(id).size;
        }
        Geometry::new(placed)
    }

    #[test]
    fn empty_gpus_of_a_changed_node_take_its_new_shape_and_other_nodes_stay() {
        let catalog = Catalog::builtin();
        let s = snapshot(vec![node("a100", "A100-80GB", 4), node("idle", "A100-80GB", 2)], 600, None);
        let problem = Problem::new(&s, catalog, &PlanOptions::default()).expect("problem");
        let mut targets = first_gpus_become(&problem, &["4g.40gb", "3g.40gb"]);
        // Only the first node changes.
        let idle = problem.nodes[1].gpus[0];
        targets[idle] = problem.gpus[idle].current.clone();
        let shaped = shape_empty_gpus(&problem, &mut targets);
        assert_eq!(shaped, problem.nodes[0].gpus[1..].to_vec());
        for &g in &problem.nodes[0].gpus {
            assert_eq!(targets[g], targets[problem.nodes[0].gpus[0]]);
        }
        for &g in &problem.nodes[1].gpus {
            assert!(targets[g].instances().is_empty(), "a node the plan leaves alone stays as it is");
        }
    }

    #[test]
    fn without_a_window_or_past_max_gpus_changed_nothing_more_changes() {
        let catalog = Catalog::builtin();
        for (window, max, expected) in [(0, None, 0), (600, Some(3), 2), (600, Some(1), 0)] {
            let s = snapshot(vec![node("h100", "H100-80GB", 8)], window, max);
            let problem = Problem::new(&s, catalog, &PlanOptions::default()).expect("problem");
            let mut targets = first_gpus_become(&problem, &["whole"]);
            let shaped = shape_empty_gpus(&problem, &mut targets);
            assert_eq!(shaped.len(), expected, "window {window}, maxGpusChanged {max:?}");
        }
    }

    #[test]
    fn a_hopper_that_could_turn_whole_gets_no_slices() {
        let catalog = Catalog::builtin();
        let s = snapshot(vec![node("h100", "H100-80GB", 4)], 600, None);
        let problem = Problem::new(&s, catalog, &PlanOptions::default()).expect("problem");
        let mut targets = first_gpus_become(&problem, &["4g.40gb", "3g.40gb"]);
        assert!(shape_empty_gpus(&problem, &mut targets).is_empty(), "they stay free to turn whole");
    }

    #[test]
    fn a_gpu_with_instances_keeps_them() {
        let catalog = Catalog::builtin();
        let s = snapshot(vec![node("a100", "A100-80GB", 3)], 600, None);
        let mut problem = Problem::new(&s, catalog, &PlanOptions::default()).expect("problem");
        let carved = problem.nodes[0].gpus[2];
        problem.gpus[carved].current = geometry_of(&problem, carved, &["7g.80gb"]);
        let mut targets = first_gpus_become(&problem, &["1g.10gb", "1g.10gb"]);
        targets[carved] = problem.gpus[carved].current.clone();
        let shaped = shape_empty_gpus(&problem, &mut targets);
        assert_eq!(shaped, vec![problem.nodes[0].gpus[1]]);
        assert_eq!(targets[carved], problem.gpus[carved].current);
    }
}
