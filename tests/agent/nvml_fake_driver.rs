//! The real NVML backend against a stand-in for the driver's library (`fake_nvml/fake_nvml.c`,
//! built here with the C compiler HiGHS already needs), so that the raw calls, struct layouts and
//! return-code handling of `crates/agent/src/nvml/real` run without a GPU: the answers real
//! drivers give off the happy path (empty MIG slots answering INVALID_ARGUMENT, an unversioned
//! profile-info fallback, process lists that grow while read, success with a failed
//! activation, codes only NVML's own strings describe).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use geometer_agent::nvml::real::RealNvml;
use geometer_agent::nvml::{NvmlBackend, NvmlError, NvmlProfileId, Placement, Reason};
use geometer_agent::read_inventory;
use geometer_solver::catalog::Catalog;

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agent/fake_nvml/fake_nvml.c");

/// The fake library, compiled once per test run.
fn library() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-nvml");
        std::fs::create_dir_all(&out).unwrap();
        let lib = out.join("libnvidia-ml-fake.so");
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
            .arg(&lib)
            .arg(SOURCE)
            .status()
            .unwrap_or_else(|e| panic!("cannot run cc to build the fake NVML (make setup installs it): {e}"));
        assert!(status.success(), "cc could not build {SOURCE}");
        lib
    })
}

/// A driver of its own for one test: a copy of the library (so its state is not shared with
/// other tests), configured with `settings`.
struct Driver {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Driver {
    fn new(settings: &[(&str, i32)]) -> Driver {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(library(), &path).unwrap();
        let conf: String = settings.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        std::fs::write(dir.path().join("libnvidia-ml.so.1.conf"), conf).unwrap();
        Driver { _dir: dir, path }
    }

    fn open(&self) -> RealNvml {
        RealNvml::init_with_library(self.path.to_str().unwrap()).unwrap()
    }

    /// How often each counted NVML call was made, written by the library at nvmlShutdown
    /// (when the RealNvml is dropped).
    fn calls(&self) -> BTreeMap<String, u32> {
        let text = std::fs::read_to_string(self.path.with_extension("1.calls")).unwrap();
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(name, n)| (name.to_string(), n.parse().unwrap()))
            .collect()
    }
}

const INVALID_ARGUMENT: i32 = 2;
const NOT_FOUND: i32 = 6;
const RESET_REQUIRED: i32 = 16;
const OPERATING_SYSTEM: i32 = 17;
const IN_USE: i32 = 19;
const ARGUMENT_VERSION_MISMATCH: i32 = 25;

#[test]
fn the_gpu_its_profiles_and_instances_are_read_through_the_raw_calls() {
    let driver = Driver::new(&[]);
    let nvml = driver.open();
    assert_eq!(nvml.driver_version().unwrap(), "570.0-fake");
    let devices = nvml.devices().unwrap();
    assert_eq!(devices.len(), 1);
    let gpu = &devices[0];
    assert_eq!((gpu.uuid.as_str(), gpu.name.as_str()), ("GPU-fake-0", "NVIDIA H100 80GB HBM3"));
    assert_eq!(gpu.pci_device_id, 0x2330_10DE);
    assert_eq!(gpu.memory_total_bytes, Some(81559 << 20));
    assert!(gpu.mig_mode.is_some_and(|m| m.current));

    let profiles = nvml.gpu_instance_profiles(0).unwrap();
    let named: Vec<_> = profiles.iter().map(|p| (p.id.0, p.name.as_deref(), p.slice_count)).collect();
    assert_eq!(named, [(19, Some("1g.10gb"), 1), (0, Some("7g.80gb"), 7)]);
    let placements = nvml.possible_placements(0, NvmlProfileId(19)).unwrap();
    assert_eq!(placements.len(), 7);
    assert_eq!(nvml.possible_placements(0, NvmlProfileId(0)).unwrap(), [Placement { start: 0, size: 8 }]);

    let instances = nvml.gpu_instances(0).unwrap();
    let at: Vec<_> = instances.iter().map(|gi| (gi.id, gi.profile_id.0, gi.placement.start)).collect();
    assert_eq!(at, [(1, 19, 0), (2, 19, 1)]);
    let cis = nvml.compute_instances(0, 1).unwrap();
    assert_eq!(cis.len(), 1);
    assert_eq!((cis[0].id, cis[0].slice_count), (0, 1));
}

#[test]
fn empty_mig_device_slots_answering_invalid_argument_or_not_found_are_skipped() {
    for code in [INVALID_ARGUMENT, NOT_FOUND] {
        let nvml = Driver::new(&[("empty_slot", code)]).open();
        let migs = nvml.mig_devices(0).unwrap();
        let found: Vec<_> = migs.iter().map(|m| (m.index, m.gpu_instance_id, m.uuid.as_str())).collect();
        assert_eq!(found, [(0, 1, "MIG-fake-1-0"), (2, 2, "MIG-fake-2-0")], "empty slot answering {code}");
    }
}

#[test]
fn any_other_answer_for_a_slot_fails_the_reading_in_nvmls_own_words() {
    let nvml = Driver::new(&[("empty_slot", OPERATING_SYSTEM)]).open();
    let err = nvml.mig_devices(0).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("fake NVML: the operating system refused (NVML error code 17)"), "{text}");
}

#[test]
fn a_refused_versioned_profile_query_is_asked_again_unversioned() {
    for code in [INVALID_ARGUMENT, ARGUMENT_VERSION_MISMATCH] {
        let driver = Driver::new(&[("versioned_profile_info", code)]);
        let nvml = driver.open();
        let profiles = nvml.gpu_instance_profiles(0).unwrap();
        let ids: Vec<_> = profiles.iter().map(|p| (p.id.0, p.slice_count, p.memory_mib)).collect();
        assert_eq!(ids, [(19, 1, 9856), (0, 7, 80896)], "versioned call answering {code}");
        assert!(profiles.iter().all(|p| p.name.is_none()), "the unversioned struct has no name");
        drop(nvml);
        assert!(driver.calls()["nvmlDeviceGetGpuInstanceProfileInfo"] > 0);
    }
}

#[test]
fn a_process_list_that_grows_while_read_is_read_again_with_more_room() {
    let driver = Driver::new(&[("mig_processes", 3), ("process_growth", 2)]);
    let nvml = driver.open();
    let uuid = nvml.mig_devices(0).unwrap()[0].uuid.clone();
    let processes = nvml.processes(0, &uuid).unwrap();
    // Room for 8, then 2 x 25 = 50, then 2 x 151 = 302: the third read holds all 151.
    assert_eq!(processes.len(), 151);
    assert_eq!(processes[0].used_memory_bytes, Some(1 << 20));
    drop(nvml);
    assert_eq!(driver.calls()["nvmlDeviceGetComputeRunningProcesses_v3"], 3);
}

#[test]
fn a_process_list_that_keeps_growing_is_an_error_after_five_reads() {
    let driver = Driver::new(&[("mig_processes", 3), ("process_growth", 1000)]);
    let nvml = driver.open();
    let uuid = nvml.mig_devices(0).unwrap()[0].uuid.clone();
    let err = nvml.processes(0, &uuid).unwrap_err();
    assert!(err.to_string().contains("kept growing over 5 reads"), "{err}");
    drop(nvml);
    assert_eq!(driver.calls()["nvmlDeviceGetComputeRunningProcesses_v3"], 5);
}

#[test]
fn process_queries_find_their_mig_device_without_walking_the_slots_again() {
    let driver = Driver::new(&[]);
    let nvml = driver.open();
    let migs = nvml.mig_devices(0).unwrap();
    for mig in &migs {
        assert!(nvml.processes(0, &mig.uuid).unwrap().is_empty());
    }
    drop(nvml);
    // One walk of the 7 slots, then one lookup per device.
    assert_eq!(driver.calls()["nvmlDeviceGetMigDeviceHandleByIndex"], 7 + 2);
}

#[test]
fn whole_gpu_processes_are_read_from_the_gpu_handle() {
    let nvml = Driver::new(&[("gpu_processes", 2)]).open();
    let pids: Vec<_> = nvml.gpu_processes(0).unwrap().iter().map(|p| p.pid).collect();
    assert_eq!(pids, [1000, 1001]);
}

#[test]
fn a_mig_mode_change_that_succeeds_with_a_failed_activation_reports_it() {
    let nvml = Driver::new(&[("activation", RESET_REQUIRED)]).open();
    let change = nvml.set_mig_mode(0, false).unwrap();
    assert_eq!(change.activation, Some(Reason::ResetRequired));
    assert!(change.mode.current && !change.mode.pending, "{change:?}");

    let nvml = Driver::new(&[]).open();
    let change = nvml.set_mig_mode(0, false).unwrap();
    assert_eq!(change.activation, None);
    assert!(!change.mode.current && !change.mode.pending, "{change:?}");
}

#[test]
fn a_refused_destroy_says_why_in_the_agents_terms_or_nvmls() {
    let nvml = Driver::new(&[("destroy_gpu_instance", IN_USE)]).open();
    let err = nvml.destroy_gpu_instance(0, 2).unwrap_err();
    assert!(
        matches!(err, NvmlError::DestroyGpuInstance { gpu_instance: 2, reason: Reason::InUse, .. }),
        "{err:?}"
    );
    let nvml = Driver::new(&[("destroy_gpu_instance", OPERATING_SYSTEM)]).open();
    let text = nvml.destroy_gpu_instance(0, 2).unwrap_err().to_string();
    assert!(text.contains("fake NVML: the operating system refused"), "{text}");
}

#[test]
fn repartitioning_through_the_raw_calls_destroys_and_creates_instances() {
    let nvml = Driver::new(&[]).open();
    let err = nvml.destroy_gpu_instance(0, 2).unwrap_err();
    assert!(matches!(err, NvmlError::DestroyGpuInstance { reason: Reason::InUse, .. }), "{err:?}");
    nvml.destroy_compute_instance(0, 2, 0).unwrap();
    nvml.destroy_gpu_instance(0, 2).unwrap();

    let taken = nvml.create_gpu_instance(0, NvmlProfileId(19), Placement { start: 0, size: 1 }).unwrap_err();
    assert!(matches!(taken, NvmlError::CreateGpuInstance { reason: Reason::InsufficientResources, .. }));
    let gi = nvml.create_gpu_instance(0, NvmlProfileId(19), Placement { start: 3, size: 1 }).unwrap();
    assert_eq!((gi.profile_id.0, gi.placement.start), (19, 3));
    let ci = nvml.create_compute_instance(0, gi.id).unwrap();
    assert_eq!((ci.gpu_instance_id, ci.slice_count), (gi.id, 1));
    let migs: Vec<_> = nvml.mig_devices(0).unwrap().iter().map(|m| m.gpu_instance_id).collect();
    assert_eq!(migs, [1, gi.id]);
}

#[test]
fn the_agents_inventory_reads_the_fake_driver_like_a_real_one() {
    let nvml = Driver::new(&[("mig_processes", 1)]).open();
    let inventory = read_inventory(&nvml, Catalog::builtin(), &[]).unwrap();
    let gpu = &inventory.gpus[0];
    let instances: Vec<_> =
        gpu.instances.iter().map(|i| (i.profile.as_str(), i.start, i.processes)).collect();
    assert_eq!(instances, [("1g.10gb", 0, 1), ("1g.10gb", 1, 0)]);
}
