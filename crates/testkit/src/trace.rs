//! Models for the simulator's integration tests, stated as data so that what the tests work
//! out by hand does not move with the catalog.

use geometer_sim::cluster::{ModelInfo, ProfileInfo};

/// An 80 GB A100 as the simulator sees it (from the NVIDIA MIG user guide's profile table).
pub fn a100() -> ModelInfo {
    let p = |name: &str, c, m, mib| ProfileInfo {
        name: name.into(),
        compute_slices: c,
        memory_slices: m,
        memory_mib: mib,
    };
    ModelInfo {
        name: "A100-80GB".into(),
        compute_slices: 7,
        memory_slices: 8,
        memory_mib: 81920,
        mode_change_needs_reset: true,
        profiles: vec![
            p("1g.10gb", 1, 1, 9728),
            p("1g.20gb", 1, 2, 19968),
            p("2g.20gb", 2, 2, 19968),
            p("3g.40gb", 3, 4, 40192),
            p("4g.40gb", 4, 4, 40192),
            p("7g.80gb", 7, 8, 80896),
        ],
    }
}
