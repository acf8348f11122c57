//! `geometer migparted import|export` on configs in the format NVIDIA ships
//! (tests/fixtures/migparted/nvidia-config-default-excerpt.yaml is transcribed from mig-parted's
//! config-default.yaml) and on MigNodes and MigPlans as kubectl prints them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};

use geometer_api::migparted::{import, Devices, MigPartedConfig};
use geometer_api::{MigPolicy, PolicyMode};
use geometer_apiserver::ApiServer;
use geometer_solver::catalog::Catalog;
use kube::api::PostParams;
use kube::Api;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/migparted").join(name)
}

fn nvidia_excerpt() -> MigPartedConfig {
    MigPartedConfig::parse(&std::fs::read_to_string(fixture("nvidia-config-default-excerpt.yaml")).unwrap())
        .unwrap()
}

fn geometer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_geometer")).args(args).output().expect("geometer runs")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn counts(pairs: &[(&str, u32)]) -> Option<BTreeMap<String, u32>> {
    Some(pairs.iter().map(|(p, n)| (p.to_string(), *n)).collect())
}

#[test]
fn nvidia_configs_parse_with_their_filters_devices_and_counts() {
    let file = nvidia_excerpt();
    assert_eq!(file.mig_configs.len(), 10);
    let disabled = file.config("all-disabled").unwrap();
    assert_eq!(
        (disabled[0].mig_enabled, &disabled[0].devices, &disabled[0].mig_devices),
        (false, &Devices::All, &None)
    );
    assert_eq!(file.config("all-enabled").unwrap()[0].mig_devices, counts(&[]));

    let one_g = file.config("all-1g.10gb").unwrap();
    assert_eq!(one_g.len(), 2);
    assert_eq!(one_g[0].device_filter.len(), 8);
    assert_eq!(one_g[0].mig_devices, counts(&[("1g.10gb", 7)]));
    assert_eq!(one_g[1].device_filter, ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]);
    assert_eq!(one_g[1].mig_devices, counts(&[("1g.10gb", 4)]));

    let balanced = file.config("all-balanced").unwrap();
    assert_eq!(balanced.len(), 12);
    // The A30 entry writes its filter as a plain string, the others as lists.
    let a30 = balanced.iter().find(|e| e.device_filter == ["0x20B710DE"]).unwrap();
    assert_eq!(a30.mig_devices, counts(&[("1g.6gb", 2), ("2g.12gb", 1)]));
    // Profile names with variant suffixes survive as written.
    assert_eq!(file.config("all-1g.24gb.me.all").unwrap()[0].mig_devices, counts(&[("1g.24gb+me.all", 1)]));
    assert_eq!(file.config("all-1g.24gb-me").unwrap()[0].mig_devices, counts(&[("1g.24gb-me", 4)]));
}

#[test]
fn index_lists_of_a_custom_config_are_kept_per_entry() {
    let file =
        MigPartedConfig::parse(&std::fs::read_to_string(fixture("custom-indices.yaml")).unwrap()).unwrap();
    let entries = file.config("custom-config").unwrap();
    let devices: Vec<&Devices> = entries.iter().map(|e| &e.devices).collect();
    assert_eq!(
        devices,
        [
            &Devices::Indices(vec![0, 1, 2, 3]),
            &Devices::Indices(vec![4]),
            &Devices::Indices(vec![5]),
            &Devices::Indices(vec![6]),
            &Devices::Indices(vec![7])
        ]
    );
    let got = import::allowed_profiles(&file, None, Catalog::builtin()).unwrap();
    assert_eq!(got.profiles, ["1g.5gb", "2g.10gb", "3g.20gb"]);
}

#[test]
fn all_balanced_allows_every_profile_of_every_model_it_names() {
    let got = import::allowed_profiles(&nvidia_excerpt(), Some("all-balanced"), Catalog::builtin()).unwrap();
    let expected: BTreeSet<&str> = [
        "1g.23gb", "2g.47gb", "3g.93gb", "1g.35gb", "2g.70gb", "3g.139gb", "1g.24gb", "2g.48gb", "2g.45gb",
        "3g.90gb", "1g.34gb", "2g.67gb", "3g.135gb", "1g.18gb", "2g.36gb", "3g.72gb", "2g.35gb", "3g.71gb",
        "1g.12gb", "2g.24gb", "3g.47gb", "1g.10gb", "2g.20gb", "3g.40gb", "1g.5gb", "2g.10gb", "3g.20gb",
        "1g.6gb", "2g.12gb", "3g.48gb",
    ]
    .into_iter()
    .collect();
    assert_eq!(got.profiles.iter().map(String::as_str).collect::<BTreeSet<_>>(), expected);
    assert_eq!(got.configs, ["all-balanced"]);
    // PG506-96GB (0x20B6) is in NVIDIA's filter but not in Geometer's catalog: said, not fatal.
    assert!(
        got.notes.iter().any(|n| n.contains("device 0x20B610DE is not in Geometer's catalog")),
        "notes: {:#?}",
        got.notes
    );
}

#[tokio::test]
async fn imported_policy_is_accepted_by_the_api_server_under_the_crd_schema() {
    let path = fixture("nvidia-config-default-excerpt.yaml");
    let out = geometer(&[
        "migparted",
        "import",
        path.to_str().unwrap(),
        "--config",
        "all-1g.10gb",
        "--node-selector",
        "nvidia.com/mig.config=all-1g.10gb",
    ]);
    let yaml = stdout(&out);
    assert!(stderr(&out).contains("MigPolicy has no allowed-layouts field"), "{}", stderr(&out));
    let policy: MigPolicy = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(policy.metadata.name.as_deref(), Some("all-1g.10gb"));
    assert_eq!(policy.spec.allowed_profiles, ["1g.10gb"]);
    assert_eq!(policy.spec.mode, PolicyMode::DryRun);
    assert_eq!(
        policy.spec.node_selector.match_labels.as_ref().unwrap()["nvidia.com/mig.config"],
        "all-1g.10gb"
    );

    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).unwrap();
    }
    let api: Api<MigPolicy> = Api::all(server.client());
    let created = api
        .create(&PostParams::default(), &policy)
        .await
        .expect("the API server accepts the imported policy");
    assert_eq!(created.spec.allowed_profiles, ["1g.10gb"]);
}

/// What `migparted import` writes, `geometer plan --policy` takes: every config of NVIDIA's
/// defaults, and a hand-written one naming a profile no GPU of the catalog has (left out, said).
#[test]
fn every_imported_policy_is_one_geometer_plan_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("empty.yaml");
    std::fs::write(&snapshot, "kind: List\nitems: []\n").unwrap();
    let odd = dir.path().join("odd.yaml");
    std::fs::write(
        &odd,
        "version: v1\nmig-configs:\n  odd:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 2, \"1g.99gb\": 1}\n",
    )
    .unwrap();
    let excerpt = fixture("nvidia-config-default-excerpt.yaml");
    let configs: Vec<String> = nvidia_excerpt().mig_configs.keys().cloned().collect();
    let mut imported = 0;
    for (file, config) in configs.iter().map(|c| (&excerpt, c.as_str())).chain([(&odd, "odd")]) {
        let out = geometer(&["migparted", "import", file.to_str().unwrap(), "--config", config]);
        if out.status.code() == Some(2) && stderr(&out).contains("creates no MIG instances") {
            continue;
        }
        let policy = dir.path().join(format!("{config}.yaml"));
        std::fs::write(&policy, stdout(&out)).unwrap();
        let plan = geometer(&[
            "plan",
            "--snapshot",
            snapshot.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
        ]);
        assert!(plan.status.success(), "{config}: {}", stderr(&plan));
        imported += 1;
        if config == "odd" {
            assert!(
                stdout(&out).contains("1g.10gb") && !stdout(&out).contains("1g.99gb"),
                "{}",
                stdout(&out)
            );
            assert!(
                stderr(&out).contains("profile \"1g.99gb\", so the policy leaves it out"),
                "{}",
                stderr(&out)
            );
        }
    }
    assert!(imported > 3, "{imported} configs imported");
}

#[test]
fn import_refuses_a_config_without_instances_and_an_unknown_config() {
    let path = fixture("nvidia-config-default-excerpt.yaml");
    let out = geometer(&["migparted", "import", path.to_str().unwrap(), "--config", "all-disabled"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("config all-disabled creates no MIG instances"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "nothing is half-printed");

    let out = geometer(&["migparted", "import", path.to_str().unwrap(), "--config", "all-2g.99gb"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no mig-config named \"all-2g.99gb\"; the file has all-1g.10gb, "),
        "{}",
        stderr(&out)
    );

    let out = geometer(&["migparted", "import", path.to_str().unwrap(), "--node-selector", "novalue"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--node-selector \"novalue\": expected KEY=VALUE"), "{}", stderr(&out));
}

/// The API server stores a MigPolicy whatever its selector holds; a selector no node label can
/// match would manage nothing, silently. Import refuses it, naming the key or value and the rule.
#[test]
fn import_refuses_a_node_selector_no_label_can_match() {
    let path = fixture("nvidia-config-default-excerpt.yaml");
    let import = |selectors: &[&str]| {
        let mut args = vec!["migparted", "import", path.to_str().unwrap(), "--config", "all-1g.10gb"];
        for s in selectors {
            args.extend(["--node-selector", s]);
        }
        geometer(&args)
    };
    for (selector, expected) in [
        ("bad key=x", "label key \"bad key\": name part must consist of alphanumeric characters"),
        ("Nvidia.com/mig.config=x", "label key \"Nvidia.com/mig.config\": prefix part a lowercase RFC 1123"),
        ("pool=all balanced", "label value \"all balanced\": a valid label must be an empty string"),
        ("pool=-x", "label value \"-x\""),
    ] {
        let out = import(&[selector]);
        assert_eq!(out.status.code(), Some(2), "{selector}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{selector}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{selector}: no policy is printed");
    }
    let out = import(&["pool=a", "pool=b"]);
    assert!(stderr(&out).contains("label key \"pool\" given twice"), "{}", stderr(&out));
    // Valid keys with a prefix, and an empty value, are labels a node can carry.
    let text = stdout(&import(&["nvidia.com/mig.config=all-1g.10gb", "team="]));
    let policy: MigPolicy = serde_saphyr::from_str(&text).unwrap();
    let labels = policy.spec.node_selector.match_labels.unwrap();
    assert_eq!(labels.get("nvidia.com/mig.config").map(String::as_str), Some("all-1g.10gb"));
    assert_eq!(labels.get("team").map(String::as_str), Some(""));
}

#[test]
fn export_writes_each_node_current_geometry_grouped_by_identical_gpus() {
    let out = geometer(&[
        "migparted",
        "export",
        fixture("mignodes.yaml").to_str().unwrap(),
        "--geometry",
        "current",
    ]);
    let text = stdout(&out);
    assert!(text.starts_with("version: v1\nmig-configs:\n"), "{text}");
    let cfg = MigPartedConfig::parse(&text).expect("the export reads back as a mig-parted config");
    let gpu1 = cfg.config("gpu-1").unwrap();
    assert_eq!(gpu1.len(), 3);
    assert_eq!(
        (&gpu1[0].devices, &gpu1[0].mig_devices),
        (&Devices::Indices(vec![0]), &counts(&[("1g.10gb", 2), ("3g.40gb", 1)]))
    );
    assert_eq!(
        (&gpu1[1].devices, &gpu1[1].mig_devices),
        (&Devices::Indices(vec![1]), &counts(&[("1g.10gb", 3), ("3g.40gb", 1)]))
    );
    // The whole-GPU card stays out of MIG mode.
    assert_eq!(
        (&gpu1[2].devices, gpu1[2].mig_enabled, &gpu1[2].mig_devices),
        (&Devices::Indices(vec![2]), false, &None)
    );
    assert_eq!(cfg.config("gpu-2").unwrap()[0].mig_devices, counts(&[("7g.40gb", 1)]));
    assert!(stderr(&out).contains("not placements"), "{}", stderr(&out));
}

#[test]
fn export_of_the_planned_geometry_takes_the_spec_for_the_gpus_it_lists() {
    let text = stdout(&geometer(&[
        "migparted",
        "export",
        fixture("mignodes.yaml").to_str().unwrap(),
        "--node",
        "gpu-1",
    ]));
    let cfg = MigPartedConfig::parse(&text).unwrap();
    assert_eq!(cfg.mig_configs.keys().collect::<Vec<_>>(), ["gpu-1"]);
    let gpu1 = cfg.config("gpu-1").unwrap();
    assert_eq!(
        gpu1[0].mig_devices,
        counts(&[("1g.10gb", 2), ("3g.40gb", 1)]),
        "GPU 0 is not in the spec: as it is"
    );
    assert_eq!(
        gpu1[1].mig_devices,
        counts(&[("1g.10gb", 1), ("2g.20gb", 1), ("3g.40gb", 1)]),
        "GPU 1 as the spec wants it"
    );
}

#[test]
fn export_of_a_plan_round_trips_through_import_to_its_profiles() {
    let text = stdout(&geometer(&["migparted", "export", fixture("migplan.yaml").to_str().unwrap()]));
    // NVIDIA's files write index lists in flow style; so does the export.
    assert!(text.contains("devices: [0, 3]"), "{text}");
    let cfg = MigPartedConfig::parse(&text).unwrap();
    let gpu3 = cfg.config("gpu-3").unwrap();
    assert_eq!(gpu3.len(), 1, "GPUs 0 and 3 get the same layout: one entry");
    assert_eq!(gpu3[0].mig_devices, counts(&[("3g.40gb", 2)]));
    let back = import::allowed_profiles(&cfg, None, Catalog::builtin()).unwrap();
    assert_eq!(back.profiles, ["1g.10gb", "2g.20gb", "3g.40gb"]);
    assert!(back.notes.is_empty(), "{:?}", back.notes);

    let current = stdout(&geometer(&[
        "migparted",
        "export",
        fixture("migplan.yaml").to_str().unwrap(),
        "--geometry",
        "current",
    ]));
    let cfg = MigPartedConfig::parse(&current).unwrap();
    assert_eq!(cfg.config("gpu-3").unwrap()[0].mig_devices, counts(&[("7g.80gb", 1)]));
}

#[test]
fn export_of_a_snapshot_gives_its_current_geometry_and_refuses_a_planned_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.yaml");
    std::fs::write(
        &path,
        "nodes:\n- name: a\n  gpus:\n  - index: 0\n    model: H100-80GB\n    instances:\n    - {profile: 4g.40gb, start: 0}\n    - {profile: 3g.40gb, start: 4, pod: ml/x}\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let cfg = MigPartedConfig::parse(&stdout(&geometer(&[
        "migparted",
        "export",
        p,
        "--geometry",
        "current",
        "--config",
        "mine",
    ])))
    .unwrap();
    assert_eq!(cfg.config("mine").unwrap()[0].mig_devices, counts(&[("3g.40gb", 1), ("4g.40gb", 1)]));

    let out = geometer(&["migparted", "export", p]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("a snapshot holds only the current geometry"), "{}", stderr(&out));
}

#[test]
fn export_errors_name_the_problem() {
    let plan = fixture("migplan.yaml");
    let out = geometer(&["migparted", "export", plan.to_str().unwrap(), "--config", "one"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--config names one config, but 2 nodes are exported"), "{}", stderr(&out));

    let out = geometer(&["migparted", "export", plan.to_str().unwrap(), "--node", "gpu-9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--node gpu-9: not in"), "{}", stderr(&out));

    let out = geometer(&["migparted", "export", fixture("custom-indices.yaml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("document 1: neither a Kubernetes object"), "{}", stderr(&out));
}

#[test]
fn a_mignode_without_anything_to_export_is_left_out_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mignodes.yaml");
    let mut text = std::fs::read_to_string(fixture("mignodes.yaml")).unwrap();
    // A third node whose agent has not reported yet, as `kubectl get mignodes -o yaml` shows it.
    text.push_str(
        "- apiVersion: geometer.dev/v1alpha1\n  kind: MigNode\n  metadata:\n    name: gpu-new\n  spec: {}\n",
    );
    std::fs::write(&path, text).unwrap();
    let out = geometer(&["migparted", "export", path.to_str().unwrap(), "--geometry", "current"]);
    let cfg = MigPartedConfig::parse(&stdout(&out)).unwrap();
    assert_eq!(cfg.mig_configs.keys().collect::<Vec<_>>(), ["gpu-1", "gpu-2"]);
    assert!(stderr(&out).contains("note: left out MigNode gpu-new has no inventory"), "{}", stderr(&out));

    std::fs::write(
        &path,
        "apiVersion: geometer.dev/v1alpha1\nkind: MigNode\nmetadata:\n  name: gpu-new\nspec: {}\n",
    )
    .unwrap();
    let out = geometer(&["migparted", "export", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "nothing at all to export is an error");
    assert!(stderr(&out).contains("nothing to export: MigNode gpu-new has neither"), "{}", stderr(&out));
}
