//! `kubectl kustomize` renders deploy/base and every overlay; every rendered object parses as
//! its Kubernetes type without losing a field; the pieces fit together (selectors, ports,
//! arguments the real CLI accepts, the default policy and the agent on the same nodes).
//! Skips, saying so, when the control plane's kubectl is not built (`make control-plane`), and
//! fails instead under `GEOMETER_REQUIRE_CONTROL_PLANE=1`.

use geometer_testkit::deploy as deploy_support;

use clap::Parser;
use deploy_support::{kubectl_available, kustomizations, object, object_as, render};
use geometer_api::{MigNode, MigPlan, MigPolicy, PolicyMode};
use geometer_apiserver::ApiServer;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::Api;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Fields of `original` that `reparsed` lacks or changed (nulls in the original ignored).
fn lost(original: &Value, reparsed: &Value, path: &str, out: &mut Vec<String>) {
    match (original, reparsed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a.iter().filter(|(_, v)| !v.is_null()) {
                match b.get(k) {
                    Some(w) => lost(v, w, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                lost(v, w, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a == b => {}
        // 255 and 255.0 are one JSON number; the types store some as f64.
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) => out.push(format!("{path}: {a} became {b}")),
    }
}

fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<T, String> {
    let parsed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let mut missing = Vec::new();
    lost(doc, &serde_json::to_value(&parsed).unwrap(), "", &mut missing);
    if missing.is_empty() {
        Ok(parsed)
    } else {
        Err(format!("fields the type does not know (misspelt or misplaced?): {missing:?}"))
    }
}

fn is<T: kube::Resource<DynamicType = ()>>(doc: &Value) -> bool {
    doc["apiVersion"] == *T::api_version(&()) && doc["kind"] == *T::kind(&())
}

/// Parses `doc` as the type its apiVersion and kind name.
fn check_type(doc: &Value) -> Result<(), String> {
    macro_rules! dispatch {
        ($($t:ty),*) => {
            $( if is::<$t>(doc) { return typed::<$t>(doc).map(|_| ()); } )*
        };
    }
    dispatch!(
        Namespace,
        MutatingWebhookConfiguration,
        ValidatingWebhookConfiguration,
        ValidatingAdmissionPolicy,
        ValidatingAdmissionPolicyBinding,
        ServiceAccount,
        Service,
        Deployment,
        DaemonSet,
        PodDisruptionBudget,
        ClusterRole,
        ClusterRoleBinding,
        Role,
        RoleBinding,
        CustomResourceDefinition,
        MigPolicy,
        MigPlan,
        MigNode
    );
    Err("a kind this test does not know; add its type to check_type".into())
}

#[test]
fn every_rendered_object_parses_as_its_kubernetes_type() {
    if !kubectl_available() {
        return;
    }
    for dir in kustomizations() {
        let objects = render(&dir);
        assert!(!objects.is_empty(), "{dir} renders nothing");
        for doc in &objects {
            if let Err(e) = check_type(doc) {
                panic!("{dir}: {} {} ({}): {e}", doc["kind"], doc["metadata"]["name"], doc["apiVersion"]);
            }
        }
    }
}

#[test]
fn every_kustomization_has_crds_namespace_controller_and_agent() {
    if !kubectl_available() {
        return;
    }
    for dir in kustomizations() {
        let objects = render(&dir);
        let mut crds: Vec<&str> = objects
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        crds.sort();
        assert_eq!(
            crds,
            ["mignodes.geometer.dev", "migplans.geometer.dev", "migpolicies.geometer.dev"],
            "{dir}"
        );
        object(&objects, "Namespace", "geometer-system");
        for o in objects.iter().filter(|o| o["metadata"]["namespace"].is_string()) {
            let ns = o["metadata"]["namespace"].as_str().unwrap();
            assert_eq!(
                ns, "geometer-system",
                "{dir}: {} {} is outside Geometer's namespace",
                o["kind"], o["metadata"]["name"]
            );
        }
        for kind in
            ["MigPolicy", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace"]
        {
            for o in objects.iter().filter(|o| o["kind"] == kind) {
                assert!(
                    o["metadata"]["namespace"].is_null(),
                    "{dir}: cluster-scoped {kind} {} has a namespace",
                    o["metadata"]["name"]
                );
            }
        }
        for crd in objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
            let parsed: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
            let generated =
                geometer_api::crds().into_iter().find(|c| c.metadata.name == parsed.metadata.name).unwrap();
            let (rendered, generated) =
                (serde_json::to_value(&parsed.spec).unwrap(), serde_json::to_value(&generated.spec).unwrap());
            let mut differences = Vec::new();
            lost(&rendered, &generated, "spec", &mut differences);
            lost(&generated, &rendered, "spec", &mut differences);
            assert!(
                differences.is_empty(),
                "{dir}: the CRD {:?} is not the one src/api generates: {differences:?}",
                parsed.metadata.name
            );
        }
    }
}

fn pod_labels(workload: &Value) -> &serde_json::Map<String, Value> {
    workload["spec"]["template"]["metadata"]["labels"].as_object().expect("pod template labels")
}

fn selects(selector: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    selector.as_object().expect("a label map").iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn controller_runs_two_replicas_behind_a_budget_and_a_metrics_service() {
    if !kubectl_available() {
        return;
    }
    for dir in kustomizations() {
        let objects = render(&dir);
        let deploy = object(&objects, "Deployment", "geometer-controller");
        assert_eq!(deploy["spec"]["replicas"], 2, "{dir}: two replicas, one leading");
        let labels = pod_labels(deploy);
        assert!(
            selects(&deploy["spec"]["selector"]["matchLabels"], labels),
            "{dir}: the Deployment selects its own pods"
        );

        let pdb: PodDisruptionBudget = object_as(&objects, "geometer-controller");
        let pdb_spec = pdb.spec.unwrap();
        let pdb_selector = serde_json::to_value(pdb_spec.selector.unwrap().match_labels.unwrap()).unwrap();
        assert!(selects(&pdb_selector, labels), "{dir}: the budget covers the controller pods");
        let min = pdb_spec.min_available.map(|m| serde_json::to_value(m).unwrap());
        assert_eq!(min, Some(Value::from(1)), "{dir}: one replica may be evicted at a time, never both");

        let service: Service = object_as(&objects, "geometer-controller-metrics");
        let spec = service.spec.unwrap();
        let selector = serde_json::to_value(spec.selector.unwrap()).unwrap();
        assert!(selects(&selector, labels), "{dir}: the metrics Service selects the controller pods");
        let container_ports: Vec<&str> = deploy["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for port in spec.ports.unwrap() {
            let target = serde_json::to_value(port.target_port.unwrap()).unwrap();
            assert!(
                container_ports.iter().any(|p| target == *p),
                "{dir}: Service port {target} names no container port ({container_ports:?})"
            );
        }
    }
}

#[test]
fn the_rightsizing_webhook_never_blocks_pods_and_reaches_the_controller() {
    if !kubectl_available() {
        return;
    }
    for dir in kustomizations() {
        let objects = render(&dir);
        let deploy = object(&objects, "Deployment", "geometer-controller");
        let listen =
            flag(&args(deploy), "--webhook-addr").expect("the controller serves the webhook").to_string();
        let port: i64 = listen.rsplit(':').next().unwrap().parse().unwrap();
        let ports = deploy["spec"]["template"]["spec"]["containers"][0]["ports"].as_array().unwrap();
        let named =
            ports.iter().find(|p| p["containerPort"] == port).expect("a container port for the webhook");
        let service = object(&objects, "Service", "geometer-webhook");
        assert!(
            selects(&service["spec"]["selector"], pod_labels(deploy)),
            "{dir}: the Service selects the controller"
        );
        assert_eq!(
            service["spec"]["ports"][0]["targetPort"], named["name"],
            "{dir}: the Service reaches that port"
        );

        let configuration: MutatingWebhookConfiguration = object_as(&objects, "geometer-rightsizing");
        let webhooks = configuration.webhooks.unwrap();
        let paths: Vec<_> =
            webhooks.iter().map(|w| w.client_config.service.as_ref().unwrap().path.clone()).collect();
        assert_eq!(paths, [Some("/rightsize/pod".into()), Some("/rightsize/namespace".into())], "{dir}");
        for w in &webhooks {
            assert_eq!(
                w.failure_policy.as_deref(),
                Some("Ignore"),
                "{dir}: {} must never block pod creation",
                w.name
            );
            let target = w.client_config.service.as_ref().unwrap();
            assert_eq!(
                (target.name.as_str(), target.namespace.as_str(), target.port),
                ("geometer-webhook", service["metadata"]["namespace"].as_str().unwrap(), Some(443)),
                "{dir}: {} calls the webhook Service",
                w.name
            );
            let rules = w.rules.as_ref().unwrap();
            assert!(
                rules.iter().all(|r| r.operations.as_deref() == Some(&["CREATE".to_string()][..])),
                "{dir}: pod creation only"
            );
        }
        // The agents' evictions go to the same Service, fail closed, and only the agent's.
        let evictions: ValidatingWebhookConfiguration = object_as(&objects, "geometer-agent-evictions");
        let agent = format!(
            "system:serviceaccount:{}:geometer-agent",
            service["metadata"]["namespace"].as_str().unwrap()
        );
        for w in evictions.webhooks.unwrap() {
            let target = w.client_config.service.as_ref().unwrap();
            assert_eq!(
                (target.name.as_str(), target.path.as_deref(), target.port),
                ("geometer-webhook", Some("/validate/agent-eviction"), Some(443)),
                "{dir}"
            );
            assert_eq!(w.failure_policy.as_deref(), Some("Fail"), "{dir}: an agent never evicts unchecked");
            let conditions = w.match_conditions.unwrap_or_default();
            assert!(
                conditions.iter().any(|c| c.expression.contains(&agent)),
                "{dir}: only {agent}'s evictions"
            );
        }
    }
}

/// The policy binding the agent to its node is bound, denies, and names the agent's
/// ServiceAccount in the namespace the agent runs in.
#[test]
fn the_agent_node_policy_is_bound_to_the_agents_service_account() {
    if !kubectl_available() {
        return;
    }
    for dir in kustomizations() {
        let objects = render(&dir);
        let policy: ValidatingAdmissionPolicy = object_as(&objects, "geometer-agent-own-node");
        let binding: ValidatingAdmissionPolicyBinding = object_as(&objects, "geometer-agent-own-node");
        let spec = binding.spec;
        assert_eq!(spec.policy_name, "geometer-agent-own-node", "{dir}");
        assert_eq!(spec.validation_actions, ["Deny"], "{dir}");
        let agent = object(&objects, "ServiceAccount", "geometer-agent");
        let user = format!(
            "system:serviceaccount:{}:geometer-agent",
            agent["metadata"]["namespace"].as_str().unwrap()
        );
        let spec = policy.spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"), "{dir}");
        assert!(
            spec.match_conditions.unwrap_or_default().iter().any(|c| c.expression.contains(&user)),
            "{dir}: the policy applies to {user}"
        );
    }
}

/// Container args with `$(VAR)` replaced as the kubelet would (a placeholder value).
pub(crate) fn args(workload: &Value) -> Vec<String> {
    workload["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            match (a.find("$("), a.find(')')) {
                (Some(i), Some(j)) if j > i => {
                    format!("{}example-{}{}", &a[..i], a[i + 2..j].to_lowercase(), &a[j + 1..])
                }
                _ => a.to_string(),
            }
        })
        .collect()
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().find_map(|a| a.strip_prefix(name)?.strip_prefix('='))
}

#[test]
fn container_arguments_are_accepted_by_the_geometer_cli() {
    if !kubectl_available() {
        return;
    }
    for dir in kustomizations() {
        let objects = render(&dir);
        for (kind, name) in [("DaemonSet", "geometer-agent"), ("Deployment", "geometer-controller")] {
            let argv: Vec<String> =
                std::iter::once("geometer".to_string()).chain(args(object(&objects, kind, name))).collect();
            if let Err(e) = geometer::cli::Cli::try_parse_from(&argv) {
                panic!("{dir}: {kind} {name} runs `{}`, which the CLI rejects:\n{e}", argv.join(" "));
            }
        }
    }
}

#[test]
fn gpu_operator_overlay_uses_the_operators_device_plugin_and_keeps_mig_manager_off_geometers_nodes() {
    if !kubectl_available() {
        return;
    }
    let base = render("deploy/base");
    let objects = render("deploy/overlays/gpu-operator");
    let agent = object(&objects, "DaemonSet", "geometer-agent");
    let overlay_args = args(agent);
    assert_eq!(flag(&overlay_args, "--device-plugin-namespace"), Some("gpu-operator"));
    assert_eq!(flag(&overlay_args, "--device-plugin-selector"), Some("app=nvidia-device-plugin-daemonset"));
    for arg in args(object(&base, "DaemonSet", "geometer-agent")) {
        assert!(overlay_args.contains(&arg), "the gpu-operator overlay drops the base agent argument {arg}");
    }
    let node_selector = &agent["spec"]["template"]["spec"]["nodeSelector"];
    assert_eq!(
        node_selector["nvidia.com/gpu.deploy.mig-manager"], "false",
        "mig-manager's DaemonSet selects =true: one owner per node"
    );
    assert_eq!(
        node_selector["nvidia.com/gpu.present"], "true",
        "an Operator-owned label: GPU feature discovery's can vanish while it is paused"
    );
    assert!(node_selector.get("nvidia.com/mig.capable").is_none(), "{node_selector}");
    // The agent holds NVML open: a driver upgrade that pauses the GPU clients must move it,
    // its own pause for a MIG change must not.
    let requirements = pod_node_requirements(agent);
    let client = requirements
        .iter()
        .find(|r| r.starts_with("nvidia.com/gpu.deploy.client "))
        .expect("the agent's node affinity reads the client label");
    let values: Vec<&str> = client.split_once(" NotIn ").expect(client).1.split(',').collect();
    for moved in ["paused-for-driver-upgrade", "paused-for-mig-change_paused-for-driver-upgrade"] {
        assert!(values.contains(&moved), "{client}");
    }
    for stays in ["true", "paused-for-mig-change"] {
        assert!(!values.contains(&stays), "{client}");
    }
}

/// A node requirement as text: `key=value`, or `key Operator [values]`.
fn requirement(key: &str, operator: &str, values: &Value) -> String {
    match values.as_array().filter(|v| !v.is_empty()) {
        Some(v) => {
            format!("{key} {operator} {}", v.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
        }
        None => format!("{key} {operator}"),
    }
}

/// What a label selector (matchLabels, matchExpressions) requires of a node.
fn selector_requirements(selector: &Value) -> std::collections::BTreeSet<String> {
    let mut out: std::collections::BTreeSet<String> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect();
    for e in selector["matchExpressions"].as_array().into_iter().flatten() {
        out.insert(requirement(e["key"].as_str().unwrap(), e["operator"].as_str().unwrap(), &e["values"]));
    }
    out
}

/// What a pod template's nodeSelector and required node affinity (one term) require.
fn pod_node_requirements(workload: &Value) -> std::collections::BTreeSet<String> {
    let spec = &workload["spec"]["template"]["spec"];
    let mut out: std::collections::BTreeSet<String> = spec["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect();
    let terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array();
    if let Some(terms) = terms {
        assert_eq!(terms.len(), 1, "the test compares one node selector term (several are ORed)");
        for e in terms[0]["matchExpressions"].as_array().into_iter().flatten() {
            out.insert(requirement(
                e["key"].as_str().unwrap(),
                e["operator"].as_str().unwrap(),
                &e["values"],
            ));
        }
    }
    out
}

#[test]
fn default_policy_is_dry_run_and_manages_exactly_the_nodes_with_an_agent() {
    if !kubectl_available() {
        return;
    }
    for dir in kustomizations().into_iter().filter(|d| d.contains("overlays/")) {
        let objects = render(&dir);
        let policy_doc = object(&objects, "MigPolicy", "default");
        let policy: MigPolicy = serde_json::from_value(policy_doc.clone()).unwrap();
        assert_eq!(policy.spec.mode, PolicyMode::DryRun, "{dir}");
        let policy_nodes = selector_requirements(&policy_doc["spec"]["nodeSelector"]);
        let agent_nodes = pod_node_requirements(object(&objects, "DaemonSet", "geometer-agent"));
        assert_eq!(
            policy_nodes, agent_nodes,
            "{dir}: a node the policy selects without an agent would never change; one with an agent but no policy is never planned"
        );
        assert!(
            policy_nodes.contains("geometer.dev/unmanaged DoesNotExist"),
            "{dir}: the documented opt-out label"
        );
    }
}

#[tokio::test]
async fn rendered_crds_and_default_policy_are_accepted_by_the_api_server() {
    if !kubectl_available() {
        return;
    }
    for dir in kustomizations().into_iter().filter(|d| d.contains("overlays/")) {
        let objects = render(&dir);
        let server = ApiServer::new();
        let client = server.client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
            let crd: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
            crds.create(&PostParams::default(), &crd)
                .await
                .unwrap_or_else(|e| panic!("{dir}: CRD {:?} refused: {e}", crd.metadata.name));
        }
        let policies: Api<MigPolicy> = Api::all(client);
        let policy: MigPolicy = object_as(&objects, "default");
        let created = policies
            .create(&PostParams::default(), &policy)
            .await
            .unwrap_or_else(|e| panic!("{dir}: MigPolicy refused: {e}"));
        assert_eq!(
            created.spec.disruption.max_nodes_reconfiguring, 1,
            "{dir}: defaults filled in by the CRD"
        );
    }
}
