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
        if self.fits_now(profile) {
            return Room::Now;
        }
        let wanted = self.wanted(profile, &|_| true);
        for moves in 0..=self.allocated.len() {
            if self.packing().place(&wanted, moves) {
                return Room::AfterPacking { moves };
            }
        }
        Room::None
    }

    /// The cheapest way to open room for one device of `profile` by moving instances, where
    /// `cost(device)` is what moving the instance on allocated device `device` costs (`None`:
    /// it must not move). `None` when a device of the profile is free now, or when no set of
    /// movable instances would make room.
    pub fn opening_for(&self, profile: &str, cost: &dyn Fn(&str) -> Option<u64>) -> Option<Opening> {
        if self.fits_now(profile) {
            return None;
        }
        let movable: Vec<(usize, u64)> =
            self.allocated.iter().filter_map(|&d| Some((d, cost(&self.devices[d].name)?))).collect();
        // Every set of movable instances, cheapest first (then fewest); a GPU holds at most a
        // handful of instances, so there are at most a few hundred sets.
        let mut sets: Vec<(u64, u32, u32)> = (1..1u32 << movable.len().min(MAX_MOVABLE))
            .map(|mask| {
                let cost = (0..movable.len()).filter(|i| mask & (1 << i) != 0).map(|i| movable[i].1).sum();
                (cost, mask.count_ones(), mask)
            })
            .collect();
        sets.sort_unstable();
        for (cost, _, mask) in sets {
            let chosen: Vec<usize> =
                (0..movable.len()).filter(|i| mask & (1 << i) != 0).map(|i| movable[i].0).collect();
            let wanted = self.wanted(profile, &|d| chosen.contains(&d));
            let mut search = self.packing();
            if !search.place(&wanted, chosen.len()) {
                continue;
            }
            // The new device was placed last in the search's order; find it by position.
            let at = wanted.iter().position(|w| w.current.is_none()).expect("the new device is wanted");
            let device = search.placed[at];
            // Only those the search took off their device move.
            let moved: Vec<String> = wanted
                .iter()
                .zip(&search.placed)
                .filter(|(w, &to)| w.current.is_some_and(|from| from != to))
                .map(|(w, _)| self.devices[w.current.expect("filtered")].name.clone())
                .collect();
            return Some(Opening {
                device: self.devices[device].name.clone(),
                guarded: self.overlapping(device),
                moved,
                cost,
            });
        }
        None
    }

    /// Whether a device of `profile` is free now.
    fn fits_now(&self, profile: &str) -> bool {
        let left = self.left();
        self.devices.iter().filter(|d| d.profile.as_deref() == Some(profile)).any(|d| fits(&left, &d.draw))
    }

    /// The devices to place: each instance where it is (free to move where `movable` says so)
    /// and one more of `profile`, largest first (the search fails fast where there is no room).
    fn wanted<'a>(&'a self, profile: &'a str, movable: &dyn Fn(usize) -> bool) -> Vec<Wanted<'a>> {
        let mut wanted: Vec<Wanted<'a>> = self
            .allocated
            .iter()
            .map(|&d| Wanted {
                current: Some(d),
                profile: self.devices[d].profile.as_deref(),
                movable: movable(d),
            })
            .collect();
        wanted.push(Wanted { current: None, profile: Some(profile), movable: true });
        // Stable: the new device goes after instances of its size.
        wanted.sort_by_key(|w| std::cmp::Reverse(self.size_of(w.profile, w.current)));
        wanted
    }

    fn packing(&self) -> Packing<'_> {
        Packing {
            gpu: self,
            left: self.capacity.clone(),
            used: vec![false; self.devices.len()],
            placed: Vec::new(),
        }
    }

    /// The devices to guard while room is opened at the device named `device`
    /// ([`Opening::guarded`]); `None` when this GPU has no device of that name.
    pub fn guards(&self, device: &str) -> Option<Vec<String>> {
        let d = self.devices.iter().position(|x| x.name == device)?;
        Some(self.overlapping(d))
    }

    /// Every device other than `device` that draws one of its memory slices: the devices to
    /// keep other claims off while room is being opened at `device`.
    fn overlapping(&self, device: usize) -> Vec<String> {
        let slices: Vec<&String> =
            self.devices[device].draw.keys().filter(|name| memory_slice(name).is_some()).collect();
        self.devices
            .iter()
            .enumerate()
            .filter(|&(d, other)| d != device && other.draw.keys().any(|name| slices.contains(&name)))
            .map(|(_, other)| other.name.clone())
            .collect()
    }

    /// Memory slices a device of `profile` covers (the current device's, for an instance).
    fn size_of(&self, profile: Option<&str>, current: Option<usize>) -> usize {
        let device = current
            .map(|d| &self.devices[d])
            .or_else(|| self.devices.iter().find(|d| d.profile.as_deref() == profile));
        device.map_or(0, |d| d.draw.keys().filter(|name| memory_slice(name).is_some()).count())
    }
}

/// The most instances of one GPU [`Gpu::opening_for`] considers moving (a GPU holds at most 7).
const MAX_MOVABLE: usize = 12;

/// One device to place: an instance (its current device, and whether it may move), or the new
/// device of a profile (`current` is `None`).
struct Wanted<'g> {
    current: Option<usize>,
    profile: Option<&'g str>,
    movable: bool,
}

/// A way to open room on a GPU for one device of a profile by moving instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opening {
    /// The device the blocked claim can then be allocated.
    pub device: String,
    /// The allocated devices whose instances move (their pods are evicted, and come back on
    /// other devices).
    pub moved: Vec<String>,
    /// Every other device drawing a memory slice `device` covers: kept from other claims while
    /// the moved pods come back, so that they land elsewhere and the room stays open.
    pub guarded: Vec<String>,
    /// The moved instances' costs, summed.
    pub cost: u64,
}

/// A search for distinct devices of the wanted profiles whose draws fit the GPU together.
struct Packing<'g> {
    gpu: &'g Gpu,
    left: BTreeMap<String, u64>,
    used: Vec<bool>,
    /// The device each wanted entry got, in order, once the search succeeds.
    placed: Vec<usize>,
}

impl Packing<'_> {
    /// Places `wanted` with at most `moves` movable instances off their current device.
    fn place(&mut self, wanted: &[Wanted<'_>], moves: usize) -> bool {
        let Some((first, rest)) = wanted.split_first() else { return true };
        // The instance's own device first: staying costs no move.
        let mut candidates: Vec<usize> = first.current.iter().copied().collect();
        if first.movable {
            candidates.extend((0..self.gpu.devices.len()).filter(|&d| {
                Some(d) != first.current && self.gpu.devices[d].profile.as_deref() == first.profile
            }));
        }
        for d in candidates {
            let moved = first.current.is_some() && Some(d) != first.current;
            if self.used[d] || (moved && moves == 0) || !fits(&self.left, &self.gpu.devices[d].draw) {
                continue;
            }
            self.used[d] = true;
            take(&mut self.left, &self.gpu.devices[d].draw);
            self.placed.push(d);
            if self.place(rest, moves - usize::from(moved)) {
                return true;
            }
            self.placed.pop();
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

    #[test]
    fn the_cheapest_opening_moves_what_costs_least_and_guards_the_opened_placement() {
        let gpu = gpu_with(&["gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1", "gpu-0-mig-1g10gb-5"]);
        let every = |_: &str| Some(1);
        let opening = gpu.opening_for("3g.40gb", &every).expect("one move opens 4-7");
        assert_eq!(opening.device, "gpu-0-mig-3g40gb-4");
        assert_eq!(opening.moved, ["gpu-0-mig-1g10gb-5"]);
        assert_eq!(opening.cost, 1);
        // Every device drawing from slices 4-7 but the 3g.40gb at 4 is guarded.
        for guarded in [
            "gpu-0-mig-1g10gb-4",
            "gpu-0-mig-1g10gb-5",
            "gpu-0-mig-1g10gb-6",
            "gpu-0-mig-2g20gb-4",
            "gpu-0-mig-7g80gb-0",
        ] {
            assert!(opening.guarded.contains(&guarded.to_string()), "{guarded} in {:?}", opening.guarded);
        }
        assert!(!opening.guarded.contains(&opening.device));
        assert!(!opening.guarded.contains(&"gpu-0-mig-1g10gb-2".to_string()), "the moved pod may land at 2");

        // The 1g at 5 serves weights that take long to load: moving the two at 0 and 1 (0-3)
        // costs less.
        let costly = |d: &str| Some(if d == "gpu-0-mig-1g10gb-5" { 10 } else { 1 });
        let opening = gpu.opening_for("3g.40gb", &costly).unwrap();
        assert_eq!(opening.device, "gpu-0-mig-3g40gb-0");
        assert_eq!(opening.moved, ["gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1"]);
        assert_eq!(opening.cost, 2);

        // Protected: the 1g at 5 never moves, and with the one at 0 protected too nothing opens.
        let protected = |d: &str| (d != "gpu-0-mig-1g10gb-5").then_some(1);
        assert_eq!(
            gpu.opening_for("3g.40gb", &protected).unwrap().moved,
            ["gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1"]
        );
        let stuck = |d: &str| (d == "gpu-0-mig-1g10gb-1").then_some(1);
        assert_eq!(gpu.opening_for("3g.40gb", &stuck), None);

        assert_eq!(gpu.opening_for("1g.10gb", &every), None, "a 1g.10gb fits now");
        assert_eq!(gpu.opening_for("7g.80gb", &every), None, "not even packed");
    }
}
