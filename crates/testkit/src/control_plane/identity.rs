//! Who talks to the control plane: one static token per identity (kube-apiserver
//! `--token-auth-file`, a CSV of `token,user,uid,"group,..."`), and a kubeconfig for each.
//! The controller and the agent authenticate as their ServiceAccounts' users, so RBAC grants
//! them exactly what `deploy/`'s bindings grant those ServiceAccounts.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The namespace `deploy/base` installs into.
pub const GEOMETER_NAMESPACE: &str = "geometer-system";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// `system:masters`: installs the manifests, creates workloads, reads everything.
    Admin,
    /// ServiceAccount `geometer-system/geometer-controller`.
    Controller,
    /// ServiceAccount `geometer-system/geometer-agent`.
    Agent,
    /// The simulated cluster's side of the simulated kubelets (as `system:masters`): the pod
    /// watch, the device plugin DaemonSet's pods, the DRA driver's slices. What each kubelet
    /// itself writes goes out as its node (`ControlPlane::node_client`).
    Kubelet,
    Scheduler,
    ControllerManager,
}

impl Identity {
    pub const ALL: [Identity; 6] = [
        Identity::Admin,
        Identity::Controller,
        Identity::Agent,
        Identity::Kubelet,
        Identity::Scheduler,
        Identity::ControllerManager,
    ];

    fn name(self) -> &'static str {
        match self {
            Identity::Admin => "admin",
            Identity::Controller => "controller",
            Identity::Agent => "agent",
            Identity::Kubelet => "kubelet",
            Identity::Scheduler => "scheduler",
            Identity::ControllerManager => "controller-manager",
        }
    }

    /// The user name the API server authenticates this identity as.
    pub fn username(self) -> String {
        self.user().0
    }

    /// User name and groups as the API server authenticates them.
    fn user(self) -> (String, &'static str) {
        let sa = |name: &str| format!("system:serviceaccount:{GEOMETER_NAMESPACE}:{name}");
        let sa_groups = "system:serviceaccounts,system:serviceaccounts:geometer-system";
        match self {
            Identity::Admin => ("geometer-admin".into(), "system:masters"),
            Identity::Controller => (sa("geometer-controller"), sa_groups),
            Identity::Agent => (sa("geometer-agent"), sa_groups),
            Identity::Kubelet => ("geometer-sim-kubelet".into(), "system:masters"),
            Identity::Scheduler => ("system:kube-scheduler".into(), ""),
            Identity::ControllerManager => ("system:kube-controller-manager".into(), ""),
        }
    }
}

pub(crate) fn token(id: Identity) -> String {
    format!("geometer-e2e-{}-token", id.name())
}

pub(crate) fn token_file(dir: &Path) -> PathBuf {
    dir.join("tokens.csv")
}

/// The identities above, and a kubelet identity for each of `nodes` (`system:node:<name>` in
/// `system:nodes`, which the Node authorizer and the NodeRestriction admission plugin bind to
/// that node).
pub(crate) fn write_token_file(dir: &Path, nodes: &[String]) {
    let mut lines: Vec<String> = Identity::ALL
        .iter()
        .map(|&id| {
            let (user, groups) = id.user();
            format!("{},{user},uid-{},\"{groups}\"", token(id), id.name())
        })
        .collect();
    for node in nodes {
        lines.push(format!("{},system:node:{node},uid-node-{node},\"system:nodes\"", node_token(node)));
    }
    std::fs::write(token_file(dir), lines.join("\n") + "\n").expect("token file");
}

pub(crate) fn node_token(node: &str) -> String {
    format!("geometer-e2e-node-{node}-token")
}

pub(crate) fn node_kubeconfig_path(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("node-{node}.kubeconfig"))
}

pub(crate) fn service_account_key(dir: &Path) -> PathBuf {
    dir.join("service-account.key")
}

/// The key that signs ServiceAccount tokens (kube-apiserver) and their Secrets
/// (kube-controller-manager): an EC P-256 key from openssl.
pub(crate) fn write_service_account_key(dir: &Path) {
    let key = service_account_key(dir);
    let out = Command::new("openssl")
        .args(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"])
        .arg(&key)
        .output()
        .expect("openssl runs (install it with the distribution's openssl package)");
    assert!(out.status.success(), "openssl ecparam -genkey: {}", String::from_utf8_lossy(&out.stderr));
}

pub(crate) fn kubeconfig_path(dir: &Path, id: Identity) -> PathBuf {
    dir.join(format!("{}.kubeconfig", id.name()))
}

/// Trusts the API server's own serving certificate (it writes it to `--cert-dir` at start).
pub(crate) fn write_kubeconfig(dir: &Path, server: &str, id: Identity) {
    write_token_kubeconfig(&kubeconfig_path(dir, id), server, id.name(), &token(id));
}

/// A kubeconfig at `path` that authenticates with `token` as user `name`.
pub(crate) fn write_token_kubeconfig(path: &Path, server: &str, name: &str, token: &str) {
    let ca = path.parent().expect("a folder").join("certs/apiserver.crt");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
         users:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: e2e\n    user: {name}\n\
         current-context: {name}\n",
        ca.display(),
    );
    std::fs::write(path, text).expect("kubeconfig");
}
