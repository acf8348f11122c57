//! Gangs as clusters declare them: which pods must start together, and how many of them.
//!
//! - scheduler-plugins coscheduling: pods labelled `scheduling.x-k8s.io/pod-group: <name>`, and
//!   a `scheduling.x-k8s.io` PodGroup of that name with `spec.minMember`
//!   (kubernetes-sigs/scheduler-plugins `pkg/coscheduling/README.md`,
//!   `apis/scheduling/v1alpha1/types.go`).
//! - Volcano: pods annotated `scheduling.k8s.io/group-name` (or
//!   `scheduling.volcano.sh/group-name`), and a `scheduling.volcano.sh` PodGroup with
//!   `spec.minMember` (volcano-sh/apis `pkg/apis/scheduling/v1beta1/labels.go`, `types.go`).
//! - Kueue plain pod groups: pods labelled `kueue.x-k8s.io/pod-group-name: <name>` and annotated
//!   `kueue.x-k8s.io/pod-group-total-count: "<n>"`; the group is complete with n pods (Kueue's
//!   "Plain Pod" group documentation, kubernetes-sigs/kueue `pkg/controller/jobs/pod`).
//!
//! Upstream Kubernetes' own gang scheduling (a Workload's pod group with `policy.gang.minCount`,
//! alpha behind the GenericWorkload gate since 1.35) is not read: it is off by default through
//! 1.37, and the Pod field naming the group changed between releases (`spec.workloadRef` in the
//! 1.35 API, `spec.schedulingGroup` in 1.36's).
//!
//! A gang's size is its minimum; its members that run already, or ask for no GPU, count
//! towards it. A pod in no gang is a gang of one.

use crate::adapter::PodView;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use geometer_solver::snapshot::{Gang, PodKey, MAX_GANG_MEMBERS};

use super::{pods, AdapterError};

/// Which declaration a gang comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Coscheduling,
    Volcano,
    Kueue,
}

pub const COSCHEDULING_GROUP: &str = "scheduling.x-k8s.io";
pub const COSCHEDULING_LABEL: &str = "scheduling.x-k8s.io/pod-group";
pub const VOLCANO_GROUP: &str = "scheduling.volcano.sh";
pub const VOLCANO_ANNOTATIONS: [&str; 2] =
    ["scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"];
pub const KUEUE_LABEL: &str = "kueue.x-k8s.io/pod-group-name";
pub const KUEUE_TOTAL: &str = "kueue.x-k8s.io/pod-group-total-count";

/// A PodGroup object's minimum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodGroupMin {
    pub source: Source,
    pub namespace: String,
    pub name: String,
    pub min_members: u32,
}

/// The PodGroup in `object` (any `scheduling.x-k8s.io` or `scheduling.volcano.sh` version), or
/// `None` for another kind; an error names the object, field and value.
pub fn pod_group(object: &Value) -> Result<Option<PodGroupMin>, AdapterError> {
    if object.get("kind").and_then(Value::as_str) != Some("PodGroup") {
        return Ok(None);
    }
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let source = match api_version.split('/').next() {
        Some(COSCHEDULING_GROUP) => Source::Coscheduling,
        Some(VOLCANO_GROUP) => Source::Volcano,
        _ => return Ok(None),
    };
    let text =
        |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string();
    let (namespace, name) = (text("/metadata/namespace"), text("/metadata/name"));
    let raw = object.pointer("/spec/minMember").cloned().unwrap_or(Value::Null);
    let min_members =
        raw.as_u64().filter(|&n| (1..=u64::from(MAX_GANG_MEMBERS)).contains(&n)).ok_or_else(|| {
            AdapterError::Field {
                object: format!("PodGroup {namespace}/{name} ({api_version})"),
                field: "spec.minMember".into(),
                value: raw.to_string(),
                problem: format!("expected a whole number from 1 to {MAX_GANG_MEMBERS}"),
            }
        })?;
    Ok(Some(PodGroupMin { source, namespace, name, min_members: min_members as u32 }))
}

/// The gang a pod declares: its source, `namespace/name`, and the minimum it states itself
/// (Kueue's total count; PodGroups state theirs in the PodGroup object).
fn declared(pod: &PodView) -> Result<Option<(Source, String, Option<u32>)>, AdapterError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let labels = pod.metadata.labels.as_ref();
    let annotations = pod.metadata.annotations.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).filter(|v| !v.is_empty());
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).filter(|v| !v.is_empty());
    if let Some(group) = label(COSCHEDULING_LABEL) {
        return Ok(Some((Source::Coscheduling, format!("{namespace}/{group}"), None)));
    }
    if let Some(group) = VOLCANO_ANNOTATIONS.iter().find_map(|k| annotation(k)) {
        return Ok(Some((Source::Volcano, format!("{namespace}/{group}"), None)));
    }
    let Some(group) = label(KUEUE_LABEL) else { return Ok(None) };
    let total = annotation(KUEUE_TOTAL).ok_or_else(|| AdapterError::Field {
        object: format!("pod {}", pods::key(pod)),
        field: format!("metadata.annotations[{KUEUE_TOTAL}]"),
        value: "(absent)".into(),
        problem: format!("a Kueue pod group ({KUEUE_LABEL}: {group}) needs its total count"),
    })?;
    let min = total.parse::<u32>().ok().filter(|n| (1..=MAX_GANG_MEMBERS).contains(n)).ok_or_else(|| {
        AdapterError::Field {
            object: format!("pod {}", pods::key(pod)),
            field: format!("metadata.annotations[{KUEUE_TOTAL}]"),
            value: format!("{total:?}"),
            problem: format!("expected a whole number from 1 to {MAX_GANG_MEMBERS}"),
        }
    })?;
    Ok(Some((Source::Kueue, format!("{namespace}/{group}"), Some(min))))
}

/// Whether `pod` says it is in a gang (however well).
pub fn declares_gang(pod: &PodView) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let annotations = pod.metadata.annotations.as_ref();
    labels.is_some_and(|l| l.contains_key(COSCHEDULING_LABEL) || l.contains_key(KUEUE_LABEL))
        || annotations.is_some_and(|a| VOLCANO_ANNOTATIONS.iter().any(|k| a.contains_key(*k)))
}

/// The gangs of the cluster and the gang of each pending pod that asks for slices.
#[derive(Debug, Default)]
pub struct Gangs {
    pub gangs: Vec<Gang>,
    pub of_pod: BTreeMap<PodKey, String>,
}

/// Reads every pod's gang. `asks_for_slices[i]`: whether pod `i` asks for MIG slices or whole
/// GPUs (`None`: its requests could not be read). A pod whose declaration cannot be read is
/// planned on its own, and said why; so are pods naming a PodGroup that is not there.
pub fn gangs(
    all_pods: &[Arc<PodView>],
    asks_for_slices: &[Option<bool>],
    groups: &[PodGroupMin],
    warnings: &mut Vec<String>,
    skipped: &mut Vec<AdapterError>,
) -> Gangs {
    let minimum: BTreeMap<(Source, String), u32> =
        groups.iter().map(|g| ((g.source, format!("{}/{}", g.namespace, g.name)), g.min_members)).collect();
    let mut out = Gangs::default();
    let mut members: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    let mut missing: BTreeMap<String, usize> = BTreeMap::new();
    for (pod, asks) in all_pods.iter().zip(asks_for_slices) {
        if pods::is_terminal(pod) {
            continue;
        }
        let (source, name, stated) = match declared(pod) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                skipped.push(e);
                continue;
            }
        };
        let Some(min) = stated.or_else(|| minimum.get(&(source, name.clone())).copied()) else {
            *missing.entry(name).or_default() += 1;
            continue;
        };
        let (gang_min, counted) = members.entry(name.clone()).or_insert((min, 0));
        *gang_min = (*gang_min).max(min);
        if pods::bound_node(pod).is_some() || *asks != Some(true) {
            *counted += 1;
        } else {
            out.of_pod.insert(pods::key(pod), name);
        }
    }
    for (name, pods) in missing {
        warnings.push(format!(
            "{pods} pod(s) name PodGroup {name}, which is not in the input: each is planned on its own"
        ));
    }
    out.gangs = members
        .into_iter()
        .map(|(name, (min_members, members_counted))| Gang { name, min_members, members_counted })
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, labels: Value, annotations: Value, node: Option<&str>) -> Arc<PodView> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml", "labels": labels, "annotations": annotations},
                "spec": {"containers": [], "nodeName": node},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn each_declaration_names_its_gang_and_minimum() {
        let groups = [
            pod_group(&json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "train", "namespace": "ml"}, "spec": {"minMember": 3}}))
            .unwrap()
            .unwrap(),
            pod_group(&json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "vc", "namespace": "ml"}, "spec": {"minMember": 2, "queue": "default"}}))
            .unwrap()
            .unwrap(),
        ];
        let pods = [
            pod("a", json!({COSCHEDULING_LABEL: "train"}), json!({}), None),
            pod("b", json!({COSCHEDULING_LABEL: "train"}), json!({}), Some("n1")),
            pod("c", json!({}), json!({"scheduling.k8s.io/group-name": "vc"}), None),
            pod("d", json!({KUEUE_LABEL: "kq"}), json!({KUEUE_TOTAL: "4"}), None),
            pod("e", json!({}), json!({}), None),
        ];
        let asks = [Some(true); 5];
        let (mut warnings, mut skipped) = (Vec::new(), Vec::new());
        let found = gangs(&pods, &asks, &groups, &mut warnings, &mut skipped);
        let summary: Vec<(&str, u32, u32)> =
            found.gangs.iter().map(|g| (g.name.as_str(), g.min_members, g.members_counted)).collect();
        assert_eq!(
            summary,
            [("ml/kq", 4, 0), ("ml/train", 3, 1), ("ml/vc", 2, 0)],
            "the bound member counts"
        );
        assert_eq!(found.of_pod.len(), 3, "pending members a, c, d; e is in no gang");
        assert!(warnings.is_empty() && skipped.is_empty());
    }

    #[test]
    fn bad_declarations_name_the_object_field_and_value_and_the_pods_plan_alone() {
        let bad_group = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": -1}});
        let e = pod_group(&bad_group).unwrap_err().to_string();
        assert_eq!(e, "PodGroup ml/g (scheduling.x-k8s.io/v1alpha1): field `spec.minMember` = -1: expected a whole number from 1 to 100000");
        let pods = [
            pod("a", json!({KUEUE_LABEL: "kq"}), json!({KUEUE_TOTAL: "many"}), None),
            pod("b", json!({COSCHEDULING_LABEL: "absent"}), json!({}), None),
        ];
        let (mut warnings, mut skipped) = (Vec::new(), Vec::new());
        let found = gangs(&pods, &[Some(true); 2], &[], &mut warnings, &mut skipped);
        assert!(found.gangs.is_empty() && found.of_pod.is_empty());
        assert_eq!(
            skipped[0].to_string(),
            "pod ml/a: field `metadata.annotations[kueue.x-k8s.io/pod-group-total-count]` = \"many\": expected a whole number from 1 to 100000"
        );
        assert_eq!(
            warnings,
            ["1 pod(s) name PodGroup ml/absent, which is not in the input: each is planned on its own"]
        );
    }
}
