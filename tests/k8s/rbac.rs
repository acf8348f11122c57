//! deploy/'s RBAC grants the controller and the agent what they use, and nothing more, as the
//! real API server saw it: both run as processes with their ServiceAccounts' tokens against
//! kube-apiserver (RBAC and the Node authorizer on), the whole way from a pending pod to a
//! drained and repartitioned node, and the server's audit log records each of their requests
//! with the authorizer's decision. Every request must have been allowed, and every permission
//! of the rendered roles (deploy/base and each overlay) must have been used or be justified in
//! a table below. (Every other scenario on the real control plane also fails on any call RBAC
//! refused: `RealCluster`'s drop.)

use std::collections::BTreeSet;

use geometer_testkit::control_plane::{Identity, GEOMETER_NAMESPACE};
use geometer_testkit::deploy::rbac::{compare, Access, Authorizer};
use geometer_testkit::deploy::{kustomizations, render};
use geometer_testkit::real_cluster::RealCluster;

use crate::support::{fragmented, running};

/// Permissions the agent holds that this scenario does not use, each with the reason and the
/// scenario on the real control plane that uses them (with RBAC enforced there too).
/// (group, resource, verb, reason)
const AGENT_UNOBSERVED: &[(&str, &str, &str, &str)] = &[
    (
        "resource.k8s.io",
        "resourceclaims",
        "list",
        "on a static-MIG DRA node before an instance is destroyed, to keep the devices allocated claims hold (tests/k8s/dra.rs)",
    ),
    (
        "events.k8s.io",
        "events",
        "patch",
        "a repeated event (a drain blocked again) folds into one series; this scenario may not repeat one",
    ),
];

/// The same for the controller.
const CONTROLLER_UNOBSERVED: &[(&str, &str, &str, &str)] = &[
    (
        "resource.k8s.io",
        "devicetaintrules",
        "create",
        "DynamicMIG compaction guards the placement it opens (tests/k8s/dynamic_mig.rs)",
    ),
    (
        "resource.k8s.io",
        "devicetaintrules",
        "delete",
        "DynamicMIG compaction removes its guards once done (tests/k8s/dynamic_mig.rs)",
    ),
    ("", "secrets", "update", "the webhook's certificate, renewed before it expires"),
    (
        "scheduling.x-k8s.io",
        "podgroups",
        "list",
        "only where the coscheduling PodGroup CRD is installed (tests/k8s/pod_groups.rs)",
    ),
    (
        "scheduling.x-k8s.io",
        "podgroups",
        "watch",
        "only where the coscheduling PodGroup CRD is installed (tests/k8s/pod_groups.rs)",
    ),
    ("scheduling.volcano.sh", "podgroups", "list", "only where Volcano's PodGroup CRD is installed"),
    ("scheduling.volcano.sh", "podgroups", "watch", "only where Volcano's PodGroup CRD is installed"),
    (
        "events.k8s.io",
        "events",
        "patch",
        "a repeated event folds into one series; this scenario may not repeat one",
    ),
];

/// What `id` asked of the API server.
fn used(k8s: &RealCluster, id: Identity) -> BTreeSet<Access> {
    k8s.cp.requests_of(id).into_iter().map(|r| r.access).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_rbac_grants_the_controller_and_the_agent_exactly_what_they_use() {
    let Some((k8s, _)) = fragmented("rbac", false).await else { return };
    running(&k8s, "whole", 1).await;
    let denied = k8s.rbac_denials();
    assert!(denied.is_empty(), "RBAC refused:\n  {}", denied.join("\n  "));
    let agent = used(&k8s, Identity::Agent);
    let controller = used(&k8s, Identity::Controller);
    for (what, resource) in
        [("the agent evicted", "pods/eviction"), ("the agent wrote status", "mignodes/status")]
    {
        assert!(agent.iter().any(|a| a.resource == resource), "{what}: {agent:#?}");
    }
    assert!(
        controller.iter().any(|a| a.resource == "migplans" && a.verb == "create"),
        "the controller published a plan: {controller:#?}"
    );
    for dir in kustomizations() {
        let objects = render(&dir);
        let agent_rbac = Authorizer::for_service_account(&objects, GEOMETER_NAMESPACE, "geometer-agent");
        compare("agent", &dir, &agent_rbac, &agent, AGENT_UNOBSERVED);
        let controller_rbac =
            Authorizer::for_service_account(&objects, GEOMETER_NAMESPACE, "geometer-controller");
        compare("controller", &dir, &controller_rbac, &controller, CONTROLLER_UNOBSERVED);
    }
}
