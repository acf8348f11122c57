//! The names NVIDIA's device plugin advertises (`nvidia.com/mig-<name>`), checked against the
//! built-in catalog's own memory values, and the memory values checked against each other.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use geometer_solver::catalog::{
    device_plugin_memory_gb, device_plugin_name, nvlib_gpu_instance_profile, Catalog, GpuModel,
};

fn model(query: &str) -> &'static GpuModel {
    Catalog::builtin().find(query).unwrap_or_else(|| panic!("{query} not found"))
}

/// Every model and profile: the recorded name is go-nvlib's `MigProfile.String()` of the
/// profile's `memory_mib` over the model's `memory_mib`, with G and the attribute taken from
/// the NVML profile index as go-nvlib takes them (and agreeing with the catalog's own
/// `compute_slices` and name suffix).
#[test]
fn every_recorded_device_plugin_name_is_what_go_nvlib_computes() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for m in Catalog::builtin().models() {
        let gpu = m.memory_mib.unwrap_or_else(|| panic!("{}: no memory_mib to compute names from", m.key));
        for p in m.mig_profiles().map(|id| &m.profiles[id]) {
            let (g, kind) = nvlib_gpu_instance_profile(p.nvml_profile_index).unwrap_or_else(|| {
                panic!("{} {}: go-nvlib rejects index {}", m.key, p.name, p.nvml_profile_index)
            });
            assert_eq!(g, p.compute_slices, "{} {}: go-nvlib's G", m.key, p.name);
            assert_eq!(kind, p.kind, "{} {}: go-nvlib's attribute", m.key, p.name);
            let want = device_plugin_name(gpu, p.memory_mib, g, g, kind);
            if p.device_plugin_name != want {
                wrong.push(format!(
                    "{} {}: recorded {} but go-nvlib gives {want}",
                    m.key, p.name, p.device_plugin_name
                ));
            }
            assert_eq!(p.computed_device_plugin_name(gpu).as_deref(), Some(want.as_str()));
            checked += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked > 80, "only {checked} profiles");
}

/// No profile holds as much memory as its GPU; memory grows with the memory slices a profile
/// covers (equal slices, equal memory) and never shrinks with more compute slices; and each
/// profile's memory share, rounded up to eighths as go-nvlib rounds it, is its share of the
/// placement grid (what makes `<G>g.<X>gb` names line up with the slices).
#[test]
fn memory_values_are_consistent_within_every_model() {
    let mut wrong = Vec::new();
    for m in Catalog::builtin().models() {
        let gpu = m.memory_mib.unwrap();
        for p in m.mig_profiles().map(|id| &m.profiles[id]) {
            if p.memory_mib >= gpu {
                wrong.push(format!("{} {}: {} MiB, GPU has {gpu}", m.key, p.name, p.memory_mib));
            }
            let eighths = (p.memory_mib * 8).div_ceil(gpu);
            if eighths * m.placement_units as u64 != 8 * p.size as u64 {
                wrong.push(format!(
                    "{} {}: {} MiB is {eighths}/8 of the GPU rounded up, but the profile covers {}/{} units",
                    m.key, p.name, p.memory_mib, p.size, m.placement_units
                ));
            }
            for q in m.mig_profiles().map(|id| &m.profiles[id]) {
                let bad = (p.size < q.size && p.memory_mib >= q.memory_mib)
                    || (p.size == q.size && p.memory_mib != q.memory_mib)
                    || (p.compute_slices < q.compute_slices && p.memory_mib > q.memory_mib);
                if bad {
                    wrong.push(format!(
                        "{}: {} ({} units, {}c, {} MiB) vs {} ({} units, {}c, {} MiB)",
                        m.key,
                        p.name,
                        p.size,
                        p.compute_slices,
                        p.memory_mib,
                        q.name,
                        q.size,
                        q.compute_slices,
                        q.memory_mib
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The controller maps pod requests through these names, so a model may not advertise one
/// name for two profiles, and the lookup accepts the forms a pod request uses.
#[test]
fn advertised_names_are_unique_and_found_as_pods_request_them() {
    for m in Catalog::builtin().models() {
        for (id, p) in m.profiles.iter().enumerate() {
            assert_eq!(
                m.profile_by_device_plugin_name(&p.device_plugin_name),
                Some(id),
                "{} {}",
                m.key,
                p.name
            );
        }
    }
    let a100 = model("A100-80GB");
    let full = a100.profile("7g.80gb");
    assert!(full.is_some());
    assert_eq!(a100.profile_by_device_plugin_name("nvidia.com/mig-7g.80gb"), full);
    assert_eq!(a100.profile_by_device_plugin_name("mig-7g.80gb"), full);
    assert_eq!(a100.profile_by_device_plugin_name("7G.80GB"), full);
    // Drivers that call it 7g.79gb still get 7g.80gb advertised (nebuly-ai/nos#51): the alias
    // names the same profile, but it is not what the device plugin serves.
    assert_eq!(a100.profile("7g.79gb"), full);
    assert_eq!(a100.profile_by_device_plugin_name("7g.79gb"), None);
    assert_eq!(a100.profile_by_device_plugin_name("nvidia.com/gpu"), Some(a100.whole()));
}

/// Today every canonical profile name is also the advertised one; aliases (older drivers'
/// names) never are. If a catalog change makes a name differ, this list says so.
#[test]
fn canonical_names_are_the_advertised_names() {
    let mut differ = Vec::new();
    for m in Catalog::builtin().models() {
        for p in m.mig_profiles().map(|id| &m.profiles[id]) {
            if p.name != p.device_plugin_name {
                differ.push(format!("{} {} -> {}", m.key, p.name, p.device_plugin_name));
            }
            for alias in &p.aliases {
                assert_ne!(alias, &p.device_plugin_name, "{} {}", m.key, p.name);
            }
        }
    }
    assert_eq!(differ, Vec::<String>::new());
}

#[test]
fn b200_and_gb200_values_that_used_to_exceed_the_gpu() {
    let b200 = model("B200");
    let p = |m: &GpuModel, name: &str| m.profile_info(m.profile(name).unwrap()).clone();
    assert_eq!(b200.memory_mib, Some(183359));
    assert_eq!(p(b200, "7g.180gb").memory_mib, 182784, "178.50 GiB per lgip");
    assert_eq!(p(b200, "3g.90gb").memory_mib, 91136, "89.00 GiB per lgip");
    let gb200 = model("GB200");
    assert_eq!(p(gb200, "7g.186gb").memory_mib, 188672);
    // GB200's 189471 MiB is 185.03 GiB: rounded up to 186, so 2/8 is 46.5 -> 47.
    assert_eq!(device_plugin_memory_gb(189471 * 1024 * 1024, 46592), 47);
    assert_eq!(p(gb200, "2g.47gb").device_plugin_name, "2g.47gb");
}

const USER_FILE: &str = r#"
models:
- key: X100-16GB
  device_ids: ['0x1ABC10DE']
  memory_mib: 16384
  placement_units: 4
  compute_slices: 4
  profiles:
  - {name: 1g.4gb, compute_slices: 1, memory_mib: 2000, starts: [0, 1, 2, 3], size: 1, max_instances: 4,
     nvml_profile_index: 0}
  - {name: 1g.4gb+me, compute_slices: 1, memory_mib: 2000, starts: [0], size: 1, max_instances: 1,
     nvml_profile_index: 7}
  - {name: 2g.8gb, compute_slices: 2, memory_mib: 8000, starts: [0, 2], size: 2, max_instances: 2,
     nvml_profile_index: 1, device_plugin_name: 2g.9gb}
- key: Y100
  device_ids: ['0x1ABD10DE']
  placement_units: 2
  compute_slices: 2
  profiles:
  - {name: 1g.4gb, compute_slices: 1, memory_mib: 4000, starts: [0, 1], size: 1, max_instances: 2,
     nvml_profile_index: 0}
"#;

#[test]
fn a_user_file_may_leave_the_name_out() {
    let cat = Catalog::from_yaml(USER_FILE).unwrap();
    let x = cat.find("X100-16GB").unwrap();
    let name = |m: &GpuModel, p: &str| m.profile_info(m.profile(p).unwrap()).device_plugin_name.clone();
    assert_eq!(name(x, "1g.4gb"), "1g.2gb", "computed: 2000 MiB is under 1/8 of a 16 GiB GPU");
    assert_eq!(name(x, "1g.4gb+me"), "1g.2gb+me");
    assert_eq!(name(x, "2g.8gb"), "2g.9gb", "a recorded name is kept");
    let y = cat.find("Y100").unwrap();
    assert_eq!(name(y, "1g.4gb"), "1g.4gb", "no GPU memory to compute from: the profile's name");
    // The file form writes the name back, so `catalog show -o yaml` round-trips.
    let again =
        Catalog::from_yaml(&geometer_solver::catalog::CatalogFile::from_models(&[x, y], &[]).to_yaml())
            .unwrap();
    assert_eq!(again.models(), cat.models());
}

#[test]
fn a_bad_recorded_name_is_rejected_with_its_place() {
    let text = USER_FILE.replace("device_plugin_name: 2g.9gb", "device_plugin_name: \"2g 9gb\"");
    let err = Catalog::from_yaml(&text).unwrap_err().to_string();
    for part in ["X100-16GB", "2g.8gb", "device_plugin_name", "2g 9gb"] {
        assert!(err.contains(part), "{err} lacks {part}");
    }
}
