//! The agent's manifests against the agent itself: the DaemonSet's arguments are ones `geometer`
//! accepts, and the ClusterRole allows every request the agent makes and nothing it never makes.

use geometer_testkit::agent as agent_support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use agent_support::{Harness, NODE, WORKLOADS};
use clap::Parser;
use geometer::cli::agent::AgentCommand;
use geometer::cli::{Cli, Command};
use geometer_agent::Agent;
use geometer_api::MigNode;
use serde_json::{json, Value};

fn manifests(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{}/deploy/base/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    serde_saphyr::from_multiple(&text).unwrap()
}

#[test]
fn the_daemonset_runs_geometer_agent_run_with_arguments_it_accepts() {
    let ds = manifests("agent-daemonset.yaml").into_iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().replace("$(NODE_NAME)", "gpu-node-7"))
        .collect();
    let cli = Cli::try_parse_from(std::iter::once("geometer".to_string()).chain(args))
        .expect("the DaemonSet's args parse");
    let Command::Agent(agent) = cli.command else { panic!("not the agent command") };
    let AgentCommand::Run(run) = agent.command else { panic!("not agent run") };
    assert_eq!(run.node, "gpu-node-7");
    assert!(run.simulate.is_empty(), "the real NVML backend by default");
    let env: Vec<&str> =
        container["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(env.contains(&"NODE_NAME"));
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(
        mounts.contains(&"/var/lib/kubelet/pod-resources"),
        "the PodResources socket's directory is mounted"
    );
    assert_eq!(ds["spec"]["template"]["spec"]["serviceAccountName"], "geometer-agent");
}

/// (API group, resource with subresource, verb) of one request, as RBAC sees it.
fn rbac_of(method: &str, uri: &http::Uri) -> Option<(String, String, String)> {
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        _ => rest,
    };
    let (resource, named) = match rest {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => return None,
    };
    let watch = uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match (method, named) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some((group, resource, verb.to_string()))
}

/// Every (group, resource, verb) the ClusterRole grants.
fn granted() -> BTreeSet<(String, String, String)> {
    let role = manifests("agent-rbac.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "geometer-agent")
        .unwrap();
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for g in rule["apiGroups"].as_array().unwrap() {
            for r in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    out.insert((
                        g.as_str().unwrap().into(),
                        r.as_str().unwrap().into(),
                        v.as_str().unwrap().into(),
                    ));
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_role_allows_exactly_what_the_agent_uses() {
    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.run_pod("first", 0, "3g.40gb", 0, &[], &[]);
    h.run_pod("second", 0, "3g.40gb", 4, &[], &[]);
    for (kind, body) in [
        (
            "MigPolicy",
            json!({"metadata": {"name": "pool"}, "spec": {"disruption": {"evictionAllowed": true}}}),
        ),
        ("MigPlan", json!({"metadata": {"name": "plan-1"}, "spec": {"policy": "pool"}})),
    ] {
        let mut v = body;
        v["apiVersion"] = json!("geometer.dev/v1alpha1");
        v["kind"] = json!(kind);
        h.server.seed_value(v).unwrap();
    }

    // The agent's own client, recording every request it sends.
    let seen: Arc<Mutex<Vec<(String, http::Uri)>>> = Arc::default();
    let log = seen.clone();
    let service = tower::ServiceBuilder::new()
        .map_request(move |req: http::Request<kube::client::Body>| {
            log.lock().unwrap().push((req.method().to_string(), req.uri().clone()));
            req
        })
        .service(h.server.service());
    let client = kube::Client::new(service, "default");
    let agent = Agent::new(h.config(), client, Arc::new(h.sim.clone()), Arc::new(h.assignments.clone()));
    let task = tokio::spawn(agent.run());
    // The agent creates its MigNode; then a change that evicts both pods (two Evicted events:
    // the second is folded into a series, which is a patch).
    h.wait_for("the agent's MigNode", |h| h.server.object::<MigNode>("", NODE)).await;
    let generation = h.set_spec(&[(0, &[("7g.80gb", 0)])]).await;
    h.wait_ready(generation).await;
    task.abort();
    assert_eq!(h.running(), Vec::<String>::new());
    assert!(!h.server.objects::<k8s_openapi::api::core::v1::Pod>().iter().any(|p| p
        .metadata
        .namespace
        .as_deref()
        == Some(WORKLOADS)));

    let used: BTreeSet<_> = seen.lock().unwrap().iter().filter_map(|(m, u)| rbac_of(m, u)).collect();
    let granted = granted();
    let missing: Vec<_> = used.difference(&granted).collect();
    assert!(missing.is_empty(), "the agent made requests its ClusterRole does not allow: {missing:?}");
    // DRA's kinds are read on DRA nodes only: the in-memory API server serves none, and the
    // end-to-end DRA tests (tests/k8s/dra.rs) run agents with this role against kube-apiserver.
    let unused: Vec<_> = granted.difference(&used).filter(|(group, ..)| group != "resource.k8s.io").collect();
    assert!(unused.is_empty(), "the ClusterRole grants what the agent never used: {unused:?}");
}
