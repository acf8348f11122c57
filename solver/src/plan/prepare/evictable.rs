//! The running pods a plan may evict: allowed by policy (the caller checks), known, not
//! do-not-disrupt, on one GPU of the node they are bound to. Their instances become
//! `User::Evictable`; the others stay pinned, with a note where the reason is not obvious.
//! What they request is freeable on their node: a pod may count on it to fit there, and so
//! may an evicted pod to land on its own node again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::catalog::GpuModel;
use crate::snapshot::{Freeable, Node, NodeKinds, Pod, Snapshot};

use super::layout::Layout;
use super::{snapshot_gpu_sorted, ConstraintKey, Needs, RunningInfo, User};

pub(super) fn evictable_pods<'a>(
    snapshot: &'a Snapshot,
    node_order: &[&'a Node],
    kinds: &NodeKinds,
    models: &[&GpuModel],
    pid_to_key: &[Vec<Option<usize>>],
    layout: &mut Layout<'a>,
    notes: &mut Vec<String>,
) -> (Vec<RunningInfo>, Vec<Freeable>) {
    // Looked up by namespace and name, borrowed: no key is built for each running pod.
    let running_by_key: HashMap<(&str, &str), &Pod> =
        snapshot.running.iter().map(|p| ((p.namespace.as_str(), p.name.as_str()), p)).collect();
    let mut running = Vec::new();
    let mut pods: Vec<&Pod> = Vec::new();
    for (key, gpu_set) in &layout.pod_gpus {
        let Some(pod) = running_by_key.get(&(key.namespace(), key.name())) else { continue };
        if pod.do_not_disrupt {
            continue;
        }
        if gpu_set.len() > 1 {
            notes.push(format!(
                "pod {key} uses instances on several GPUs; it is never evicted by this planner"
            ));
            continue;
        }
        let g = *gpu_set.iter().next().expect("a GPU class is never empty");
        let node_name = layout.nodes[layout.gpus[g].node].name;
        if pod.node.as_deref() != Some(node_name) {
            notes.push(format!(
                "pod {key} holds instances on node {node_name} but is bound elsewhere; not evicted"
            ));
            continue;
        }
        let gpu = &layout.gpus[g];
        let model = models[gpu.model];
        let snapshot_gpu = node_order[gpu.node]
            .gpus
            .iter()
            .find(|x| x.index == gpu.index)
            .expect("the GPU comes from this node");
        let mut slices: BTreeMap<usize, u32> = BTreeMap::new();
        let mut known = true;
        for inst in snapshot_gpu.instances.iter().filter(|i| i.pod.as_ref() == Some(*key)) {
            let pid = model
                .profile(&inst.profile)
                .expect("validated snapshot: every instance profile is in the catalog");
            match pid_to_key[gpu.model][pid] {
                Some(k) => *slices.entry(k).or_default() += 1,
                None => known = false,
            }
        }
        if !known {
            continue;
        }
        let needs = Needs {
            slices: slices.into_iter().collect(),
            cpu: pod.cpu_millis,
            memory: pod.memory_bytes,
            spread: pod.gpu_spread,
        };
        let idx = running.len();
        let eligible = Arc::from(Vec::new()); // Once every pod's freeable resources are known.
        running.push(RunningInfo { key: (*key).clone(), node: gpu.node, gpu: g, needs, eligible });
        pods.push(pod);
        let gpu = &mut layout.gpus[g];
        for (i, inst) in snapshot_gpu_sorted(snapshot_gpu, model).iter().enumerate() {
            if *inst == Some(*key) {
                gpu.users[i] = User::Evictable(idx);
            }
        }
    }
    let mut freeable = vec![Freeable::default(); node_order.len()];
    for info in &running {
        let room = &mut freeable[info.node];
        room.cpu_millis += info.needs.cpu;
        room.memory_bytes += info.needs.memory;
    }
    // Pods from one template share one list (and so one demand class in the ILP).
    let mut by_template: BTreeMap<ConstraintKey, Arc<[usize]>> = BTreeMap::new();
    for (info, pod) in running.iter_mut().zip(pods) {
        info.eligible = by_template
            .entry(ConstraintKey::of(pod, Vec::new()))
            .or_insert_with(|| {
                let failures = kinds.failures(pod, node_order, &freeable);
                let nodes: Vec<usize> =
                    failures.enumerate().filter(|(_, failure)| failure.is_none()).map(|(n, _)| n).collect();
                Arc::from(nodes)
            })
            .clone();
    }
    (running, freeable)
}
