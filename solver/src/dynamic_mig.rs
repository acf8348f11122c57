//! A GPU as NVIDIA's DRA driver in DynamicMIG mode publishes it: a counter set
//! (`memory-slice-<i>` for each memory slice, and engines, multiprocessors, memory) and a
//! device for every profile at every placement, each drawing the counters it uses
//! (repository `kubernetes-sigs/dra-driver-nvidia-gpu`, `cmd/gpu-kubelet-plugin/deviceinfo.go`).
//! kube-scheduler's allocator takes the first device whose counters are still free, so after
//! churn the instances sit at scattered placements and a larger profile can find no free
//! placement although the GPU has room for it. This says, for a GPU and a profile, whether a
//! device fits now, would fit if the GPU's instances were packed (and how few would move), or
//! not at all, and the cheapest set of instances to move to open room
//! ([`Gpu::opening_for`]). The controller reads it from a node's slices and claims; the
//! simulator runs first-fit and compaction on it.

use std::collections::BTreeMap;

use crate::catalog::GpuModel;

/// The prefix of the counters that stand for a GPU's memory slices.
pub const MEMORY_SLICE: &str = "memory-slice-";

/// The memory slice a counter stands for (`memory-slice-3` is 3), if it stands for one.
pub fn memory_slice(counter: &str) -> Option<u8> {
    counter.strip_prefix(MEMORY_SLICE)?.parse().ok()
}

/// The counter that stands for memory slice `index` (`memory-slice-3`).
pub fn memory_slice_counter(index: u8) -> String {
    format!("{MEMORY_SLICE}{index}")
}

/// What a MIG device of `size` memory slices from `start` draws: one of each slice's counter
/// (the driver's `partitions.go`).
pub fn memory_draw(start: u8, size: u8) -> BTreeMap<String, u64> {
    (start..start + size).map(|i| (memory_slice_counter(i), 1)).collect()
}

/// The name NVIDIA's driver gives the MIG device of `profile` (with its GPU instance profile
/// id, `x` where the catalog has none) at `start` on GPU `gpu`:
/// `gpu-<minor>-mig-<profile without dots, + as ->-<id>-<start>`
/// (`cmd/gpu-kubelet-plugin/mig.go`). Nobody should read a device's geometry from its name;
/// this is for making them as the driver does.
pub fn mig_device_name(gpu: u32, profile: &str, profile_id: Option<u32>, start: u8) -> String {
    let id = profile_id.map_or_else(|| "x".to_string(), |id| id.to_string());
    format!("gpu-{gpu}-mig-{}-{id}-{start}", profile.replace('.', "").replace('+', "-"))
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
    /// GPU `index` of `model` as the driver publishes it in DynamicMIG mode, nothing allocated:
    /// counter set `gpu-<index>-counter-set` of one counter per memory slice, and a device for
    /// every MIG profile at every legal start drawing the slices it covers, in name order (the
    /// order the driver lists them in, and kube-scheduler's allocator tries them in).
    pub fn of_model(model: &GpuModel, index: u32) -> Gpu {
        let capacity = (0..model.placement_units).map(|i| (memory_slice_counter(i), 1)).collect();
        let mut devices: Vec<(String, String, BTreeMap<String, u64>)> = Vec::new();
        for p in model.mig_profiles().map(|id| model.profile_info(id)) {
            for &start in &p.starts {
                let name = mig_device_name(index, &p.name, p.nvidia_smi_profile_id, start);
                devices.push((name, p.name.clone(), memory_draw(start, p.size)));
            }
        }
        devices.sort();
        let mut gpu = Gpu::new(format!("gpu-{index}-counter-set"), capacity);
        for (name, profile, draw) in devices {
            gpu.add_device(name, Some(profile), draw, false);
        }
        gpu
    }

    /// A GPU with counter set `set` of `capacity` and no device yet.
    pub fn new(set: impl Into<String>, capacity: BTreeMap<String, u64>) -> Gpu {
        Gpu { set: set.into(), capacity, devices: Vec::new(), allocated: Vec::new() }
    }

    /// Adds a device of `profile` (none for a whole GPU) drawing `draw` from the counter set,
    /// allocated to a claim or not.
    pub fn add_device(
        &mut self,
        name: impl Into<String>,
        profile: Option<String>,
        draw: BTreeMap<String, u64>,
        allocated: bool,
    ) {
        if allocated {
            self.allocated.push(self.devices.len());
        }
        self.devices.push(AbstractDevice { name: name.into(), profile, draw });
    }

    /// The first device of `profile`, in the order they were added, that is free and fits what
    /// is left and that `skip` does not rule out: the device kube-scheduler's allocator takes
    /// (it walks a slice's devices in order and takes the first that fits).
    pub fn first_free(&self, profile: &str, skip: &dyn Fn(&str) -> bool) -> Option<&str> {
        let left = self.left();
        self.devices
            .iter()
            .filter(|d| d.profile.as_deref() == Some(profile) && !skip(&d.name))
            .find(|d| fits(&left, &d.draw))
            .map(|d| d.name.as_str())
    }

    /// Marks device `name` allocated (a claim got it) or free again; false when there is no such
    /// device.
    pub fn set_allocated(&mut self, name: &str, allocated: bool) -> bool {
        let Some(d) = self.index_of(name) else { return false };
        self.allocated.retain(|&a| a != d);
        if allocated {
            self.allocated.push(d);
        }
        true
    }

    /// The counters no allocated device draws.
    fn left(&self) -> BTreeMap<String, u64> {
        let mut left = self.capacity.clone();
        for &d in &self.allocated {
            take(&mut left, &self.devices[d].draw);
        }
        left
    }

    /// The memory slices no allocated device draws, in order.
    pub fn free_memory_slices(&self) -> Vec<u8> {
        let left = self.left();
        let mut free: Vec<u8> =
            left.iter().filter(|(_, &value)| value > 0).filter_map(|(name, _)| memory_slice(name)).collect();
        free.sort_unstable();
        free
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
        if !self.enough_slices(profile) {
            return Room::None;
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
        if self.fits_now(profile) || !self.enough_slices(profile) {
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
        self.first_free(profile, &|_| false).is_some()
    }

    /// Whether the GPU has as many free memory slices as a device of `profile` covers: without
    /// them no packing makes room (moving instances frees no slice).
    fn enough_slices(&self, profile: &str) -> bool {
        self.free_memory_slices().len() >= self.size_of(Some(profile), None)
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
        Some(self.overlapping(self.index_of(device)?))
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.devices.iter().position(|x| x.name == name)
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
