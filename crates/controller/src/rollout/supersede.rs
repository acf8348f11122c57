//! Plan supersession: a published plan that the world has overtaken before it was applied.
//!
//! A plan is made for one state of the cluster. Before it starts applying, that state can move
//! on: a pod it made room for was scheduled (elsewhere, or on existing slices) or deleted, a GPU
//! it changes now has a different geometry, a slice it would destroy is now in use, or a newer
//! plan of the same policy replaced it. Applying it then would reconfigure GPUs for demand that
//! is gone, or on wrong assumptions, so it becomes `Superseded` with the reason.
//!
//! Once a plan is applying it is not superseded: stopping half-way would leave nodes in a state
//! no plan asked for, and the agent never destroys an instance in use anyway.

use std::collections::BTreeMap;
use std::fmt;

/// A pod the plan makes room for, and the node where it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HelpedPod {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
}

/// One GPU the plan changes, as it was when planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuBasis {
    pub node: String,
    pub index: u32,
    /// Instances as `profile@start`, any order.
    pub from: Vec<String>,
    /// Instances the plan destroys, as `profile@start`.
    pub destroy: Vec<String>,
}

/// What a plan assumed about the world.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PlanBasis {
    pub helped: Vec<HelpedPod>,
    pub gpus: Vec<GpuBasis>,
    /// Pods the plan evicts (`namespace/name`): their slices are meant to be in use.
    pub evicted: Vec<String>,
}

/// Where a pod is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodState {
    /// Still waiting to be scheduled.
    Pending,
    /// Bound to this node.
    Bound(String),
    /// Succeeded or Failed: it needs no slice any more.
    Finished,
}

/// An instance that exists on a GPU now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstanceNow {
    /// `profile@start`.
    pub placed: String,
    /// `namespace/name` of the pod using it, if any.
    pub pod: Option<String>,
}

/// The world now, as far as supersession cares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WorldView {
    /// Pods by `namespace/name`; a pod that is not here was deleted.
    pub pods: BTreeMap<String, PodState>,
    /// Instances per (node, GPU index); a GPU that is not here is not reported any more.
    pub gpus: BTreeMap<(String, u32), Vec<InstanceNow>>,
}

/// Why a plan was overtaken, worded for `kubectl describe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Overtaken {
    PodDeleted { pod: String },
    PodFinished { pod: String },
    PodScheduled { pod: String, node: String, planned: String },
    GpuGone { node: String, gpu: u32 },
    GeometryChanged { node: String, gpu: u32, was: String, now: String },
    SliceTaken { node: String, gpu: u32, placed: String, pod: String },
    ReplacedBy { plan: String },
}

impl fmt::Display for Overtaken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overtaken::PodDeleted { pod } => {
                write!(f, "pod {pod}, which the plan made room for, was deleted")
            }
            Overtaken::PodFinished { pod } => {
                write!(f, "pod {pod}, which the plan made room for, has finished")
            }
            Overtaken::PodScheduled { pod, node, planned } if node == planned => {
                write!(f, "pod {pod} was scheduled on {node} before the plan made room for it there")
            }
            Overtaken::PodScheduled { pod, node, planned } => write!(
                f,
                "pod {pod} was scheduled on {node}, not on {planned} where the plan made room for it"
            ),
            Overtaken::GpuGone { node, gpu } => {
                write!(f, "GPU {gpu} on {node} is no longer reported by the node agent")
            }
            Overtaken::GeometryChanged { node, gpu, was, now } => {
                write!(f, "GPU {gpu} on {node} changed from [{was}] to [{now}] since the plan was made")
            }
            Overtaken::SliceTaken { node, gpu, placed, pod } => write!(
                f,
                "slice {placed} on GPU {gpu} of {node}, which the plan destroys, is now used by pod {pod}"
            ),
            Overtaken::ReplacedBy { plan } => write!(f, "replaced by the newer plan {plan}"),
        }
    }
}

/// The first way in which the world overtook the plan, or `None` when it still holds.
/// Checks pods first: a reviewer most often cares that the demand went away.
pub(crate) fn overtaken(basis: &PlanBasis, world: &WorldView) -> Option<Overtaken> {
    for helped in &basis.helped {
        match world.pods.get(&helped.pod) {
            None => return Some(Overtaken::PodDeleted { pod: helped.pod.clone() }),
            Some(PodState::Finished) => return Some(Overtaken::PodFinished { pod: helped.pod.clone() }),
            Some(PodState::Bound(node)) => {
                return Some(Overtaken::PodScheduled {
                    pod: helped.pod.clone(),
                    node: node.clone(),
                    planned: helped.node.clone(),
                })
            }
            Some(PodState::Pending) => {}
        }
    }
    for gpu in &basis.gpus {
        let Some(now) = world.gpus.get(&(gpu.node.clone(), gpu.index)) else {
            return Some(Overtaken::GpuGone { node: gpu.node.clone(), gpu: gpu.index });
        };
        let mut was = gpu.from.clone();
        was.sort();
        let mut current: Vec<String> = now.iter().map(|i| i.placed.clone()).collect();
        current.sort();
        if was != current {
            return Some(Overtaken::GeometryChanged {
                node: gpu.node.clone(),
                gpu: gpu.index,
                was: was.join(","),
                now: current.join(","),
            });
        }
        for instance in now {
            let Some(pod) = &instance.pod else { continue };
            if gpu.destroy.contains(&instance.placed) && !basis.evicted.contains(pod) {
                return Some(Overtaken::SliceTaken {
                    node: gpu.node.clone(),
                    gpu: gpu.index,
                    placed: instance.placed.clone(),
                    pod: pod.clone(),
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basis() -> PlanBasis {
        PlanBasis {
            helped: vec![HelpedPod { pod: "ml/train-0".into(), node: "gpu-a".into() }],
            gpus: vec![GpuBasis {
                node: "gpu-a".into(),
                index: 0,
                from: vec!["7g.80gb@0".into()],
                destroy: vec!["7g.80gb@0".into()],
            }],
            evicted: vec![],
        }
    }

    fn world() -> WorldView {
        let mut w = WorldView::default();
        w.pods.insert("ml/train-0".into(), PodState::Pending);
        w.gpus.insert(("gpu-a".into(), 0), vec![InstanceNow { placed: "7g.80gb@0".into(), pod: None }]);
        w
    }

    #[test]
    fn an_unchanged_world_keeps_the_plan() {
        assert_eq!(overtaken(&basis(), &world()), None);
    }

    #[test]
    fn a_pod_scheduled_elsewhere_supersedes_it() {
        let mut w = world();
        w.pods.insert("ml/train-0".into(), PodState::Bound("gpu-b".into()));
        let why = overtaken(&basis(), &w).expect("overtaken");
        assert_eq!(
            why.to_string(),
            "pod ml/train-0 was scheduled on gpu-b, not on gpu-a where the plan made room for it"
        );
    }

    #[test]
    fn a_deleted_or_finished_pod_supersedes_it() {
        let mut w = world();
        w.pods.clear();
        assert_eq!(overtaken(&basis(), &w), Some(Overtaken::PodDeleted { pod: "ml/train-0".into() }));
        w.pods.insert("ml/train-0".into(), PodState::Finished);
        assert_eq!(overtaken(&basis(), &w), Some(Overtaken::PodFinished { pod: "ml/train-0".into() }));
    }

    #[test]
    fn a_changed_geometry_supersedes_it_and_order_of_instances_does_not_matter() {
        let mut w = world();
        w.gpus.insert(
            ("gpu-a".into(), 0),
            vec![
                InstanceNow { placed: "4g.40gb@0".into(), pod: None },
                InstanceNow { placed: "3g.40gb@4".into(), pod: None },
            ],
        );
        let why = overtaken(&basis(), &w).expect("overtaken");
        assert_eq!(
            why.to_string(),
            "GPU 0 on gpu-a changed from [7g.80gb@0] to [3g.40gb@4,4g.40gb@0] since the plan was made"
        );

        let mut b = basis();
        b.gpus[0].from = vec!["3g.40gb@4".into(), "4g.40gb@0".into()];
        b.gpus[0].destroy = vec![];
        assert_eq!(overtaken(&b, &w), None);
    }

    #[test]
    fn a_gpu_that_disappeared_supersedes_it() {
        let mut w = world();
        w.gpus.clear();
        assert_eq!(overtaken(&basis(), &w), Some(Overtaken::GpuGone { node: "gpu-a".into(), gpu: 0 }));
    }

    #[test]
    fn a_slice_to_destroy_taken_by_a_pod_supersedes_it_unless_the_plan_evicts_that_pod() {
        let mut w = world();
        w.gpus.insert(
            ("gpu-a".into(), 0),
            vec![InstanceNow { placed: "7g.80gb@0".into(), pod: Some("ml/big".into()) }],
        );
        assert!(matches!(overtaken(&basis(), &w), Some(Overtaken::SliceTaken { .. })));
        let mut b = basis();
        b.evicted.push("ml/big".into());
        assert_eq!(overtaken(&b, &w), None);
    }
}
