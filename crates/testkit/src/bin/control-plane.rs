//! `control-plane`: the end-to-end suite's real control plane, started by hand (for `make
//! demo-k8s`, or to look around): etcd, kube-apiserver, kube-scheduler and
//! kube-controller-manager on loopback with `deploy/base` applied. Prints `KUBECONFIG=<path>`
//! (the admin's) once ready and runs until interrupted or terminated.
#![allow(clippy::unwrap_used)] // a developer tool: a failed unwrap stops it with the reason

use geometer_testkit::control_plane::{binaries, ControlPlane, Identity};
use geometer_testkit::real_cluster::install;
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() {
    let bins = binaries().unwrap_or_else(|why| {
        eprintln!("control-plane: {why}");
        std::process::exit(1);
    });
    let cp = ControlPlane::start(&bins).await;
    install(&cp);
    println!("KUBECONFIG={}", cp.kubeconfig(Identity::Admin).display());
    let mut term = signal(SignalKind::terminate()).unwrap();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("control-plane: stopping");
}
