//! The CRD schemas carry the validation a user relies on when writing objects by hand: enums,
//! patterns, minimums, CEL rules, status subresources, short names and useful printer columns.

use geometer_api::{self as api, GEOMETRY_PROFILE_PATTERN, PROFILE_NAME_PATTERN};
use serde_json::Value;

/// The CRDs as a user installs them: parsed back from the generated YAML.
fn crd(plural: &str) -> Value {
    let docs: Vec<Value> = serde_saphyr::from_multiple(&api::crds_yaml().unwrap()).unwrap();
    docs.into_iter()
        .find(|d| d["spec"]["names"]["plural"] == plural)
        .unwrap_or_else(|| panic!("no CRD with plural {plural}"))
}

fn version(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]
}

fn schema<'a>(crd: &'a Value, path: &[&str]) -> &'a Value {
    let mut node = &version(crd)["schema"]["openAPIV3Schema"];
    for part in path {
        node = match *part {
            "[]" => &node["items"],
            "{}" => &node["additionalProperties"],
            name => &node["properties"][name],
        };
        assert!(!node.is_null(), "schema has no {path:?} (stopped at {part})");
    }
    node
}

fn rules(node: &Value) -> Vec<String> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|a| a.iter().map(|r| r["rule"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn all_three_are_cluster_scoped_v1alpha1_with_status_and_short_names() {
    for (plural, kind, short) in [
        ("migpolicies", "MigPolicy", "mpol"),
        ("migplans", "MigPlan", "mplan"),
        ("mignodes", "MigNode", "mnode"),
    ] {
        let crd = crd(plural);
        assert_eq!(crd["spec"]["group"], "geometer.dev");
        assert_eq!(crd["spec"]["scope"], "Cluster", "{kind}");
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["names"]["shortNames"][0], short);
        assert_eq!(version(&crd)["name"], "v1alpha1");
        assert!(version(&crd)["subresources"]["status"].is_object(), "{kind} has no status subresource");
    }
}

#[test]
fn policy_mode_is_an_enum_and_profiles_follow_the_pattern() {
    let crd = crd("migpolicies");
    let mode = schema(&crd, &["spec", "mode"]);
    let values: Vec<&str> = mode["enum"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(values, ["DryRun", "Approve", "Auto"]);
    assert_eq!(schema(&crd, &["spec", "allowedProfiles", "[]"])["pattern"], PROFILE_NAME_PATTERN);
    let headroom = schema(&crd, &["spec", "headroom"]);
    assert!(
        rules(headroom).iter().any(|r| r.contains("matches(")),
        "headroom keys are not checked: {headroom}"
    );
    assert_eq!(
        schema(&crd, &["spec", "headroom", "{}"])["minimum"].as_f64(),
        Some(0.0),
        "headroom counts may go negative"
    );
}

#[test]
fn policy_batching_rule_and_disruption_minimums() {
    let crd = crd("migpolicies");
    assert!(rules(schema(&crd, &["spec", "batching"]))
        .contains(&"self.idleSeconds <= self.maxSeconds".to_string()));
    assert_eq!(schema(&crd, &["spec", "disruption", "maxNodesReconfiguring"])["minimum"].as_f64(), Some(1.0));
    let defaults = &schema(&crd, &["spec", "disruption", "doNotDisruptAnnotations"])["default"];
    assert_eq!(defaults, &serde_json::json!(["geometer.dev/do-not-disrupt", "karpenter.sh/do-not-disrupt"]));
    assert_eq!(schema(&crd, &["spec", "solver", "timeLimitMs"])["minimum"].as_f64(), Some(1.0));
}

#[test]
fn plan_is_immutable_except_approval_which_cannot_be_withdrawn() {
    let crd = crd("migplans");
    for field in ["policy", "nodes", "evictions", "demand", "objective", "solveMs", "summary"] {
        assert!(
            rules(schema(&crd, &["spec", field])).contains(&"self == oldSelf".to_string()),
            "spec.{field} is mutable"
        );
    }
    assert_eq!(rules(schema(&crd, &["spec", "approved"])), ["self || !oldSelf"]);
    let phases = schema(&crd, &["status", "phase"])["enum"].clone();
    assert_eq!(
        phases,
        serde_json::json!(["Proposed", "Approved", "Applying", "Succeeded", "Failed", "Superseded"])
    );
    assert_eq!(
        schema(&crd, &["spec", "nodes", "[]", "gpus", "[]", "to", "[]", "profile"])["pattern"],
        GEOMETRY_PROFILE_PATTERN
    );
    assert!(
        schema(&crd, &["spec", "nodes"])["maxItems"].as_u64().is_some(),
        "unbounded lists break the CEL cost budget"
    );
}

#[test]
fn node_phases_and_conditions_are_typed() {
    let crd = crd("mignodes");
    let phases = schema(&crd, &["status", "phase"])["enum"].clone();
    assert_eq!(
        phases,
        serde_json::json!([
            "Ready",
            "Observing",
            "Cordoning",
            "Draining",
            "Repartitioning",
            "Advertising",
            "Uncordoning",
            "Failed"
        ])
    );
    let conditions = schema(&crd, &["status", "conditions"]);
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert!(schema(&crd, &["status", "conditions", "[]"])["required"]
        .as_array()
        .unwrap()
        .contains(&"type".into()));
    assert_eq!(schema(&crd, &["status", "step", "attempt"])["minimum"].as_f64(), Some(1.0));
    assert_eq!(schema(&crd, &["spec", "gpus"])["x-kubernetes-list-type"], "map");
}

#[test]
fn get_migplans_shows_the_review_columns_and_every_column_points_into_the_schema() {
    let plan = crd("migplans");
    let names: Vec<&str> = version(&plan)["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["priority"].as_i64().unwrap_or(0) == 0)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Policy", "Phase", "Pods-Helped", "GPUs-Changed", "Evictions", "Age"]);
    for plural in ["migpolicies", "migplans", "mignodes"] {
        let crd = crd(plural);
        for column in version(&crd)["additionalPrinterColumns"].as_array().unwrap() {
            let path = column["jsonPath"].as_str().unwrap();
            if path.starts_with(".metadata.") {
                continue;
            }
            let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
            let node = schema(&crd, &parts);
            let ty = column["type"].as_str().unwrap();
            let schema_ty = node["type"].as_str().unwrap_or("");
            assert!(
                schema_ty == ty || (ty == "date" && schema_ty == "string"),
                "{plural} column {} has type {ty} but {path} is {schema_ty}",
                column["name"]
            );
        }
    }
}
