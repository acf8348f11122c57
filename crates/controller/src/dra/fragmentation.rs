//! DynamicMIG nodes: which pending claims fragmentation blocks. NVIDIA's DRA driver in
//! DynamicMIG mode publishes a device for every profile at every placement, each consuming
//! counters of its GPU's counter set (`memory-slice-<i>` for the memory slices it covers,
//! engines, multiprocessors; repository `kubernetes-sigs/dra-driver-nvidia-gpu`,
//! `cmd/gpu-kubelet-plugin/deviceinfo.go`), and kube-scheduler's allocator takes the first
//! device whose counters are still free. After churn the instances sit at scattered placements
//! and a larger profile can find no free placement although the GPU has room for it.
//!
//! Read from the slices and the allocated claims, per GPU: the counters left, the free memory
//! slices as runs, and for a profile whether a device of it fits now, would fit if the GPU's
//! instances were packed (and how few would have to move), or not at all. Geometer never
//! creates or destroys an instance on such a node (the driver owns them); this is what it
//! reports.

use std::collections::BTreeMap;

use geometer_api::PlacementRun;

use super::published::{Counters, PublishedSlice};

/// The prefix of the counters that stand for a GPU's memory slices.
const MEMORY_SLICE: &str = "memory-slice-";

/// The memory slice a counter stands for (`memory-slice-3` is 3), if it stands for one.
fn memory_slice(counter: &str) -> Option<u8> {
    counter.strip_prefix(MEMORY_SLICE)?.parse().ok()
}

/// One GPU of a DynamicMIG node: its counter set and the devices drawing from it.
#[derive(Debug, Clone)]
pub struct Gpu {
    /// The counter set's name (one per GPU).
    pub set: String,
    capacity: BTreeMap<String, u64>,
    devices: Vec<AbstractDevice>,
    /// Indexes into `devices` of those allocated to claims.
    allocated: Vec<usize>,
}

#[derive(Debug, Clone)]
struct AbstractDevice {
    name: String,
    profile: Option<String>,
    draw: BTreeMap<String, u64>,
}

/// What a GPU can do for a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Room {
    /// A device of the profile is free now.
    Now,
    /// None is, but packing the GPU's instances would free one by moving this many.
    AfterPacking { moves: usize },
    /// Not even packed.
    None,
}

impl Gpu {
    /// The GPUs of a DynamicMIG node's pool (its slices), with the devices allocated to claims
    /// (`allocated`, by name).
    pub fn of_pool(slices: &[std::sync::Arc<PublishedSlice>], allocated: &dyn Fn(&str) -> bool) -> Vec<Gpu> {
        let mut gpus: BTreeMap<String, Gpu> = BTreeMap::new();
        for set in slices.iter().flat_map(|s| &s.counter_sets) {
            let gpu = Gpu {
                set: set.set.clone(),
                capacity: set.values.clone(),
                devices: vec![],
                allocated: vec![],
            };
            gpus.insert(set.set.clone(), gpu);
        }
        for device in slices.iter().flat_map(|s| &s.devices) {
            let Some(draw) = &device.draw else { continue };
            // NVIDIA's devices draw from one counter set, their GPU's.
            let [Counters { set, values }] = draw.from.as_slice() else { continue };
            let Some(gpu) = gpus.get_mut(set) else { continue };
            if allocated(&device.name) {
                gpu.allocated.push(gpu.devices.len());
            }
            gpu.devices.push(AbstractDevice {
                name: device.name.clone(),
                profile: draw.profile.clone(),
                draw: values.clone(),
            });
        }
        gpus.into_values().collect()
    }

    /// The counters no allocated device draws.
    fn left(&self) -> BTreeMap<String, u64> {
        let mut left = self.capacity.clone();
        for &d in &self.allocated {
            take(&mut left, &self.devices[d].draw);
        }
        left
    }

    /// The free memory slices, as runs.
    pub fn free_runs(&self) -> Vec<PlacementRun> {
        let left = self.left();
        let mut free: Vec<u8> =
            left.iter().filter(|(_, &value)| value > 0).filter_map(|(name, _)| memory_slice(name)).collect();
        free.sort_unstable();
        PlacementRun::runs(free)
    }

    /// The profile of each device allocated on this GPU, with the first memory slice it covers.
    pub fn instances(&self) -> Vec<(String, Option<u8>)> {
        self.allocated
            .iter()
            .map(|&d| {
                let device = &self.devices[d];
                let first = device.draw.keys().filter_map(|name| memory_slice(name)).min();
                (device.profile.clone().unwrap_or_else(|| device.name.clone()), first)
            })
            .collect()
    }

    /// Whether a device of `profile` fits now, after packing, or not at all.
    pub fn room_for(&self, profile: &str) -> Room {
        let left = self.left();
        let of_profile = |d: &&AbstractDevice| d.profile.as_deref() == Some(profile);
        if self.devices.iter().filter(of_profile).any(|d| fits(&left, &d.draw)) {
            return Room::Now;
        }
        // The instances already there keep their profiles; one more of `profile` joins them.
        let mut wanted: Vec<(Option<usize>, Option<&str>)> =
            self.allocated.iter().map(|&d| (Some(d), self.devices[d].profile.as_deref())).collect();
        wanted.push((None, Some(profile)));
        // Largest first: the search fails fast where there is no room.
        wanted.sort_by_key(|(d, p)| std::cmp::Reverse(self.size_of(*p, *d)));
        for moves in 0..=self.allocated.len() {
            let mut search =
                Packing { gpu: self, left: self.capacity.clone(), used: vec![false; self.devices.len()] };
            if search.place(&wanted, moves) {
                return Room::AfterPacking { moves };
            }
        }
        Room::None
    }

    /// Memory slices a device of `profile` covers (the current device's, for an instance).
    fn size_of(&self, profile: Option<&str>, current: Option<usize>) -> usize {
        let device = current
            .map(|d| &self.devices[d])
            .or_else(|| self.devices.iter().find(|d| d.profile.as_deref() == profile));
        device.map_or(0, |d| d.draw.keys().filter(|name| memory_slice(name).is_some()).count())
    }
}

/// A search for distinct devices of the wanted profiles whose draws fit the GPU together.
struct Packing<'g> {
    gpu: &'g Gpu,
    left: BTreeMap<String, u64>,
    used: Vec<bool>,
}

impl Packing<'_> {
    /// Places `wanted` (an instance's current device and profile, or a new device's profile)
    /// with at most `moves` instances off their current device.
    fn place(&mut self, wanted: &[(Option<usize>, Option<&str>)], moves: usize) -> bool {
        let Some(((current, profile), rest)) = wanted.split_first() else { return true };
        // The instance's own device first: staying costs no move.
        let mut candidates: Vec<usize> = current.iter().copied().collect();
        candidates.extend(
            (0..self.gpu.devices.len())
                .filter(|&d| Some(d) != *current && self.gpu.devices[d].profile.as_deref() == *profile),
        );
        for d in candidates {
            let moved = current.is_some() && Some(d) != *current;
            if self.used[d] || (moved && moves == 0) || !fits(&self.left, &self.gpu.devices[d].draw) {
                continue;
            }
            self.used[d] = true;
            take(&mut self.left, &self.gpu.devices[d].draw);
            if self.place(rest, moves - usize::from(moved)) {
                return true;
            }
            give(&mut self.left, &self.gpu.devices[d].draw);
            self.used[d] = false;
        }
        false
    }
}

fn fits(left: &BTreeMap<String, u64>, draw: &BTreeMap<String, u64>) -> bool {
    draw.iter().all(|(name, &value)| left.get(name).is_some_and(|&l| l >= value))
}

fn take(left: &mut BTreeMap<String, u64>, draw: &BTreeMap<String, u64>) {
    for (name, value) in draw {
        if let Some(l) = left.get_mut(name) {
            *l = l.saturating_sub(*value);
        }
    }
}

fn give(left: &mut BTreeMap<String, u64>, draw: &BTreeMap<String, u64>) {
    for (name, value) in draw {
        if let Some(l) = left.get_mut(name) {
            *l += value;
        }
    }
}

/// Runs of memory slices as `2-4, 6-7` (one slice alone as `5`); `none` for no run.
pub fn runs_text(runs: &[PlacementRun]) -> String {
    if runs.is_empty() {
        return "none".into();
    }
    let run = |r: &PlacementRun| match r.size {
        1 => r.start.to_string(),
        _ => format!("{}-{}", r.start, r.start + r.size - 1),
    };
    runs.iter().map(run).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dra::published::{DeviceName, Draw};
    use k8s_openapi::api::resource::v1::ResourcePool;
    use std::sync::Arc;

    /// H100 placements per profile (start, memory slices), from NVIDIA's MIG user guide
    /// (docs.nvidia.com/datacenter/tesla/mig-user-guide, "H100 MIG profiles").
    pub(crate) const H100: &[(&str, &[u32], u32)] = &[
        ("1g.10gb", &[0, 1, 2, 3, 4, 5, 6], 1),
        ("2g.20gb", &[0, 2, 4], 2),
        ("3g.40gb", &[0, 4], 4),
        ("4g.40gb", &[0], 4),
        ("7g.80gb", &[0], 8),
    ];

    /// A DynamicMIG slice of one H100 (`gpu-0`), every profile at every placement.
    pub(crate) fn h100_slice(node: &str) -> PublishedSlice {
        let set = "gpu-0-counter-set".to_string();
        let capacity: BTreeMap<String, u64> = (0..8).map(|i| (format!("{MEMORY_SLICE}{i}"), 1)).collect();
        let mut devices = Vec::new();
        for (profile, starts, size) in H100 {
            for start in *starts {
                let values = (*start..start + size).map(|i| (format!("{MEMORY_SLICE}{i}"), 1)).collect();
                devices.push(DeviceName {
                    name: format!("gpu-0-mig-{}-{start}", profile.replace('.', "")),
                    uuid: None,
                    draw: Some(Box::new(Draw {
                        profile: Some(profile.to_string()),
                        from: vec![Counters { set: set.clone(), values }],
                    })),
                });
            }
        }
        PublishedSlice {
            driver: "gpu.nvidia.com".into(),
            node: Some(node.into()),
            mode: crate::dra::stack::DraMode::DynamicMig,
            pool: ResourcePool { name: node.into(), generation: 1, resource_slice_count: 1 },
            devices,
            sample: None,
            counter_sets: vec![Counters { set, values: capacity }],
        }
    }

    fn gpu_with(allocated: &[&str]) -> Gpu {
        let slices = [Arc::new(h100_slice("n1"))];
        Gpu::of_pool(&slices, &|name| allocated.contains(&name)).remove(0)
    }

    #[test]
    fn scattered_small_instances_block_a_larger_profile_that_packing_would_fit() {
        // NVIDIA's driver issue tracker: 1g.10gb at 0, 1 and 5 leave no 3g.40gb placement.
        let gpu = gpu_with(&["gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1", "gpu-0-mig-1g10gb-5"]);
        let run = |start, size| PlacementRun { start, size };
        assert_eq!(gpu.free_runs(), [run(2, 3), run(6, 2)]);
        assert_eq!(runs_text(&gpu.free_runs()), "2-4, 6-7");
        assert_eq!(gpu.room_for("1g.10gb"), Room::Now);
        assert_eq!(gpu.room_for("3g.40gb"), Room::AfterPacking { moves: 1 }, "move the 1g at 5 to 2");
        assert_eq!(gpu.room_for("7g.80gb"), Room::None, "three slices are in use");
    }

    #[test]
    fn a_packed_gpu_has_room_now_or_none() {
        let gpu = gpu_with(&["gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1"]);
        assert_eq!(gpu.room_for("3g.40gb"), Room::Now);
        let full = gpu_with(&["gpu-0-mig-3g40gb-0", "gpu-0-mig-3g40gb-4"]);
        assert_eq!(full.room_for("1g.10gb"), Room::None);
        assert_eq!(full.free_runs(), []);
    }

    #[test]
    fn packing_moves_as_few_instances_as_it_can() {
        // A 4g.40gb has one placement, slices 0-3, where the 1g at 0 and the 2g at 2 both sit:
        // both move (to 4-5 and 6, say).
        let gpu = gpu_with(&["gpu-0-mig-1g10gb-0", "gpu-0-mig-2g20gb-2"]);
        assert_eq!(gpu.room_for("4g.40gb"), Room::AfterPacking { moves: 2 });
        assert_eq!(gpu.room_for("3g.40gb"), Room::Now, "4-7 is free");
    }
}
