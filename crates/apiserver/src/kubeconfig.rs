//! A kubeconfig that points kubectl (or any client) at the server's HTTP address.

use std::net::SocketAddr;

pub(crate) const CONTEXT: &str = "geometer-apiserver";

pub(crate) fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT}
  cluster:
    server: http://{addr}
contexts:
- name: {CONTEXT}
  context:
    cluster: {CONTEXT}
    user: {CONTEXT}
    namespace: default
current-context: {CONTEXT}
users:
- name: {CONTEXT}
  user: {{}}
preferences: {{}}
"
    )
}
