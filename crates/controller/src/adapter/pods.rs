//! Pods -> planner pods: effective requests as the scheduler computes them, constraints,
//! and whether a pod is demand.

use crate::adapter::pod_view::{ContainerView, PodViewSpec};
use crate::adapter::PodView;
use geometer_api::do_not_disrupt::{self, Verdict};
use geometer_api::limits::MAX_SLICES_PER_POD;
use geometer_api::resources::{mig_resource, GPU_RESOURCE, MIG_RESOURCE_PREFIX};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use geometer_solver::snapshot::{
    NodeSelectorTerm, Operator, Pod as PlannerPod, Requirement, TaintEffect, Toleration, TolerationOperator,
};

use crate::adapter::known::{Interned, Known, Refused};
use crate::adapter::AdapterError;
use geometer_api::quantity;
use geometer_solver::PodKey;

pub fn key(pod: &PodView) -> PodKey {
    PodKey::new(
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or(""),
    )
}

fn err(pod: &PodView, field: String, value: &str, problem: &str) -> AdapterError {
    AdapterError::Field {
        object: format!("Pod {}", key(pod)),
        field,
        value: geometer_api::limits::quote(value),
        problem: problem.to_string(),
    }
}

/// Requests of one container in milli-units per resource; limits stand in for requests that
/// are absent (as API defaulting does). `at` names the container in an error; field paths are
/// only written out for one (every pass reads every cached pod's requests).
fn container_requests(
    pod: &PodView,
    c: &ContainerView,
    at: &dyn Fn() -> String,
) -> Result<BTreeMap<String, u64>, AdapterError> {
    let mut out = BTreeMap::new();
    let Some(res) = &c.resources else { return Ok(out) };
    for (field, map) in [("limits", &res.limits), ("requests", &res.requests)] {
        for (name, q) in map.iter().flatten() {
            let at = || format!("{}.resources.{field}.{name}", at());
            let milli = quantity::parse_scaled(&q.0, 1000.0)
                .ok_or_else(|| err(pod, at(), &q.0, "not a Kubernetes quantity (e.g. 500m, 2, 1Gi)"))?;
            check_mig_request(pod, &at, name, &q.0, milli)?;
            match out.get_mut(name) {
                Some(value) => *value = milli,
                None => {
                    out.insert(name.clone(), milli);
                }
            }
        }
    }
    Ok(out)
}

/// MIG slices and GPUs are whole devices, and no node holds more than [`MAX_SLICES_PER_POD`]
/// of one profile: anything else is refused here instead of being rounded or sized into memory.
/// (The API server refuses fractional extended resources too: kubernetes/kubernetes,
/// `pkg/apis/core/validation/validation.go`, `validateResourceQuantityValue`.)
fn check_mig_request(
    pod: &PodView,
    at: &dyn Fn() -> String,
    name: &str,
    text: &str,
    milli: u64,
) -> Result<(), AdapterError> {
    if !is_device(name) {
        return Ok(());
    }
    if !milli.is_multiple_of(1000) {
        return Err(err(
            pod,
            at(),
            text,
            "MIG slices and GPUs are whole devices: request a whole number, e.g. 1",
        ));
    }
    if milli / 1000 > MAX_SLICES_PER_POD {
        return Err(err(
            pod,
            at(),
            text,
            &format!("more slices of one profile than any node holds (at most {MAX_SLICES_PER_POD})"),
        ));
    }
    Ok(())
}

/// A MIG slice or a whole GPU: counted in whole devices.
fn is_device(resource: &str) -> bool {
    resource.starts_with(MIG_RESOURCE_PREFIX) || resource == GPU_RESOURCE
}

fn add(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_default();
        *e = e.saturating_add(*v);
    }
}

fn max_into(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_default();
        *e = (*e).max(*v);
    }
}

/// Pods' effective requests already read, by the pod object they were read from (see
/// [`crate::adapter::known`]).
pub type KnownRequests = Known<PodView, Arc<BTreeMap<String, u64>>>;

/// The requests of `pods`, reusing what `earlier` read of the same objects and sharing equal
/// ones through `interned`; those that cannot be read come back with why.
pub fn read_requests(
    earlier: &KnownRequests,
    pods: &[Arc<PodView>],
    interned: &mut Interned<BTreeMap<String, u64>>,
) -> (KnownRequests, Refused<PodView, AdapterError>) {
    let read = Known::read(earlier, pods, |pod| effective_requests(pod).map(|r| interned.share(r)));
    interned.forget_unused();
    read
}

/// Per resource, in milli-units: max(init containers, sum of containers) + overhead, with
/// sidecars (restartable init containers) counted the way the scheduler does.
pub fn effective_requests(pod: &PodView) -> Result<BTreeMap<String, u64>, AdapterError> {
    let Some(spec) = &pod.spec else { return Ok(BTreeMap::new()) };
    let mut sum = BTreeMap::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let reqs = container_requests(pod, c, &|| format!("spec.containers[{i}]"))?;
        if sum.is_empty() {
            sum = reqs;
        } else {
            add(&mut sum, &reqs);
        }
    }
    let mut sidecars = BTreeMap::new();
    let mut init_max = BTreeMap::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let reqs = container_requests(pod, c, &|| format!("spec.initContainers[{i}]"))?;
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sum, &reqs);
            add(&mut sidecars, &reqs);
            max_into(&mut init_max, &sidecars);
        } else {
            let mut with_sidecars = reqs;
            add(&mut with_sidecars, &sidecars);
            max_into(&mut init_max, &with_sidecars);
        }
    }
    max_into(&mut sum, &init_max);
    for (name, q) in spec.overhead.iter().flatten() {
        let at = || format!("spec.overhead.{name}");
        let milli = quantity::parse_scaled(&q.0, 1000.0)
            .ok_or_else(|| err(pod, at(), &q.0, "not a Kubernetes quantity"))?;
        check_mig_request(pod, &at, name, &q.0, milli)?;
        add(&mut sum, &BTreeMap::from([(name.clone(), milli)]));
    }
    for (name, &milli) in sum.iter().filter(|(name, _)| is_device(name)) {
        let slices = milli / 1000;
        let at = || "spec.containers[*] (all containers together)".to_string();
        check_mig_request(pod, &at, name, &slices.to_string(), milli)?;
    }
    Ok(sum)
}

/// Requests with each advertised MIG resource renamed to its catalog profile's resource
/// (`advertised`: resource -> profile, see [`crate::adapter::mig_objects::advertised`]).
pub fn as_profiles<'r>(
    requests: Cow<'r, BTreeMap<String, u64>>,
    advertised: &BTreeMap<String, String>,
) -> Cow<'r, BTreeMap<String, u64>> {
    let renamed = |name: &String| advertised.get(name).map(|profile| mig_resource(profile));
    let kept = |name: &String| {
        advertised.get(name).is_none_or(|profile| name.strip_prefix(MIG_RESOURCE_PREFIX) == Some(profile))
    };
    if requests.keys().all(kept) {
        return requests;
    }
    let mut out = BTreeMap::new();
    for (name, value) in requests.iter() {
        let name = renamed(name).unwrap_or_else(|| name.clone());
        let e: &mut u64 = out.entry(name).or_default();
        *e = e.saturating_add(*value);
    }
    Cow::Owned(out)
}

/// MIG profile -> slices requested, and whole GPUs (`nvidia.com/gpu`) as the profile `whole`.
pub fn gpu_requests(requests: &BTreeMap<String, u64>) -> BTreeMap<String, u32> {
    requests
        .iter()
        .filter_map(|(name, milli)| {
            let profile = match name.strip_prefix(MIG_RESOURCE_PREFIX) {
                Some(profile) => profile,
                None if name == GPU_RESOURCE => geometer_solver::catalog::WHOLE,
                None => return None,
            };
            // Bounded again: two advertised names of one profile add up in `as_profiles`.
            let count = milli.div_ceil(1000).min(MAX_SLICES_PER_POD);
            (count > 0).then(|| (profile.to_string(), count as u32))
        })
        .collect()
}

/// The node a pod is bound to (`spec.nodeName`), if any.
pub fn bound_node(pod: &PodView) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
}

/// Whether a pod has finished (its requests no longer count on its node).
pub fn is_terminal(pod: &PodView) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Demand as in DESIGN.md: Pending, unbound, not nominated, `PodScheduled=False` with reason
/// `Unschedulable`. `Err` says why a pending MIG pod is not (yet) demand.
pub fn demand_check(pod: &PodView) -> Result<(), &'static str> {
    let status = pod.status.as_ref();
    if status.and_then(|s| s.phase.as_deref()) != Some("Pending") {
        return Err("not Pending");
    }
    if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()) {
        return Err("already bound to a node");
    }
    if status.and_then(|s| s.nominated_node_name.as_deref()).is_some_and(|n| !n.is_empty()) {
        return Err("nominated to a node (preemption in progress)");
    }
    let unschedulable = status.and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        })
    });
    if !unschedulable {
        return Err("not marked Unschedulable by the scheduler yet");
    }
    Ok(())
}

/// The planner's view of a pod: requests, priority and node constraints.
/// `now` is when the do-not-disrupt annotations are read: a duration that has not run out, or
/// a value that cannot be read, protects the pod exactly as the agent's drain will.
pub fn planner_pod(
    pod: &PodView,
    requests: &BTreeMap<String, u64>,
    do_not_disrupt_keys: &[String],
    now: jiff::Timestamp,
) -> Result<PlannerPod, AdapterError> {
    let no_spec = PodViewSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&no_spec);
    let mut affinity = Vec::new();
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref());
    for (t, term) in required.map(|r| r.node_selector_terms.as_slice()).unwrap_or_default().iter().enumerate()
    {
        let at = format!("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{t}]");
        let convert = |list: &Option<Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>>,
                       what: &str| {
            list.iter()
                .flatten()
                .enumerate()
                .map(|(r, req)| {
                    let operator = match req.operator.as_str() {
                        "In" => Operator::In,
                        "NotIn" => Operator::NotIn,
                        "Exists" => Operator::Exists,
                        "DoesNotExist" => Operator::DoesNotExist,
                        "Gt" => Operator::Gt,
                        "Lt" => Operator::Lt,
                        other => {
                            return Err(err(
                                pod,
                                format!("{at}.{what}[{r}].operator"),
                                other,
                                "expected In, NotIn, Exists, DoesNotExist, Gt or Lt",
                            ))
                        }
                    };
                    Ok(Requirement {
                        key: req.key.clone(),
                        operator,
                        values: req.values.clone().unwrap_or_default(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        affinity.push(NodeSelectorTerm {
            match_expressions: convert(&term.match_expressions, "matchExpressions")?,
            match_fields: convert(&term.match_fields, "matchFields")?,
        });
    }
    let mut tolerations = Vec::new();
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        let operator = match t.operator.as_deref() {
            None | Some("Equal") | Some("") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(err(
                    pod,
                    format!("spec.tolerations[{i}].operator"),
                    other,
                    "expected Equal or Exists",
                ))
            }
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(taint_effect(e).ok_or_else(|| {
                err(
                    pod,
                    format!("spec.tolerations[{i}].effect"),
                    e,
                    "expected NoSchedule, PreferNoSchedule or NoExecute",
                )
            })?),
        };
        tolerations.push(Toleration {
            key: t.key.clone().filter(|k| !k.is_empty()),
            operator,
            value: t.value.clone(),
            effect,
        });
    }
    let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref());
    let do_not_disrupt = matches!(
        do_not_disrupt::evaluate_meta(&pod.metadata, started, do_not_disrupt_keys, now),
        Verdict::Blocked(_)
    );
    Ok(PlannerPod {
        namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        name: pod.metadata.name.clone().unwrap_or_default(),
        priority: spec.priority.unwrap_or(0),
        requests: gpu_requests(requests),
        cpu_millis: requests.get("cpu").copied().unwrap_or(0),
        memory_bytes: requests.get("memory").copied().unwrap_or(0).div_ceil(1000),
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        affinity,
        tolerations,
        node: spec.node_name.clone().filter(|n| !n.is_empty()),
        do_not_disrupt,
        gang: None,
        gpu_spread: Default::default(),
    })
}

pub fn taint_effect(text: &str) -> Option<TaintEffect> {
    match text {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> PodView {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn effective_requests_follow_the_scheduler() {
        let p = pod(r#"
metadata: {name: p, namespace: ml}
spec:
  overhead: {cpu: 100m}
  initContainers:
  - name: fetch
    resources: {requests: {cpu: "3", nvidia.com/mig-1g.10gb: "2"}}
  - name: proxy
    restartPolicy: Always
    resources: {requests: {cpu: 500m}}
  containers:
  - name: a
    resources: {requests: {cpu: "1", memory: 1Gi}, limits: {nvidia.com/mig-1g.10gb: "1"}}
  - name: b
    resources: {limits: {nvidia.com/mig-3g.40gb: "1", cpu: "1"}}
"#);
        let r = effective_requests(&p).unwrap();
        // containers 1+1 + sidecar 0.5 = 2.5 cpu; init 3 (sidecar started after it) -> 3; + 0.1
        assert_eq!(r["cpu"], 3100);
        assert_eq!(r["memory"], (1u64 << 30) * 1000);
        let mig = gpu_requests(&r);
        assert_eq!(mig, BTreeMap::from([("1g.10gb".to_string(), 2), ("3g.40gb".to_string(), 1)]));
    }

    fn asking(name: &str, profile: &str) -> Arc<PodView> {
        Arc::new(pod(&format!(
            "metadata: {{name: {name}, namespace: ml}}\nspec:\n  containers:\n  - name: a\n    resources: {{limits: {{nvidia.com/mig-{profile}: \"1\"}}}}\n"
        )))
    }

    #[test]
    fn requests_are_read_again_only_for_a_pod_the_watch_replaced() {
        let (same, edited) = (asking("same", "1g.10gb"), asking("edited", "1g.10gb"));
        let mut interned = Interned::default();
        let (first, bad) =
            read_requests(&KnownRequests::default(), &[same.clone(), edited.clone()], &mut interned);
        assert!(bad.is_empty());
        assert!(
            Arc::ptr_eq(first.get(&same).unwrap(), first.get(&edited).unwrap()),
            "equal requests held once"
        );
        // The watch replaces an edited pod with a new object, here asking for another profile.
        let replaced = asking("edited", "3g.40gb");
        let (second, _) = read_requests(&first, &[same.clone(), replaced.clone()], &mut interned);
        assert!(Arc::ptr_eq(first.get(&same).unwrap(), second.get(&same).unwrap()), "read once");
        assert_eq!(
            gpu_requests(second.get(&replaced).unwrap()),
            BTreeMap::from([("3g.40gb".to_string(), 1)])
        );
        // The object it replaced is not answered for any more (nor is an equal copy never read).
        assert!(second.get(&edited).is_none());
        assert!(second.get(&asking("same", "1g.10gb")).is_none());
    }

    #[test]
    fn a_pod_whose_requests_cannot_be_read_is_named_and_left_out_of_the_known_ones() {
        let broken = Arc::new(pod(
            "metadata: {name: broken, namespace: ml}\nspec:\n  containers:\n  - name: a\n    resources: {limits: {nvidia.com/mig-1g.10gb: \"0.5\"}}\n",
        ));
        let fine = asking("fine", "1g.10gb");
        let (known, bad) = read_requests(
            &KnownRequests::default(),
            &[broken.clone(), fine.clone()],
            &mut Interned::default(),
        );
        assert!(known.get(&broken).is_none() && known.get(&fine).is_some());
        let [(pod, e)] = &bad[..] else { panic!("one unreadable pod, got {bad:?}") };
        assert!(Arc::ptr_eq(pod, &broken));
        let text = e.to_string();
        assert!(
            text.contains("ml/broken")
                && text.contains("spec.containers[0].resources.limits.nvidia.com/mig-1g.10gb")
                && text.contains("0.5"),
            "{text}"
        );
    }

    #[test]
    fn bad_quantity_names_field_and_value() {
        let p = pod(r#"
metadata: {name: p, namespace: ml}
spec:
  containers:
  - name: a
    resources: {requests: {cpu: lots}}
"#);
        let e = effective_requests(&p).unwrap_err().to_string();
        assert!(e.contains("spec.containers[0].resources.requests.cpu") && e.contains("lots"), "{e}");
    }

    #[test]
    fn demand_needs_unschedulable_condition() {
        let mut p = pod(r#"
metadata: {name: p, namespace: ml}
spec: {containers: []}
status:
  phase: Pending
  conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]
"#);
        assert_eq!(demand_check(&p), Ok(()));
        p.status.as_mut().unwrap().nominated_node_name = Some("n1".into());
        assert_eq!(demand_check(&p), Err("nominated to a node (preemption in progress)"));
        p.status.as_mut().unwrap().nominated_node_name = None;
        p.status.as_mut().unwrap().conditions = None;
        assert_eq!(demand_check(&p), Err("not marked Unschedulable by the scheduler yet"));
    }
}
