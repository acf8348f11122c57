//! The controller and the agents killed with SIGKILL at random moments while demand shifts,
//! round after round; after every round the cluster has converged and the invariants hold: no
//! in-use instance destroyed, no stray cordon, no do-not-disrupt pod evicted. The seed is
//! printed; `GEOMETER_CHAOS_SEED=<seed>` replays a run, `GEOMETER_CHAOS_ROUNDS` sets how many.

use std::time::Duration;

use geometer_api::PolicyMode;
use geometer_simcluster::MigPod;
use geometer_testkit::e2e::policy;
use geometer_testkit::real_cluster::{RealCluster, NS};
use geometer_testkit::wait::wait_until;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::{operator, two_nodes};

const CONTROLLER: &str = "controller-0";

fn seed() -> u64 {
    std::env::var("GEOMETER_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    })
}

fn rounds() -> u32 {
    std::env::var("GEOMETER_CHAOS_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3)
}

/// Kills one of the controller and the agents, and starts it again a moment later.
async fn kill_one(k8s: &mut RealCluster, rng: &mut ChaCha8Rng) -> String {
    let mut victims: Vec<String> = k8s.sim.node_names();
    victims.push(CONTROLLER.to_string());
    let victim = victims[rng.random_range(0..victims.len())].clone();
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..2000))).await;
    if victim == CONTROLLER {
        k8s.kill_controller(CONTROLLER);
    } else {
        k8s.kill_agent(&victim);
    }
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
    if victim == CONTROLLER {
        k8s.start_controller(CONTROLLER);
    } else {
        k8s.start_agent(&victim);
    }
    victim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_moments_the_operator_still_converges_safely() {
    let seed = seed();
    eprintln!("chaos seed {seed} (replay with GEOMETER_CHAOS_SEED={seed})");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let Some(mut k8s) = operator("chaos", &two_nodes(), &policy(PolicyMode::Auto, true)).await else {
        return;
    };
    let pinned =
        MigPod::new(NS, "pinned").slice("7g.80gb", 1).annotation("karpenter.sh/do-not-disrupt", "true");
    k8s.deploy("pinned", 1, pinned.build()).await;
    let pinned_uid = wait_until(
        "the pinned pod running",
        || async { k8s.running_of("pinned").await.pop().map(|p| p.1) },
        || k8s.logs(),
    )
    .await;
    k8s.deploy("small", 0, MigPod::new(NS, "small").slice("1g.10gb", 1).build()).await;
    k8s.deploy("mid", 0, MigPod::new(NS, "mid").slice("3g.40gb", 1).build()).await;

    for round in 1..=rounds() {
        // Three whole GPUs are free of the pinned pod: enough for any of these.
        let (small, mid) = (rng.random_range(0..=7), rng.random_range(0..=2));
        k8s.scale("small", small).await;
        k8s.scale("mid", mid).await;
        let mut killed = Vec::new();
        for _ in 0..rng.random_range(2..=4) {
            killed.push(kill_one(&mut k8s, &mut rng).await);
        }
        let what =
            format!("round {round} (seed {seed}): {small} small and {mid} mid pods after killing {killed:?}");
        wait_until(
            &what,
            || async {
                k8s.check_alive();
                let converged = k8s.running_of("small").await.len() == small as usize
                    && k8s.running_of("mid").await.len() == mid as usize
                    && k8s.settled().await;
                converged.then_some(())
            },
            || k8s.logs(),
        )
        .await;
        // The invariants, after every round.
        assert_eq!(
            k8s.pods_without_devices(),
            Vec::<geometer_solver::PodKey>::new(),
            "{what}: an in-use instance was destroyed"
        );
        let pinned_now = k8s.running_of("pinned").await;
        assert_eq!(pinned_now.len(), 1, "{what}: {pinned_now:?}");
        assert_eq!(pinned_now[0].1, pinned_uid, "{what}: the do-not-disrupt pod was replaced");
        let evicted = k8s.evicted();
        assert!(!evicted.iter().any(|p| p.starts_with("pinned-")), "{what}: evicted {evicted:?}");
        eprintln!("{what}: converged; evictions so far {}", evicted.len());
    }
}
