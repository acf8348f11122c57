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
pub use geometer_solver::dynamic_mig::{memory_slice, Gpu, Opening, Room, MEMORY_SLICE};

use super::published::{Counters, PublishedSlice};

/// The GPUs of a DynamicMIG node's pool (its slices), with the devices allocated to claims
/// (`allocated`, by name).
pub fn of_pool(slices: &[std::sync::Arc<PublishedSlice>], allocated: &dyn Fn(&str) -> bool) -> Vec<Gpu> {
    let mut gpus: BTreeMap<String, Gpu> = BTreeMap::new();
    for set in slices.iter().flat_map(|s| &s.counter_sets) {
        gpus.insert(set.set.clone(), Gpu::new(set.set.clone(), set.values.clone()));
    }
    for device in slices.iter().flat_map(|s| &s.devices) {
        let Some(draw) = &device.draw else { continue };
        // NVIDIA's devices draw from one counter set, their GPU's.
        let [Counters { set, values }] = draw.from.as_slice() else { continue };
        let Some(gpu) = gpus.get_mut(set) else { continue };
        gpu.add_device(device.name.clone(), draw.profile.clone(), values.clone(), allocated(&device.name));
    }
    gpus.into_values().collect()
}

/// The memory slices of `gpu` no allocated device draws, as runs.
pub fn free_runs(gpu: &Gpu) -> Vec<PlacementRun> {
    PlacementRun::runs(gpu.free_memory_slices())
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
        of_pool(&slices, &|name| allocated.contains(&name)).remove(0)
    }

    #[test]
    fn scattered_small_instances_block_a_larger_profile_that_packing_would_fit() {
        // NVIDIA's driver issue tracker: 1g.10gb at 0, 1 and 5 leave no 3g.40gb placement.
        let gpu = gpu_with(&["gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1", "gpu-0-mig-1g10gb-5"]);
        let run = |start, size| PlacementRun { start, size };
        assert_eq!(free_runs(&gpu), [run(2, 3), run(6, 2)]);
        assert_eq!(runs_text(&free_runs(&gpu)), "2-4, 6-7");
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
        assert_eq!(free_runs(&full), []);
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
