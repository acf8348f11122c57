//! The Helm chart on the real control plane: `helm install` creates every object of the
//! release (the API server validates them), `helm uninstall` removes them all and leaves the
//! CRDs (Helm never deletes what it installed from `crds/`).

use std::process::Command;

use geometer_testkit::control_plane::{helm, start_or_skip, Identity};
use geometer_testkit::deploy::repo;

/// Kinds the chart creates (besides the CRDs).
const KINDS: &str = "deployments,daemonsets,services,serviceaccounts,poddisruptionbudgets,roles,rolebindings,clusterroles,clusterrolebindings,mutatingwebhookconfigurations,validatingwebhookconfigurations,validatingadmissionpolicies,validatingadmissionpolicybindings,migpolicies";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_then_uninstall_leaves_only_the_crds() {
    let Some(cp) = start_or_skip("helm install").await else { return };
    let helm = helm().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = cp.kubeconfig(Identity::Admin);
    let run = |args: &[&str]| {
        let out = Command::new(&helm)
            .args(args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(out.status.success(), "helm {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ours = || {
        cp.kubectl(
            Identity::Admin,
            &["get", KINDS, "-A", "-l", "app.kubernetes.io/part-of=geometer", "-o", "name"],
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    run(&[
        "install",
        "geometer",
        "deploy/helm/geometer",
        "-n",
        "geometer-system",
        "--create-namespace",
        "--set",
        "policy.mode=DryRun",
    ]);
    let installed = ours();
    for object in [
        "deployment.apps/geometer-controller",
        "daemonset.apps/geometer-agent",
        "service/geometer-webhook",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/geometer-rightsizing",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/geometer-agent-evictions",
        "validatingadmissionpolicy.admissionregistration.k8s.io/geometer-agent-own-node",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/geometer-agent-own-node",
        "validatingadmissionpolicy.admissionregistration.k8s.io/geometer-controller-own-secret",
        "migpolicy.geometer.dev/default",
        "clusterrole.rbac.authorization.k8s.io/geometer-controller",
    ] {
        assert!(installed.lines().any(|l| l == object), "{object} installed:\n{installed}");
    }
    run(&["uninstall", "geometer", "-n", "geometer-system", "--wait"]);
    assert_eq!(ours().trim(), "", "nothing of the release is left");
    let crds = cp.kubectl(Identity::Admin, &["get", "crds", "-o", "name"]).unwrap_or_else(|e| panic!("{e}"));
    for crd in ["migpolicies", "migplans", "mignodes"] {
        assert!(crds.contains(&format!("{crd}.geometer.dev")), "the CRDs stay: {crds}");
    }
}
