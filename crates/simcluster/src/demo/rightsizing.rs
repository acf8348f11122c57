//! Right-sizing in the demo: while it runs, what the agents measured of the whole-GPU pods is
//! turned into recommendations (as `geometer recommend` does), and the summary says what the
//! over-provisioned `chat` Deployment should ask for.

use geometer_controller::adapter::PodView;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::Api;

use geometer_api::MigNode;
use geometer_controller::rightsizing::recommend::{recommend, Recommendation, Settings};
use geometer_solver::catalog::Catalog;

/// Samples a pod needs in the demo (its pods run for tens of seconds, not days).
const MIN_SAMPLES: u32 = 3;

/// The latest recommendation per workload and GPU model, with the most pods seen measured.
pub(super) type Seen = Arc<Mutex<BTreeMap<String, Recommendation>>>;

/// Recomputes the recommendations every second until aborted.
pub(super) async fn follow(client: kube::Client, namespace: &'static str, seen: Seen) {
    let settings = Settings { min_samples: MIN_SAMPLES, ..Settings::default() };
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mignodes = Api::<MigNode>::all(client.clone()).list(&ListParams::default()).await;
        let pods = Api::<Pod>::namespaced(client.clone(), namespace).list(&ListParams::default()).await;
        let (Ok(mignodes), Ok(pods)) = (mignodes, pods) else { continue };
        let usage: Vec<_> = mignodes.items.iter().flat_map(|m| m.usage().iter().cloned()).collect();
        let pods: Vec<PodView> = pods.items.iter().map(PodView::from).collect();
        let pods: Vec<&PodView> = pods.iter().collect();
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        for r in recommend(&usage, &pods, Catalog::builtin(), &settings) {
            let key = format!("{} {}", r.owner, r.model);
            let more = seen.get(&key).is_none_or(|old| r.pods.len() >= old.pods.len());
            if more {
                seen.insert(key, r);
            }
        }
    }
}
