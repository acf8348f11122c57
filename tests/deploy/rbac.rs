//! The ClusterRoles in deploy/ allow every API call the code makes, and nothing more.
//!
//! The agent and the controller run their integration scenarios against the in-memory API
//! server with clients that sign their requests; the server's request log then says which
//! (group, resource, verb, namespace) each made. Every call must be allowed by the rendered
//! RBAC for that component's ServiceAccount (namespaces and resourceNames included), and every
//! permission granted must have been used or be listed in a justification table below.

use geometer_testkit::agent as agent_support;
use geometer_testkit::deploy as deploy_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use agent_support::{Harness, NODE, WORKLOADS};
use deploy_support::observe::{accesses, client_as};
use deploy_support::rbac::{compare, Access, Authorizer};
use deploy_support::{kubectl_available, kustomizations, render};
use geometer_agent::Agent;
use geometer_agent::Backoff;
use geometer_api::{MigNode, MigNodeStatus, MigPlan, MigPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::json;

const NAMESPACE: &str = "geometer-system";
const AGENT: &str = "geometer-agent";

/// Permissions granted although no scenario exercises them, each with the reason it is needed.
/// (group, resource, verb, reason)
const AGENT_UNOBSERVED: &[(&str, &str, &str, &str)] = &[
    (
        "resource.k8s.io",
        "resourceslices",
        "list",
        "DRA nodes only; the in-memory API server serves no DRA, and tests/k8s/dra.rs runs agents with this role against kube-apiserver on static-MIG DRA nodes",
    ),
    (
        "resource.k8s.io",
        "resourceclaims",
        "list",
        "DRA nodes only, before an instance is destroyed; exercised by tests/k8s/dra.rs against kube-apiserver",
    ),
];

/// Starts an agent on the harness's node whose requests are signed `geometer-agent`.
fn spawn_signed_agent(h: &Harness, cfg: geometer_agent::AgentConfig) -> tokio::task::JoinHandle<()> {
    let agent = Agent::new(
        cfg,
        client_as(&h.server, AGENT),
        Arc::new(h.sim.clone()),
        Arc::new(h.assignments.clone()),
    );
    tokio::spawn(agent.run())
}

fn condition_true(h: &Harness, type_: &str, reason: &str) -> Option<()> {
    let status = h.mignode().status?;
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True" && c.reason == reason)
        .then_some(())
}

/// Everything the agent does on a node: create its MigNode, cordon, evict (refused by a budget,
/// then allowed), repartition, restart the device plugin, uncordon; a drain blocked by a
/// do-not-disrupt pod until it times out, twice (repeated events fold into a series); and a
/// change on a GPU Operator node, inside a pause window of its operands.
async fn agent_scenarios() -> BTreeSet<Access> {
    let mut seen = BTreeSet::new();

    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.run_pod("guarded", 0, "7g.80gb", 0, &[], &[("app", "guarded")]);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guarded", "namespace": WORKLOADS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }))
    .unwrap();
    h.server.seed(&pdb).unwrap();
    // The drain follows the rules of the policy behind the plan the MigNode spec names.
    let policy: MigPolicy = serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPolicy", "metadata": {"name": "pool"},
        "spec": {"mode": "Auto", "disruption": {"evictionAllowed": true}},
    }))
    .unwrap();
    let plan: MigPlan = serde_json::from_value(json!({
        "apiVersion": "geometer.dev/v1alpha1", "kind": "MigPlan", "metadata": {"name": "plan-1"}, "spec": {"policy": "pool"},
    }))
    .unwrap();
    h.server.seed(&policy).unwrap();
    h.server.seed(&plan).unwrap();
    let agent = spawn_signed_agent(&h, h.config());
    h.wait_for("the agent creates its MigNode", |h| h.server.object::<MigNode>("", NODE)).await;
    let generation = h.set_spec(&[(0, &[("4g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.wait_for("a budget refusal", |h| {
        condition_true(h, MigNodeStatus::DRAIN_BLOCKED, "PodDisruptionBudget")
    })
    .await;
    Api::<PodDisruptionBudget>::namespaced(h.client.clone(), WORKLOADS)
        .delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    h.wait_ready(generation).await;
    agent.abort();
    assert_eq!(h.geometry(0), vec!["3g.40gb@4", "4g.40gb@0"], "the scenario ran to its end");
    seen.extend(accesses(&h.server, AGENT));

    let h = Harness::new(&[("H100-80GB", &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.run_pod("precious", 0, "3g.40gb", 4, &[("geometer.dev/do-not-disrupt", "true")], &[]);
    let mut cfg = h.config();
    cfg.drain.timeout = Duration::from_millis(300);
    cfg.backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(100));
    let agent = spawn_signed_agent(&h, cfg);
    h.set_spec(&[(0, &[("3g.40gb", 0), ("1g.10gb", 4)])]).await;
    h.wait_for("a repeated drain timeout", |h| {
        let count: i32 = h
            .events_with_reason("DrainTimeout")
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        (count >= 2).then_some(())
    })
    .await;
    agent.abort();
    seen.extend(accesses(&h.server, AGENT));

    // A GPU Operator node: the operands' labels paused and restored, their pods watched on the
    // node, the validators evicted.
    let h = Harness::with_gpu_operator(&[(
        "H100-80GB",
        &[("7g.80gb", 0)],
        agent_support::SimGpuOptions::default(),
    )])
    .await;
    let agent = spawn_signed_agent(&h, h.config());
    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.wait_ready(generation).await;
    agent.abort();
    assert!(!h.events_with_reason("OperandsRestored").is_empty(), "the scenario paused and restored");
    seen.extend(accesses(&h.server, AGENT));
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_rbac_allows_exactly_the_calls_the_agent_makes() {
    if !kubectl_available() {
        return;
    }
    let seen = agent_scenarios().await;
    assert!(seen.iter().any(|a| a.resource == "pods/eviction"), "the scenarios evict: {seen:#?}");
    for dir in kustomizations() {
        let objects = render(&dir);
        let authorizer = Authorizer::for_service_account(&objects, NAMESPACE, AGENT);
        compare("agent", &dir, &authorizer, &seen, AGENT_UNOBSERVED);
    }
}
