//! `geometer catalog` and `geometer geometry` as a user runs them: output and exit codes
//! (0 ok, 1 "no", 2 bad input).

use std::process::{Command, Output};

fn geometer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_geometer"))
        .args(args)
        .env_remove("GEOMETER_LOG_JSON")
        .output()
        .expect("run geometer")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

#[test]
fn catalog_list_shows_every_model_with_ids_and_profile_counts() {
    let o = geometer(&["catalog", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("MODEL"), "{out}");
    let a100 = out.lines().find(|l| l.starts_with("A100-40GB ")).expect("A100-40GB row");
    assert!(
        a100.contains("Ampere GA100") && a100.contains("40960 MiB") && a100.contains("0x20B010DE"),
        "{a100}"
    );
    assert!(a100.trim_end().ends_with(" 7"), "7 profiles: {a100}");
    for key in ["A30", "H100-80GB", "H200-141GB", "B200", "GB300", "RTX-PRO-6000"] {
        assert!(out.lines().any(|l| l.starts_with(&format!("{key} "))), "{key} missing:\n{out}");
    }
    assert!(out.contains("RTX-PRO-5000"), "unplaceable GPUs are listed apart: {out}");
}

#[test]
fn catalog_list_json_is_the_catalog_file_form() {
    let o = geometer(&["catalog", "list", "-o", "json"]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let models = v["models"].as_array().unwrap();
    assert_eq!(models.len(), 13);
    assert_eq!(models[1]["key"], "A100-40GB");
    assert_eq!(models[1]["device_ids"][0], "0x20B010DE");
}

#[test]
fn catalog_show_accepts_key_pci_id_nvml_name_and_label() {
    for query in ["A100-40GB", "0x20B010DE", "20b0", "NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"] {
        let o = geometer(&["catalog", "show", query]);
        assert_eq!(code(&o), 0, "{query}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("Model:           A100-40GB"), "{query}: {out}");
        let row = out.lines().find(|l| l.starts_with("3g.20gb ")).expect("3g.20gb row");
        for part in ["19968", "0,4", "verified"] {
            assert!(row.contains(part), "{row} lacks {part}");
        }
    }
    let o = geometer(&["catalog", "show", "a100-80gb"]);
    let out = stdout(&o);
    assert!(out.lines().any(|l| l.starts_with("7g.80gb ") && l.contains("7g.79gb")), "alias shown: {out}");
}

#[test]
fn catalog_show_yaml_feeds_back_as_a_catalog_file() {
    let o = geometer(&["catalog", "show", "H100-80GB", "-o", "yaml"]);
    assert_eq!(code(&o), 0);
    let yaml = stdout(&o)
        .replace("key: H100-80GB", "key: H100-CUSTOM")
        .replace("0x233010DE", "0x0BAD10DE")
        .replace("0x233110DE", "0x0BAE10DE")
        .replace("0x232210DE", "0x0BAF10DE")
        .replace("0x232410DE", "0x0BB010DE")
        .replace("NVIDIA H100 80GB HBM3", "NVIDIA H100 CUSTOM")
        .replace("NVIDIA H100 PCIe", "NVIDIA H100 CUSTOM PCIe");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("extra.yaml");
    std::fs::write(&path, yaml).unwrap();
    let path = path.to_str().unwrap();
    let o = geometer(&["catalog", "show", "0x0BAD", "--catalog", path]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("Model:           H100-CUSTOM"));
    let o =
        geometer(&["geometry", "check", "--catalog", path, "--model", "H100-CUSTOM", "4g.40gb@0,3g.40gb@4"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn bad_catalog_file_and_unknown_model_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "models:\n- {key: Z1, placement_units: 8, compute_slices: 7, profiles: [{name: 1g.5gb, compute_slices: 1, \
         memory_mib: 10, starts: [7], size: 2, max_instances: 1, nvml_profile_index: 0}]}\n",
    )
    .unwrap();
    let o = geometer(&["catalog", "list", "--catalog", path.to_str().unwrap()]);
    assert_eq!(code(&o), 2);
    let err = stderr(&o);
    for part in ["bad.yaml", "model Z1", "profile 1g.5gb", "starts", "7"] {
        assert!(err.contains(part), "{err} lacks {part}");
    }
    let o = geometer(&["catalog", "list", "--catalog", "/nonexistent/catalog.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("/nonexistent/catalog.yaml"));

    let o = geometer(&["catalog", "show", "V100"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("\"V100\"") && stderr(&o).contains("A100-40GB"), "{}", stderr(&o));
    let o = geometer(&["catalog", "show", "RTX PRO 5000"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("cannot be planned"), "{}", stderr(&o));
}

#[test]
fn geometry_check_valid_prints_the_placement() {
    let o = geometer(&["geometry", "check", "--model", "A100-40GB", "3g.20gb@4,2g.10gb@0,1g.5gb@2"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("valid on A100-40GB: 3g.20gb@4,2g.10gb@0,1g.5gb@2"), "{out}");
    assert!(
        out.contains("3    (free)") || out.lines().any(|l| l.starts_with("3 ") && l.contains("(free)")),
        "{out}"
    );
    assert!(out.contains("compute slices used: 6 of 7"), "{out}");
}

#[test]
fn geometry_check_places_profiles_without_start() {
    let o = geometer(&["geometry", "check", "-m", "NVIDIA-A100-SXM4-40GB", "7x1g.5gb"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("placed on A100-40GB: "), "{out}");
    assert!(out.lines().any(|l| l.starts_with("7 ") && l.contains("(free)")), "unit 7 stays free: {out}");

    let o = geometer(&["geometry", "check", "-m", "A100-40GB", "3g.20gb@4,4g.20gb", "-o", "json"]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["placed"], true);
    assert_eq!(v["geometry"][0]["profile"], "4g.20gb");
    assert_eq!(v["geometry"][0]["start"], 0);
}

#[test]
fn geometry_check_invalid_exits_1_and_says_why() {
    let o = geometer(&["geometry", "check", "-m", "A100-40GB", "3g.20gb,3g.20gb,1g.5gb"]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(out.starts_with("invalid on A100-40GB: no legal placement"), "{out}");

    let o = geometer(&["geometry", "check", "-m", "A100-40GB", "3g.20gb@2"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("legal starts: [0, 4]"), "{}", stdout(&o));

    let o =
        geometer(&["geometry", "check", "-m", "RTX-PRO-6000", "1g.24gb+me.all@0,1g.24gb@3", "-o", "json"]);
    assert_eq!(code(&o), 1);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["valid"], false);
    assert!(v["reason"].as_str().unwrap().contains("1g.24gb-me"), "{v}");
}

#[test]
fn geometry_check_bad_input_exits_2() {
    for (args, needle) in [
        (vec!["-m", "V100", "1g.5gb"], "unknown GPU model"),
        (vec!["-m", "A100-40GB", "9g.1gb@0"], "9g.1gb"),
        (vec!["-m", "A100-40GB", "3g.20gb@x"], "\"x\""),
        (vec!["-m", "A100-40GB", "3g.20gb@4,,1g.5gb"], "empty entry"),
        (vec!["-m", "A100-40GB", ""], "empty"),
    ] {
        let mut full = vec!["geometry", "check"];
        full.extend(args.iter());
        let o = geometer(&full);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    // clap's own usage errors are bad input too.
    assert_eq!(code(&geometer(&["geometry", "check", "1g.5gb"])), 2);
}

#[test]
fn geometry_enumerate_counts_and_json() {
    let o = geometer(&[
        "geometry",
        "enumerate",
        "--model",
        "A100-40GB",
        "--profiles",
        "1g.5gb,2g.10gb,3g.20gb,4g.20gb,7g.40gb",
        "--maximal",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 20, "19 geometries and a summary: {out}");
    assert!(out.lines().any(|l| l == "7g.40gb@0"), "{out}");
    assert!(out.lines().any(|l| l == "4g.20gb@0,3g.20gb@4"), "{out}");
    assert!(
        out.trim_end()
            .ends_with("19 maximal geometries of A100-40GB from 1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"),
        "{out}"
    );

    let o = geometer(&["geometry", "enumerate", "-m", "A30", "--maximal", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["count"], 5);
    assert_eq!(v["geometries"].as_array().unwrap().len(), 5);

    let o = geometer(&[
        "geometry",
        "enumerate",
        "-m",
        "RTX-PRO-6000",
        "--profiles",
        "all",
        "--maximal",
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["count"], 302);

    let o = geometer(&["geometry", "enumerate", "-m", "A30", "--profiles", "1g.6gb,5g.1gb"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("5g.1gb") && stderr(&o).contains("known profiles"), "{}", stderr(&o));
}

#[test]
fn every_command_has_help() {
    for args in [
        vec!["catalog", "--help"],
        vec!["catalog", "list", "--help"],
        vec!["catalog", "show", "--help"],
        vec!["geometry", "--help"],
        vec!["geometry", "check", "--help"],
        vec!["geometry", "enumerate", "--help"],
    ] {
        let o = geometer(&args);
        assert_eq!(code(&o), 0, "{args:?}");
        assert!(stdout(&o).contains("Usage:"), "{args:?}");
        assert!(stdout(&o).contains("--catalog"), "{args:?} offers --catalog");
    }
}
