//! The name NVIDIA's k8s-device-plugin advertises for a MIG device (`nvidia.com/mig-<name>`).
//!
//! The device plugin does not use the profile name NVML or `nvidia-smi` print. It builds the
//! name with go-nvlib's `MigProfile.String()`; this module is a port of that code:
//!
//! - repository `NVIDIA/go-nvlib`, path `pkg/nvlib/device/mig_profile.go` (read at commit
//!   3c161560521e3208792199f2ed0d559a5f3ae4f4): `NewMigProfile` (GPU-instance profile id ->
//!   GPU-instance slices and attributes, compute-instance profile id -> compute slices),
//!   `getMigMemorySizeGB` (the memory part) and `MigProfileInfo.String` (the text).
//! - The GPU memory go-nvlib divides by is `nvmlDeviceGetMemoryInfo(gpu).total`, in bytes, of the
//!   whole (parent) GPU: `VisitMigProfiles` in `pkg/nvlib/device/device.go` passes
//!   `memory.Total` of the device, `GetProfile` in `pkg/nvlib/device/mig_device.go` passes
//!   `parentMemoryInfo.Total` of the MIG device's parent. The profile's memory is NVML's
//!   `memorySizeMB` (MiB) of the GPU-instance profile (`VisitMigProfiles`) or of the MIG
//!   device's attributes (`GetProfile`).
//! - The device plugin (repository `NVIDIA/k8s-device-plugin`, path `internal/rm/device_map.go`,
//!   `buildMigDeviceMap`) matches `mig.GetProfile().String()` against its resource patterns,
//!   whose default names are `mig-` + `String()` of every profile `VisitMigProfiles` yields.
//!
//! The memory part, exactly as `getMigMemorySizeGB` computes it in float64:
//!
//! ```text
//! fraction = (profile_mib * 2^20) / gpu_total_bytes
//! fraction = ceil(fraction * 8) / 8                   // rounded UP to eighths of the GPU
//! gpu_gib  = ceil(gpu_total_bytes / 2^30)             // integer division, rounded UP
//! gb       = round(fraction * gpu_gib)                // Go math.Round: half away from zero
//! ```
//!
//! and the text: `<G>g.<gb>gb` when the compute instance spans the whole GPU instance (C == G),
//! `<C>c.<G>g.<gb>gb` otherwise, then `+me` (`*_REV1` profiles), `+me.all` (`*_ALL_ME`),
//! `+gfx` (`*_GFX`) or `-me` (`*_NO_ME`), all derived from the GPU-instance profile id.
//!
//! Consequences: the name does not depend on the driver's own profile name (an A100-80GB
//! driver that calls the full profile `7g.79gb` still gets `nvidia.com/mig-7g.80gb`), but it
//! does depend on NVML's total memory, which differs between drivers and boards.

use super::ProfileKind;

const ONE_MIB: u64 = 1024 * 1024;
const ONE_GIB: u64 = 1024 * 1024 * 1024;
/// go-nvlib's `fracDenominator`: memory fractions are rounded up to eighths of the GPU.
const FRACTION_DENOMINATOR: f64 = 8.0;

/// The `<X>gb` number of the advertised name: go-nvlib's `getMigMemorySizeGB(totalDeviceMemory,
/// migMemorySizeMB)`, with the same float64 operations in the same order.
///
/// `gpu_memory_bytes` is NVML's total memory of the whole GPU in bytes; `profile_memory_mib` is
/// NVML's `memorySizeMB` of the profile (MiB, despite the name). A zero GPU memory (which NVML
/// never reports) gives 0.
pub fn device_plugin_memory_gb(gpu_memory_bytes: u64, profile_memory_mib: u64) -> u64 {
    if gpu_memory_bytes == 0 {
        return 0;
    }
    let fraction = (profile_memory_mib as f64 * ONE_MIB as f64) / gpu_memory_bytes as f64;
    let fraction = (fraction * FRACTION_DENOMINATOR).ceil() / FRACTION_DENOMINATOR;
    let gpu_gib = gpu_memory_bytes.div_ceil(ONE_GIB) as f64;
    // f64::round rounds half away from zero, as Go's math.Round does; the value is never
    // negative, and `as` saturates like nothing in practice needs.
    (fraction * gpu_gib).round() as u64
}

/// The name go-nvlib's `MigProfileInfo.String()` gives a MIG device, with NVML's total GPU
/// memory in bytes (what the device plugin reads at run time).
///
/// `gi_slices` / `ci_slices` are the slice counts of the GPU-instance and compute-instance
/// profiles (go-nvlib's `G` and `C`); `kind` stands for go-nvlib's attributes.
pub fn device_plugin_name_from_bytes(
    gpu_memory_bytes: u64,
    profile_memory_mib: u64,
    gi_slices: u8,
    ci_slices: u8,
    kind: ProfileKind,
) -> String {
    let gb = device_plugin_memory_gb(gpu_memory_bytes, profile_memory_mib);
    let suffix = attribute_suffix(kind);
    if ci_slices == gi_slices {
        format!("{gi_slices}g.{gb}gb{suffix}")
    } else {
        format!("{ci_slices}c.{gi_slices}g.{gb}gb{suffix}")
    }
}

/// [`device_plugin_name_from_bytes`] with the GPU memory in MiB, as the catalog records it
/// (`memory_mib` of a model: NVML's total as `nvidia-smi` prints it). The bytes are taken as
/// `gpu_memory_mib * 2^20`; where NVML's total is not a whole number of MiB the true total is
/// up to 1 MiB larger, which only matters when `gpu_memory_mib` is an exact multiple of 1024
/// (go-nvlib rounds the GiB up) or a fraction lands exactly on an eighth.
///
/// Examples: `device_plugin_name(40960, 4864, 1, 1, ProfileKind::Standard)` is `1g.5gb`
/// (A100-40GB); `device_plugin_name(40960, 19968, 3, 1, ProfileKind::Standard)` is
/// `1c.3g.20gb`.
pub fn device_plugin_name(
    gpu_memory_mib: u64,
    profile_memory_mib: u64,
    gi_slices: u8,
    ci_slices: u8,
    kind: ProfileKind,
) -> String {
    device_plugin_name_from_bytes(
        gpu_memory_mib.saturating_mul(ONE_MIB),
        profile_memory_mib,
        gi_slices,
        ci_slices,
        kind,
    )
}

/// GPU-instance slices and attribute kind go-nvlib's `NewMigProfile` derives from an
/// `NVML_GPU_INSTANCE_PROFILE_*` value (the catalog's `nvml_profile_index`), or `None` for a
/// value go-nvlib rejects ("invalid GPU Instance Profile ID"; e.g. `3_SLICE_GFX` = 17, which
/// nvml.h has but go-nvlib does not map).
pub fn nvlib_gpu_instance_profile(nvml_profile_index: u32) -> Option<(u8, ProfileKind)> {
    use ProfileKind::{AllMediaExtensions, Graphics, MediaExtensions, NoMediaExtensions, Standard};
    // Values from nvml.h (go-nvml pkg/nvml/const.go): 1_SLICE=0, 2_SLICE=1, 3_SLICE=2,
    // 4_SLICE=3, 7_SLICE=4, 8_SLICE=5, 6_SLICE=6, 1_SLICE_REV1=7, 2_SLICE_REV1=8,
    // 1_SLICE_REV2=9, 1_SLICE_GFX=10, 2_SLICE_GFX=11, 4_SLICE_GFX=12, 1_SLICE_NO_ME=13,
    // 2_SLICE_NO_ME=14, 1_SLICE_ALL_ME=15, 2_SLICE_ALL_ME=16.
    Some(match nvml_profile_index {
        0 | 9 => (1, Standard),
        7 => (1, MediaExtensions),
        10 => (1, Graphics),
        13 => (1, NoMediaExtensions),
        15 => (1, AllMediaExtensions),
        1 => (2, Standard),
        8 => (2, MediaExtensions),
        11 => (2, Graphics),
        14 => (2, NoMediaExtensions),
        16 => (2, AllMediaExtensions),
        2 => (3, Standard),
        3 => (4, Standard),
        12 => (4, Graphics),
        6 => (6, Standard),
        4 => (7, Standard),
        5 => (8, Standard),
        _ => return None,
    })
}

/// `+me`, `+me.all`, `+gfx`, `-me` or nothing, as `MigProfileInfo.String` appends them.
fn attribute_suffix(kind: ProfileKind) -> &'static str {
    match kind {
        ProfileKind::Standard => "",
        ProfileKind::MediaExtensions => "+me",
        ProfileKind::AllMediaExtensions => "+me.all",
        ProfileKind::NoMediaExtensions => "-me",
        ProfileKind::Graphics => "+gfx",
        // nvlib_gpu_instance_profile never yields it: the whole GPU has no NVML profile.
        ProfileKind::Whole => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::file::CatalogFile;
    use crate::catalog::BUILTIN_YAML;
    use ProfileKind::{AllMediaExtensions, Graphics, MediaExtensions, NoMediaExtensions, Standard};

    /// Known names, each from public material (transcribed here; tests read no files).
    #[test]
    fn known_public_examples() {
        let cases: &[(&str, u64, u64, u8, u8, ProfileKind, &str)] = &[
            // A100-40GB: go-nvml pkg/nvml/mock/gpus/a100.go (A100-SXM4-40GB MemoryMB 40960,
            // GPU_INSTANCE_PROFILE_1_SLICE MemorySizeMB 4864); MIG user guide name 1g.5gb.
            ("A100-40GB 1g.5gb", 40960, 4864, 1, 1, Standard, "1g.5gb"),
            // Same mock: 7_SLICE MemorySizeMB 40192 -> 7g.40gb.
            ("A100-40GB 7g.40gb", 40960, 40192, 7, 7, Standard, "7g.40gb"),
            // A100-80GB: nvidia-smi 81920 MiB; lgip 1g.10gb 9.50 GiB = 9728 MiB.
            ("A100-80GB 1g.10gb", 81920, 9728, 1, 1, Standard, "1g.10gb"),
            // A100-80GB whose driver calls the full profile 7g.79gb (lgip 79.00 GiB = 80896 MiB):
            // the device plugin still serves nvidia.com/mig-7g.80gb (nebuly-ai/nos#51 log,
            // "Starting GRPC server for 'nvidia.com/mig-7g.80gb'"; gpu-operator#351).
            ("A100-80GB 7g.79gb driver name", 81920, 80896, 7, 7, Standard, "7g.80gb"),
            // H100-80GB: nvidia-smi 81559 MiB (MIG guide MPS example); lgip 1g.10gb 9.75 GiB.
            ("H100-80GB 1g.10gb", 81559, 9984, 1, 1, Standard, "1g.10gb"),
            // H100-80GB 3g.40gb: MIG guide nvidia-smi shows 40448 MiB for a 3g.40gb device.
            ("H100-80GB 3g.40gb", 81559, 40448, 3, 3, Standard, "3g.40gb"),
            // H200: nvidia-smi 143771 MiB; lgip 1g.18gb 16.00 GiB (mig-parted#120).
            ("H200 1g.18gb", 143771, 16384, 1, 1, Standard, "1g.18gb"),
            // H200 7g.141gb: lgip 139.75 GiB (mig-parted#120).
            ("H200 7g.141gb", 143771, 143104, 7, 7, Standard, "7g.141gb"),
            // GH200 144G HBM3e: nvidia-smi 146831 MiB (driver 580.173.02); lgip 1g.18gb
            // 17.50 GiB (mig-parted#139).
            ("GH200-144GB 1g.18gb", 146831, 17920, 1, 1, Standard, "1g.18gb"),
            // H100 96GB on GH200 480GB: nvidia-smi 97871 MiB; lgip 1g.12gb 11.00 GiB.
            ("H100-96GB 1g.12gb", 97871, 11264, 1, 1, Standard, "1g.12gb"),
            // A30: 24576 MiB (A30 notes, driver 535); lgip 1g.6gb 5.81 GiB = 5952 MiB.
            ("A30 1g.6gb", 24576, 5952, 1, 1, Standard, "1g.6gb"),
            ("A30 1g.6gb+me", 24576, 5952, 1, 1, MediaExtensions, "1g.6gb+me"),
            // MIG user guide, "MIG Device Names": a 3g.20gb GPU instance of an A100-40GB split
            // into compute instances is 1c.3g.20gb / 2c.3g.20gb.
            ("A100-40GB 1c.3g.20gb", 40960, 19968, 3, 1, Standard, "1c.3g.20gb"),
            ("A100-40GB 2c.3g.20gb", 40960, 19968, 3, 2, Standard, "2c.3g.20gb"),
            // go-nvlib mig_profile.go comment: "1c.2g.10gb" (A100-40GB 2g.10gb, 9856 MiB).
            ("A100-40GB 1c.2g.10gb", 40960, 9856, 2, 1, Standard, "1c.2g.10gb"),
            // The same on an A100-80GB 2g.20gb (lgip 19.50 GiB = 19968 MiB; the MIG guide says
            // A100-80GB names follow the memory proportion: 2g.20gb): 1c.2g.20gb.
            ("A100-80GB 1c.2g.20gb", 81920, 19968, 2, 1, Standard, "1c.2g.20gb"),
            // RTX PRO 6000 Blackwell Server Edition: nvidia-smi 97887 MiB; lgip 23.62 GiB and
            // 47.38 GiB rows (MIG guide table names 1g.24gb+me.all, 1g.24gb-me, 2g.48gb+gfx).
            ("RTX PRO 6000 1g.24gb+me.all", 97887, 24192, 1, 1, AllMediaExtensions, "1g.24gb+me.all"),
            ("RTX PRO 6000 1g.24gb-me", 97887, 24192, 1, 1, NoMediaExtensions, "1g.24gb-me"),
            ("RTX PRO 6000 2g.48gb+gfx", 97887, 48512, 2, 2, Graphics, "2g.48gb+gfx"),
            // B200: nvidia-smi 183359 MiB; lgip 1g.23gb 22.00 GiB (mig-parted#166).
            ("B200 1g.23gb", 183359, 22528, 1, 1, Standard, "1g.23gb"),
        ];
        for &(what, gpu, mib, g, c, kind, want) in cases {
            assert_eq!(device_plugin_name(gpu, mib, g, c, kind), want, "{what}");
        }
    }

    /// go-nvlib's own `TestGetMigMemorySizeGB` (pkg/nvlib/device/mig_profile_test.go),
    /// transcribed: for 24, 40 and 80 GiB GPUs and every profile size in steps of 1/32 GiB,
    /// the result is the smallest multiple of an eighth of the GPU (in whole GiB, truncated)
    /// that holds the profile.
    #[test]
    fn go_nvlib_memory_size_sweep() {
        for total in [24 * ONE_GIB, 40 * ONE_GIB, 80 * ONE_GIB] {
            let slice = total / 8;
            let step = ONE_GIB / 32;
            let mut size = step;
            while size <= total {
                let mut want = None;
                let mut j = slice;
                while j <= total {
                    if size <= j {
                        want = Some(j / ONE_GIB);
                        break;
                    }
                    j += slice;
                }
                assert_eq!(
                    Some(device_plugin_memory_gb(total, size / ONE_MIB)),
                    want,
                    "total {total} profile {} MiB",
                    size / ONE_MIB
                );
                size += step;
            }
        }
    }

    #[test]
    fn rounding_follows_go() {
        // 186 GiB GPU (GB200, 189471 MiB): 2/8 * 186 = 46.5 rounds half away from zero to 47.
        assert_eq!(device_plugin_memory_gb(189471 * ONE_MIB, 46592), 47);
        // The GiB of the GPU is rounded up: one byte over 40 GiB counts as 41 GiB.
        assert_eq!(device_plugin_memory_gb(40 * ONE_GIB, 19968), 20);
        assert_eq!(device_plugin_memory_gb(40 * ONE_GIB + 1, 19968), 21);
        // A fraction just over an eighth rounds up to the next eighth.
        assert_eq!(device_plugin_memory_gb(80 * ONE_GIB, 10241), 20);
        assert_eq!(device_plugin_memory_gb(0, 1024), 0);
    }

    #[test]
    fn gpu_instance_profiles_as_go_nvlib_maps_them() {
        assert_eq!(nvlib_gpu_instance_profile(0), Some((1, Standard)));
        assert_eq!(nvlib_gpu_instance_profile(9), Some((1, Standard)), "1_SLICE_REV2 has no attribute");
        assert_eq!(nvlib_gpu_instance_profile(7), Some((1, MediaExtensions)));
        assert_eq!(nvlib_gpu_instance_profile(16), Some((2, AllMediaExtensions)));
        assert_eq!(nvlib_gpu_instance_profile(14), Some((2, NoMediaExtensions)));
        assert_eq!(nvlib_gpu_instance_profile(12), Some((4, Graphics)));
        assert_eq!(nvlib_gpu_instance_profile(4), Some((7, Standard)));
        assert_eq!(nvlib_gpu_instance_profile(17), None, "3_SLICE_GFX is not mapped by go-nvlib");
        assert_eq!(nvlib_gpu_instance_profile(18), None);
    }

    /// Every profile of the built-in file records `device_plugin_name`, and it is what the
    /// formula gives for the file's own memory values (a recorded name is not re-derived when
    /// the file is loaded, so this checks the raw file, not the loaded catalog).
    #[test]
    fn builtin_file_records_the_advertised_name_of_every_profile() {
        let file: CatalogFile = match serde_saphyr::from_str(BUILTIN_YAML) {
            Ok(file) => file,
            Err(e) => panic!("built-in catalog does not parse: {e}"),
        };
        let mut checked = 0;
        for model in &file.models {
            let gpu = model.memory_mib.unwrap_or_else(|| panic!("{}: no memory_mib", model.key));
            for p in &model.profiles {
                let index = u32::try_from(p.nvml_profile_index).unwrap_or(u32::MAX);
                let (g, kind) = nvlib_gpu_instance_profile(index)
                    .unwrap_or_else(|| panic!("{} {}: index {index}", model.key, p.name));
                let want = device_plugin_name(gpu as u64, p.memory_mib as u64, g, g, kind);
                assert_eq!(p.device_plugin_name.as_deref(), Some(want.as_str()), "{} {}", model.key, p.name);
                checked += 1;
            }
        }
        assert!(checked > 80, "only {checked} profiles checked");
    }
}
