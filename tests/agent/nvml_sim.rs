//! The simulated NVML follows the same rules as real MIG GPUs (placements, caps, in-use
//! instances) and can fail any call on purpose.

use geometer_agent::nvml::sim::{Fault, MigModeSwitch, SimGpuOptions, SimNvml};
use geometer_agent::nvml::{NvmlBackend, NvmlCall, NvmlError, NvmlProfileId, Placement, Reason};
use geometer_api::PlacedInstance;

/// H100-80GB driver profile ids (`nvidia-smi mig -lgip`).
const P_1G10: NvmlProfileId = NvmlProfileId(19);
const P_3G40: NvmlProfileId = NvmlProfileId(9);
const P_7G80: NvmlProfileId = NvmlProfileId(0);

fn h100() -> SimNvml {
    let sim = SimNvml::new("node-a");
    assert_eq!(sim.add_gpu("H100-80GB").unwrap(), 0);
    sim
}

fn at(start: u32, size: u32) -> Placement {
    Placement { start, size }
}

#[test]
fn reports_a_catalog_gpu_with_its_profiles_and_placements() {
    let sim = h100();
    let devices = sim.devices().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].pci_device_id, 0x2330_10DE);
    assert!(devices[0].uuid.starts_with("GPU-"));
    assert!(devices[0].mig_mode.unwrap().current);
    let profiles = sim.gpu_instance_profiles(0).unwrap();
    let p3g = profiles.iter().find(|p| p.id == P_3G40).expect("3g.40gb offered");
    assert_eq!((p3g.name.as_deref(), p3g.slice_count, p3g.instance_count), (Some("3g.40gb"), 3, 2));
    assert_eq!(sim.possible_placements(0, P_3G40).unwrap(), [at(0, 4), at(4, 4)]);
    assert_eq!(
        sim.possible_placements(0, NvmlProfileId(4242)).unwrap_err().reason(),
        Some(&Reason::InvalidArgument)
    );
}

#[test]
fn enforces_placements_overlap_and_caps() {
    let sim = h100();
    let gi = sim.create_gpu_instance(0, P_3G40, at(4, 4)).unwrap();
    assert_eq!(gi.placement, at(4, 4));
    // Not a legal start for 3g.40gb.
    let err = sim.create_gpu_instance(0, P_3G40, at(2, 4)).unwrap_err();
    assert_eq!(err.reason(), Some(&Reason::InvalidArgument));
    assert!(err.to_string().contains("profile id 9 at placement 2:4"), "{err}");
    // Overlaps the 3g.40gb at 4.
    let err = sim.create_gpu_instance(0, P_1G10, at(5, 1)).unwrap_err();
    assert_eq!(err.reason(), Some(&Reason::InsufficientResources));
    // The whole GPU no longer fits.
    assert_eq!(
        sim.create_gpu_instance(0, P_7G80, at(0, 8)).unwrap_err().reason(),
        Some(&Reason::InsufficientResources)
    );
    for start in 0..4 {
        sim.create_gpu_instance(0, P_1G10, at(start, 1)).unwrap();
    }
    assert_eq!(
        sim.geometry(0).unwrap(),
        [
            PlacedInstance::new("1g.10gb", 0),
            PlacedInstance::new("1g.10gb", 1),
            PlacedInstance::new("1g.10gb", 2),
            PlacedInstance::new("1g.10gb", 3),
            PlacedInstance::new("3g.40gb", 4),
        ]
    );
    // The catalog's compute-slice budget (7) is full: 4 x 1 + 3.
    assert!(sim.gpu_instances(0).unwrap().len() == 5);
}

#[test]
fn instance_caps_come_from_nvml() {
    let sim = h100();
    sim.override_profile(0, "1g.10gb", |r| r.info.instance_count = 2).unwrap();
    sim.create_gpu_instance(0, P_1G10, at(0, 1)).unwrap();
    sim.create_gpu_instance(0, P_1G10, at(1, 1)).unwrap();
    let err = sim.create_gpu_instance(0, P_1G10, at(2, 1)).unwrap_err();
    assert_eq!(err.reason(), Some(&Reason::InsufficientResources));
}

#[test]
fn instances_in_use_cannot_be_destroyed() {
    let sim = h100();
    let gi = sim.create_gpu_instance(0, P_3G40, at(0, 4)).unwrap();
    let ci = sim.create_compute_instance(0, gi.id).unwrap();
    assert_eq!(sim.compute_instances(0, gi.id).unwrap(), [ci]);
    let err = sim.destroy_gpu_instance(0, gi.id).unwrap_err();
    assert!(err.is_in_use(), "a GPU instance with a compute instance must not go: {err}");
    let uuid = sim.mig_devices(0).unwrap()[0].uuid.clone();
    let pid = sim.start_process(0, &uuid).unwrap();
    assert_eq!(sim.processes(0, &uuid).unwrap()[0].pid, pid);
    assert!(sim.destroy_compute_instance(0, gi.id, ci.id).unwrap_err().is_in_use());
    assert!(sim.set_mig_mode(0, false).unwrap_err().is_in_use());
    assert!(sim.stop_process(pid));
    sim.destroy_compute_instance(0, gi.id, ci.id).unwrap();
    assert!(sim.mig_devices(0).unwrap().is_empty());
    assert_eq!(sim.gpu_instances_without_compute(0).unwrap(), [gi.id]);
    sim.destroy_gpu_instance(0, gi.id).unwrap();
    assert!(sim.gpu_instances(0).unwrap().is_empty());
    assert_eq!(sim.destroy_gpu_instance(0, gi.id).unwrap_err().reason(), Some(&Reason::NotFound));
}

#[test]
fn uuids_are_deterministic_per_node_and_new_for_a_recreated_device() {
    let a = h100();
    let b = h100();
    let other = SimNvml::new("node-b");
    other.add_gpu("H100-80GB").unwrap();
    assert_eq!(a.devices().unwrap()[0].uuid, b.devices().unwrap()[0].uuid);
    assert_ne!(a.devices().unwrap()[0].uuid, other.devices().unwrap()[0].uuid);
    let first = a.set_geometry(0, &[("7g.80gb", 0)]).unwrap()[0].clone();
    assert_eq!(first.uuid, b.set_geometry(0, &[("7g.80gb", 0)]).unwrap()[0].uuid);
    a.destroy_compute_instance(0, first.gpu_instance_id, first.compute_instance_id).unwrap();
    a.create_compute_instance(0, first.gpu_instance_id).unwrap();
    let second = a.mig_devices(0).unwrap()[0].uuid.clone();
    assert!(second.starts_with("MIG-"));
    assert_ne!(second, first.uuid, "the device plugin must see a re-created device as new");
}

#[test]
fn on_ampere_a_mig_mode_change_is_accepted_but_stays_pending_until_a_reset() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu_with("A100-40GB", SimGpuOptions::MIG_OFF).unwrap();
    assert!(sim.gpu_instance_profiles(0).unwrap().is_empty(), "profiles are only reported in MIG mode");
    assert_eq!(
        sim.create_gpu_instance(0, NvmlProfileId(0), at(0, 8)).unwrap_err().reason(),
        Some(&Reason::NotSupported)
    );
    // nvmlDeviceSetMigMode succeeds; the activation status carries the outcome. The caller's
    // own NVML session holds the GPU, so the reset Ampere needs cannot happen.
    let change = sim.set_mig_mode(0, true).unwrap();
    assert!(!change.mode.current && change.mode.pending);
    assert_eq!(change.activation, Some(Reason::InUse));
    sim.reset_gpu(0).unwrap();
    assert!(sim.devices().unwrap()[0].mig_mode.unwrap().current);
    assert!(!sim.gpu_instance_profiles(0).unwrap().is_empty());
}

#[test]
fn on_hopper_a_mig_mode_change_is_active_at_once_only_when_nothing_holds_the_gpu() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu_with("H100-80GB", SimGpuOptions::MIG_OFF).unwrap();
    let pid = sim.start_gpu_process(0).unwrap();
    assert_eq!(sim.gpu_processes(0).unwrap().iter().map(|p| p.pid).collect::<Vec<_>>(), [pid]);
    let held = sim.set_mig_mode(0, true).unwrap();
    assert_eq!((held.mode.current, held.mode.pending, held.activation), (false, true, Some(Reason::InUse)));
    sim.stop_process(pid);
    sim.open_client(0, "dcgm-exporter").unwrap();
    assert_eq!(
        sim.set_mig_mode(0, true).unwrap().activation,
        Some(Reason::InUse),
        "a client without processes"
    );
    sim.close_client(0, "dcgm-exporter").unwrap();
    let idle = sim.set_mig_mode(0, true).unwrap();
    assert_eq!((idle.mode.current, idle.activation), (true, None));
}

#[test]
fn in_a_pass_through_vm_the_activation_status_says_a_reset_is_required() {
    let sim = SimNvml::new("node-a");
    let options = SimGpuOptions { mig_enabled: false, mig_mode_switch: MigModeSwitch::ResetRequired };
    sim.add_gpu_with("H100-80GB", options).unwrap();
    let change = sim.set_mig_mode(0, true).unwrap();
    assert_eq!((change.mode.current, change.activation), (false, Some(Reason::ResetRequired)));
}

#[test]
fn another_client_holding_the_gpu_refuses_destroys_with_no_process_on_it() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    let device = sim.set_geometry(0, &[("7g.80gb", 0)]).unwrap().remove(0);
    sim.open_client(0, "nv-hostengine").unwrap();
    assert!(sim.processes(0, &device.uuid).unwrap().is_empty());
    let refused = sim.destroy_compute_instance(0, device.gpu_instance_id, device.compute_instance_id);
    assert!(refused.unwrap_err().is_in_use());
    sim.close_client(0, "nv-hostengine").unwrap();
    sim.destroy_compute_instance(0, device.gpu_instance_id, device.compute_instance_id).unwrap();
    sim.destroy_gpu_instance(0, device.gpu_instance_id).unwrap();
}

#[test]
fn a_fault_fails_the_chosen_call_once_and_names_it() {
    let sim = h100();
    sim.inject(Fault::on(NvmlCall::CreateGpuInstance).nth(2).reason(Reason::GpuLost));
    sim.create_gpu_instance(0, P_1G10, at(0, 1)).unwrap();
    let err = sim.create_gpu_instance(0, P_1G10, at(1, 1)).unwrap_err();
    assert_eq!(
        err,
        NvmlError::CreateGpuInstance {
            gpu: 0,
            profile: P_1G10,
            placement: at(1, 1),
            reason: Reason::GpuLost
        }
    );
    assert_eq!(sim.geometry(0).unwrap().len(), 1, "a fault before the effect changes nothing");
    sim.create_gpu_instance(0, P_1G10, at(1, 1)).unwrap();
    let calls = sim.calls();
    assert_eq!(calls.iter().filter(|c| c.faulted).count(), 1);
    assert_eq!(calls[1].call, NvmlCall::CreateGpuInstance);
    assert!(calls[1].faulted);
}

#[test]
fn a_fault_after_the_effect_leaves_the_change_in_place() {
    let sim = h100();
    sim.inject(Fault::on(NvmlCall::CreateGpuInstance).after_effect());
    assert_eq!(
        sim.create_gpu_instance(0, P_3G40, at(0, 4)).unwrap_err(),
        NvmlError::CreateGpuInstance {
            gpu: 0,
            profile: P_3G40,
            placement: at(0, 4),
            reason: Reason::Injected
        }
    );
    assert_eq!(
        sim.geometry(0).unwrap(),
        [PlacedInstance::new("3g.40gb", 0)],
        "the reply was lost, not the change"
    );
    assert_eq!(
        sim.create_gpu_instance(0, P_3G40, at(0, 4)).unwrap_err().reason(),
        Some(&Reason::InsufficientResources)
    );
}

#[test]
fn faults_can_target_a_gpu_any_call_or_stay() {
    let sim = h100();
    sim.add_gpu("H100-80GB").unwrap();
    sim.inject(Fault::on(NvmlCall::GpuInstances).on_gpu(1).always());
    assert!(sim.gpu_instances(0).is_ok());
    for _ in 0..3 {
        assert_eq!(sim.gpu_instances(1).unwrap_err().reason(), Some(&Reason::Injected));
    }
    sim.clear_faults();
    assert!(sim.gpu_instances(1).is_ok());
    // The Nth call of any kind: the way a test walks a fault across every call of a scenario.
    let before = sim.call_count();
    sim.inject(Fault::any_call().nth(3));
    assert!(sim.devices().is_ok());
    assert!(sim.gpu_instance_profiles(0).is_ok());
    assert_eq!(
        sim.mig_devices(0).unwrap_err(),
        NvmlError::Gpu { gpu: 0, call: NvmlCall::MigDevices, reason: Reason::Injected }
    );
    assert!(sim.devices().is_ok());
    assert_eq!(sim.call_count(), before + 4);
}

#[test]
fn unknown_models_and_gpus_are_clear_errors() {
    let sim = SimNvml::new("node-a");
    let err = sim.add_gpu("GTX-1080").unwrap_err().to_string();
    assert!(err.contains("GTX-1080"), "{err}");
    assert_eq!(sim.gpu_instances(3).unwrap_err(), NvmlError::NoSuchGpu { gpu: 3, count: 0 });
    sim.add_gpu_without_mig("Tesla T4", 0x1EB8_10DE);
    assert_eq!(sim.devices().unwrap()[0].mig_mode, None);
}

/// With a state file, the GPUs outlive the process: another handle on the same file (another
/// process, or the same agent started again after SIGKILL) sees the instances and processes,
/// and a file written for other GPUs is refused with what to do.
#[test]
fn a_state_file_keeps_the_gpus_between_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpus.json");
    let agent = h100().with_state_file(&path).unwrap();
    let kubelet = h100().with_state_file(&path).unwrap();

    let gi = agent.create_gpu_instance(0, P_3G40, at(0, 4)).unwrap();
    let ci = agent.create_compute_instance(0, gi.id).unwrap();
    let device = kubelet.mig_devices(0).unwrap();
    assert_eq!(device.len(), 1, "the other process sees the new instance");
    let pid = kubelet.start_process(0, &device[0].uuid).unwrap();

    drop(agent);
    let restarted = h100().with_state_file(&path).unwrap();
    assert_eq!(restarted.geometry(0).unwrap(), vec![PlacedInstance::new("3g.40gb", 0)]);
    assert_eq!(restarted.processes(0, &device[0].uuid).unwrap().len(), 1, "the kubelet's process survives");
    assert!(kubelet.stop_process(pid));
    assert!(restarted.processes(0, &device[0].uuid).unwrap().is_empty());
    restarted.destroy_compute_instance(0, gi.id, ci.id).unwrap();
    restarted.destroy_gpu_instance(0, gi.id).unwrap();
    assert!(kubelet.geometry(0).unwrap().is_empty());

    let other = SimNvml::new("node-b");
    other.add_gpu("H100-80GB").unwrap();
    let wrong = other.with_state_file(&path).err().expect("a file of another node is refused");
    assert!(wrong.to_string().contains("another GPU"), "{wrong}");
}
