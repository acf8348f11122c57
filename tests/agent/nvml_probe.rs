//! `geometer agent probe`: what NVML reports, compared with the catalog.

use std::process::Command;

use geometer::cli::agent::render;
use geometer_agent::nvml::sim::SimNvml;
use geometer_agent::probe;
use geometer_solver::catalog::Catalog;

#[test]
fn probe_of_a_simulated_node_lists_profiles_instances_and_disagreements() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu("H100-80GB").unwrap();
    sim.add_gpu_without_mig("Tesla T4", 0x1EB8_10DE);
    let devices = sim.set_geometry(0, &[("3g.40gb", 0)]).unwrap();
    sim.override_profile(0, "7g.80gb", |r| r.info.memory_mib = 80000).unwrap();
    let calls_before = sim.calls().iter().filter(|c| c.call.mutates()).count();

    let report = probe(&sim, Catalog::builtin()).unwrap();
    assert_eq!(
        sim.calls().iter().filter(|c| c.call.mutates()).count(),
        calls_before,
        "the probe changed the GPU"
    );
    assert_eq!(report.gpus[0].model.as_deref(), Some("H100-80GB"));
    assert_eq!(report.gpus[0].instances[0].mig_device.as_ref().unwrap().uuid, devices[0].uuid);
    assert_eq!(report.disagreements().count(), 1);

    let text = render(&report);
    assert!(text.contains("GPU 0: NVIDIA H100"), "{text}");
    assert!(text.contains("0x233010DE"), "{text}");
    assert!(text.contains("3g.40gb") && text.contains("0,4 (size 4)"), "{text}");
    assert!(text.contains(&devices[0].uuid), "{text}");
    assert!(
        text.contains("catalog disagreements (NVML wins)")
            && text.contains("81152")
            && text.contains("80000"),
        "{text}"
    );
    assert!(text.contains("GPU 1: Tesla T4") && text.contains("MIG mode: not supported"), "{text}");
    // The names the device plugin will advertise, from NVML's memory figures.
    assert_eq!(report.gpus[0].advertised_names["3g.40gb"], "nvidia.com/mig-3g.40gb");
    assert!(
        text.contains("advertised by the device plugin as") && text.contains("nvidia.com/mig-1g.10gb"),
        "{text}"
    );
}

#[test]
fn probe_without_mig_mode_says_why_it_shows_no_profiles() {
    let sim = SimNvml::new("node-a");
    sim.add_gpu_with("A100-80GB", geometer_agent::nvml::sim::SimGpuOptions::MIG_OFF).unwrap();
    let text = render(&probe(&sim, Catalog::builtin()).unwrap());
    assert!(text.contains("MIG mode: disabled") && text.contains("never changes it"), "{text}");
}

#[test]
fn probe_command_without_a_driver_exits_non_zero_with_a_clear_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_geometer"))
        .args(["agent", "probe", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no NVIDIA driver (/nonexistent/libnvidia-ml.so.1 not found)"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
