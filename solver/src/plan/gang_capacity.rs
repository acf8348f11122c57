//! Gangs no geometry could ever hold: more slices than every eligible GPU laid out for the
//! gang's profile alone offers, whatever else runs.

use std::collections::BTreeMap;

use crate::catalog::Catalog;
use crate::snapshot::{Freeable, Pod, Snapshot};

/// Per gang that can never be complete: why. Only gangs whose pending members all ask for the
/// same slices are judged (mixed requests would need the geometry search itself).
pub(crate) fn never_fits(snapshot: &Snapshot, catalog: &Catalog) -> BTreeMap<String, String> {
    let mut members: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for pod in &snapshot.pending {
        if let Some(g) = &pod.gang {
            members.entry(g).or_default().push(pod);
        }
    }
    let mut out = BTreeMap::new();
    for gang in &snapshot.gangs {
        let Some(pods) = members.get(gang.name.as_str()) else { continue };
        let need = gang.min_members.saturating_sub(gang.members_counted);
        if need == 0 || pods.iter().any(|p| p.requests != pods[0].requests) {
            continue;
        }
        if let Some(why) = short_of(snapshot, catalog, pods, need) {
            out.insert(gang.name.clone(), why);
        }
    }
    out
}

/// Why `need` pods like `pods[0]` never fit the GPUs their constraints allow, if they never do.
fn short_of(snapshot: &Snapshot, catalog: &Catalog, pods: &[&Pod], need: u32) -> Option<String> {
    // Resources are left out: they change as pods come and go, geometry limits do not.
    let any = Freeable { cpu_millis: u64::MAX / 4, memory_bytes: u64::MAX / 4 };
    let nodes: Vec<_> = snapshot
        .nodes
        .iter()
        .filter(|n| pods.iter().any(|p| crate::snapshot::eligibility_after_evictions(p, n, any).is_ok()))
        .collect();
    let gpus: Vec<_> = nodes.iter().flat_map(|n| &n.gpus).collect();
    for (profile, &count) in &pods[0].requests {
        let wanted = u64::from(need) * u64::from(count);
        let most: u64 = gpus
            .iter()
            .filter_map(|g| catalog.find(&g.model))
            .filter_map(|m| m.profile(profile).map(|id| u64::from(m.profile_info(id).max_instances)))
            .sum();
        if most < wanted {
            return Some(format!(
                "{need} members x {count} {profile} need {wanted}, and the {} eligible GPUs hold at most {most}",
                gpus.len()
            ));
        }
    }
    None
}
