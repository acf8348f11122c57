//! The whole operator against the real Kubernetes control plane (etcd, kube-apiserver,
//! kube-scheduler, kube-controller-manager built by `scripts/k8s-control-plane.sh`), with only
//! the kubelets and GPUs simulated. The controller and the agents run as `geometer` processes
//! with their ServiceAccounts' tokens and `deploy/`'s RBAC; workloads are real Deployments, so
//! evicted pods come back through the real ReplicaSet controller.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod agent_identity;
mod cel_rules;
mod chaos;
mod crd_bounds;
mod demand_shift;
mod demo;
mod differential;
mod disruption;
mod dra;
mod dynamic_mig;
mod gpu_operator;
mod helm;
mod leader;
mod pod_groups;
mod rbac;
mod review;
mod rightsizing;
mod rightsizing_webhook;
mod support;
mod whole_gpus;
