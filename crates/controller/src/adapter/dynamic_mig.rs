//! What the plan says of DynamicMIG nodes, where NVIDIA's DRA driver makes each instance as a
//! claim is prepared and Geometer changes nothing: each GPU's instances and free memory slices,
//! and for each pending claim's profile whether fragmentation (it would fit if a GPU's
//! instances were packed) or capacity blocks it ([`crate::dra::fragmentation`]).

use std::collections::HashMap;

use geometer_solver::PodKey;

use crate::dra::demand::Asked;
use crate::dra::fragmentation::{free_runs, of_pool, runs_text, Gpu, Room};
use crate::dra::holders::{is_claim_holder, Holders};
use crate::dra::objects::DraObjects;
use crate::dra::stack::DraMode;

/// A DynamicMIG node's GPUs, as its pool and allocated claims show them.
pub(crate) struct NodeGpus {
    pub node: String,
    /// The driver's pool of the node (named after it).
    pub pool: String,
    pub gpus: Vec<Gpu>,
}

/// Every DynamicMIG node's GPUs.
pub(crate) fn dynamic_nodes(dra: &DraObjects, holders: &Holders) -> Vec<NodeGpus> {
    let dynamic = dra.nodes.iter().filter(|(_, mode)| **mode == DraMode::DynamicMig);
    dynamic
        .filter_map(|(node, _)| {
            let (pool, slices) = dra.pool_of_node(node)?;
            let held = holders.by_name.get(pool);
            let gpus = of_pool(slices, &|device| held.is_some_and(|h| h.contains_key(device)));
            Some(NodeGpus { node: node.clone(), pool: pool.to_string(), gpus })
        })
        .collect()
}

/// Where a profile has room: a GPU now, else the GPU packing opens with the fewest moves.
fn best_room<'n>(nodes: &'n [NodeGpus], profile: &str) -> Option<(&'n NodeGpus, &'n Gpu, Room)> {
    let mut best: Option<(&NodeGpus, &Gpu, Room)> = None;
    for node in nodes {
        for gpu in &node.gpus {
            let room = gpu.room_for(profile);
            let better = match (&room, best.as_ref().map(|b| &b.2)) {
                (Room::None, _) => false,
                (_, None) => true,
                (Room::Now, Some(Room::AfterPacking { .. })) => true,
                (Room::AfterPacking { moves }, Some(Room::AfterPacking { moves: had })) => moves < had,
                _ => false,
            };
            if better {
                best = Some((node, gpu, room));
            }
        }
    }
    best
}

/// `: moving ml/a (on <device>) would open <device>`: the pods a compaction would move, at one
/// each (protection and cost are the policy's, [`crate::dra::compaction`]); empty when only
/// claims no pod holds yet stand in the way.
fn would_move(node: &NodeGpus, gpu: &Gpu, profile: &str, holders: &Holders) -> String {
    let held = holders.by_name.get(&node.pool);
    let holder = |device: &str| held?.get(device).filter(|p| !is_claim_holder(p));
    let Some(opening) = gpu.opening_for(profile, &|device| holder(device).map(|_| 1)) else {
        return String::new();
    };
    let moved: Vec<String> = opening
        .moved
        .iter()
        .filter_map(|device| Some(format!("{} (on {device})", holder(device)?)))
        .collect();
    format!(": moving {} would open {}", moved.join(", "), opening.device)
}

/// What blocks a pending pod's claim on the DynamicMIG nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub pod: PodKey,
    pub profile: String,
    /// True: packing a GPU's instances would make room; false: capacity.
    pub by_fragmentation: bool,
    /// Why, for a note and an event.
    pub why: String,
}

/// The report on DynamicMIG nodes: a note per GPU (its instances and free memory slices),
/// and each pending pod's profile that fits nowhere now, with why.
pub(super) fn report(
    dra: &DraObjects,
    holders: &Holders,
    asked: &HashMap<PodKey, Asked>,
) -> (Vec<String>, Vec<Blocked>) {
    let nodes = dynamic_nodes(dra, holders);
    if nodes.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let mut notes = Vec::new();
    for node in &nodes {
        for gpu in &node.gpus {
            let instances: Vec<String> = gpu
                .instances()
                .into_iter()
                .map(|(profile, first)| {
                    format!("{profile}@{}", first.map_or(String::new(), |f| f.to_string()))
                })
                .collect();
            let instances = if instances.is_empty() { "none".to_string() } else { instances.join(", ") };
            notes.push(format!(
                "DRA DynamicMIG: node {} {}: instances {instances}; free memory slices {}",
                node.node,
                gpu.set,
                runs_text(&free_runs(gpu))
            ));
        }
    }
    let mut pods: Vec<(&PodKey, &Asked)> = asked.iter().collect();
    pods.sort_by(|a, b| a.0.cmp(b.0));
    let mut blocked = Vec::new();
    for (pod, a) in pods {
        for profile in a.profiles.keys() {
            let (by_fragmentation, why) = match best_room(&nodes, profile) {
                Some((_, _, Room::Now)) => continue,
                Some((node, gpu, Room::AfterPacking { moves })) => (
                    true,
                    format!(
                        "blocked by fragmentation: node {} {} has room for it if its instances were packed \
                         ({moves} moved{}); Geometer changes no instance on a DynamicMIG node",
                        node.node,
                        gpu.set,
                        would_move(node, gpu, profile, holders)
                    ),
                ),
                _ => {
                    (false, "blocked by capacity: no DynamicMIG GPU has room for it, even packed".to_string())
                }
            };
            notes.push(format!("DRA DynamicMIG: pod {pod} needs {profile}: {why}"));
            blocked.push(Blocked { pod: pod.clone(), profile: profile.clone(), by_fragmentation, why });
        }
    }
    (notes, blocked)
}
