//! `geometer plan` without `--snapshot` (as a kubectl plugin: `kubectl geometer plan`): what
//! the controller would plan now for each MigPolicy, read from the cluster. Read-only: it
//! lists objects and writes nothing.

use geometer_controller::adapter::PodView;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use geometer_solver::catalog::Catalog;
use geometer_solver::plan::Plan;
use k8s_openapi::api::core::v1::Node;
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::args::PlanArgs;
use crate::cli::cluster::list;
use crate::cli::output::{self, Failure};
use geometer_api::{MigNode, MigPolicy};
use geometer_controller::round;
use geometer_controller::round as policy_status;

#[derive(Debug, Serialize)]
struct PolicyPlan {
    policy: String,
    mode: String,
    /// Why the policy cannot be planned (invalid), if it cannot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    problems: Vec<String>,
    /// Managed nodes left out until they settle, with why.
    excluded: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<Plan>,
}

pub(super) fn run(args: &PlanArgs, catalog: Catalog) -> Result<(), Failure> {
    if args.policy.is_some() {
        return Err(Failure::bad_input(anyhow!(
            "--policy FILE goes with --snapshot; without --snapshot the cluster's MigPolicies are used"
        )));
    }
    let runtime = tokio::runtime::Runtime::new().map_err(|e| Failure::internal(e.into()))?;
    let results = runtime.block_on(async {
        let client = Client::try_default().await.map_err(|e| {
            Failure::bad_input(anyhow!("no --snapshot and no cluster to read ({e}); give --snapshot FILE or point KUBECONFIG at a cluster"))
        })?;
        let nodes = list::<Node>(&client).await?;
        let pods = list::<PodView>(&client).await?;
        let mignodes: BTreeMap<String, Arc<MigNode>> = list::<MigNode>(&client).await?.into_iter().map(|m| (m.name_any(), m)).collect();
        let mut policies = list::<MigPolicy>(&client).await?;
        policies.sort_by_key(|p| p.name_any());
        let (pod_groups, unreadable) = geometer_controller::list_pod_groups(&client)
            .await
            .map_err(|e| Failure::internal(anyhow!("cannot list PodGroups: {e}")))?;
        for why in unreadable {
            eprintln!("warning: {why}; its pods are planned on their own");
        }
        let dra = Arc::new(geometer_controller::list_dra(&client).await.map_err(|e| {
            Failure::internal(anyhow!("cannot list ResourceSlices, ResourceClaims, their templates or DeviceClasses: {e}"))
        })?);
        let cluster = Cluster { nodes: &nodes, pods: &pods, mignodes: &mignodes, pod_groups: &pod_groups, dra: &dra };
        Ok::<_, Failure>(plan_all(args, &catalog, &cluster, &policies))
    })?;
    if results.is_empty() {
        return Err(Failure::no(anyhow!(
            "no MigPolicy in the cluster, so no node is managed; create one (see examples/policy-*.yaml)"
        )));
    }
    output::print(args.output, &results, || render(&results, &catalog))
}

/// What `geometer plan` read from the cluster.
struct Cluster<'a> {
    nodes: &'a [Arc<Node>],
    pods: &'a [Arc<PodView>],
    mignodes: &'a BTreeMap<String, Arc<MigNode>>,
    pod_groups: &'a [geometer_controller::adapter::gangs::PodGroupMin],
    dra: &'a Arc<geometer_controller::dra::objects::DraObjects>,
}

fn plan_all(
    args: &PlanArgs,
    catalog: &Catalog,
    cluster: &Cluster<'_>,
    policies: &[Arc<MigPolicy>],
) -> Vec<PolicyPlan> {
    let Cluster { nodes, pods, mignodes, pod_groups, dra } = *cluster;
    let facts = policy_status::node_facts(nodes, mignodes, catalog);
    let reports = policy_status::validate(policies, &facts, &policy_status::known_profiles(catalog));
    let node_map: BTreeMap<String, Arc<Node>> = nodes.iter().map(|n| (n.name_any(), n.clone())).collect();
    let mut out = Vec::new();
    for policy in policies {
        let name = policy.name_any();
        let report = reports.get(&name).cloned().unwrap_or_default();
        let mut entry = PolicyPlan {
            policy: name,
            mode: format!("{:?}", policy.spec.mode),
            problems: report.problems.iter().map(|p| p.message.clone()).collect(),
            excluded: BTreeMap::new(),
            plan: None,
        };
        if report.is_valid() {
            let input = round::RoundInput {
                policy,
                managed: &report.matched_nodes,
                nodes: &node_map,
                mignodes,
                pods,
                requests: &Default::default(),
                inventories: &Default::default(),
                pod_groups,
                dra,
                now: jiff::Timestamp::now(),
            };
            match round::prepare(&input, catalog) {
                Ok(prepared) => {
                    entry.excluded = prepared.excluded.iter().cloned().collect();
                    let mut options = round::options(policy);
                    if let Some(ms) = args.time_limit_ms {
                        options.time_limit = Some(Duration::from_millis(ms));
                    }
                    match args.solver.plan(&prepared.snapshot, catalog, &options) {
                        Ok(mut plan) => {
                            plan.notes.extend(prepared.warnings);
                            entry.plan = Some(plan);
                        }
                        Err(e) => entry.problems.push(format!("the planner rejected the snapshot: {e}")),
                    }
                }
                Err(e) => entry.problems.push(format!("cannot read the cluster: {e}")),
            }
        }
        out.push(entry);
    }
    out
}

fn render(results: &[PolicyPlan], catalog: &Catalog) -> String {
    let mut text = String::new();
    for r in results {
        text.push_str(&format!("== MigPolicy {} ({}) ==\n", r.policy, r.mode));
        for p in &r.problems {
            text.push_str(&format!("not planned: {p}\n"));
        }
        for (node, why) in &r.excluded {
            text.push_str(&format!("left out: node {node}: {why}\n"));
        }
        if let Some(plan) = &r.plan {
            text.push_str(&plan.render_table_with(catalog));
        }
        text.push('\n');
    }
    text
}
