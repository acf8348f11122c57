#![allow(clippy::unwrap_used)] // test code
use crate::adapter::PodView;
use crate::fixtures::{self, by_name, in_phase, mignode, unschedulable, Inst};
use crate::planning::propose::*;

const SEVEN: &[Inst<'static>] = &[("7g.80gb", 0, None)];

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

struct World {
    policy: MigPolicy,
    nodes: BTreeMap<String, Arc<Node>>,
    mignodes: BTreeMap<String, Arc<MigNode>>,
    pods: Vec<Arc<PodView>>,
}

impl World {
    /// Two H100 nodes with one free 7g.80gb GPU each, and `pending` pods wanting 1g.10gb.
    fn new(pending: usize) -> World {
        let mut policy = fixtures::policy("pool", "Auto");
        policy.metadata.uid = Some("uid-pool".into());
        World {
            policy,
            nodes: ["gpu-a", "gpu-b"]
                .iter()
                .map(|n| (n.to_string(), Arc::new(fixtures::node(n, "pool"))))
                .collect(),
            mignodes: by_name(vec![
                mignode("gpu-a", 1, None, &[(0, SEVEN)]),
                mignode("gpu-b", 1, None, &[(0, SEVEN)]),
            ]),
            pods: (0..pending)
                .map(|i| Arc::new(unschedulable("ml", &format!("infer-{i}"), "1g.10gb")))
                .collect(),
        }
    }

    /// gpu-a's GPU holds `instances` instead of one free 7g.80gb.
    fn gpu_a_holds(&mut self, instances: &[Inst<'_>]) {
        self.mignodes = by_name(vec![
            mignode("gpu-a", 1, None, &[(0, instances)]),
            mignode("gpu-b", 1, None, &[(0, SEVEN)]),
        ]);
    }

    fn prepare(&self) -> Prepared {
        let managed: Vec<String> = self.nodes.keys().cloned().collect();
        let input = RoundInput {
            policy: &self.policy,
            managed: &managed,
            nodes: &self.nodes,
            mignodes: &self.mignodes,
            pods: &self.pods,
            requests: &Default::default(),
            inventories: &Default::default(),
            pod_groups: &[],
            dra: &Default::default(),
            now: now(),
        };
        prepare(&input, Catalog::builtin()).unwrap()
    }

    fn decide(&self, open: &[&MigPlan]) -> Decision {
        let prepared = self.prepare();
        let solved =
            solve(&prepared, Catalog::builtin(), &self.policy, &geometer_solver::GeometryCache::new())
                .unwrap();
        let pods: BTreeMap<geometer_solver::PodKey, &PodView> =
            self.pods.iter().map(|p| (adapter_pods::key(p), &**p)).collect();
        decide(&self.policy, &solved, &prepared, open, &pods, now())
    }
}

fn published(decision: Decision) -> (MigPlan, Vec<Action>) {
    match decision {
        Decision::Publish { plan, events } => (*plan, events),
        other => panic!("expected a plan, got {other:?}"),
    }
}

#[test]
fn demand_is_only_unschedulable_mig_pods() {
    let mut world = World::new(2);
    world.pods.push(Arc::new(fixtures::pod("ml", "bound", Some("gpu-a"))));
    world.pods.push(Arc::new(fixtures::pod("ml", "not-yet-marked", None)));
    let dra = Default::default();
    let mut claims = crate::adapter::dra::ClaimDemand::new(&dra, &BTreeMap::new(), Catalog::builtin());
    let demand = demand(&world.pods, &mut claims);
    assert_eq!(demand.keys().collect::<Vec<_>>(), ["ml/infer-0", "ml/infer-1"]);
    assert_eq!(demand[&geometer_solver::PodKey::new("ml", "infer-0")]["1g.10gb"], 1);
    let holders = BTreeSet::new();
    let fp = demand_fingerprint(&world.policy, &demand, &holders);
    assert!(fp.is_some());
    assert_eq!(demand_fingerprint(&world.policy, &DemandByPod::new(), &holders), None);
    let gone = BTreeSet::from([geometer_solver::PodKey::new("ml", "holder")]);
    assert_ne!(demand_fingerprint(&world.policy, &demand, &gone), fp, "a holder leaving is a new batch");
    world.policy.metadata.generation = Some(2);
    assert_ne!(demand_fingerprint(&world.policy, &demand, &holders), fp, "a policy edit is a new batch");
}

#[test]
fn a_missing_profile_becomes_a_plan_with_the_target_geometry() {
    let world = World::new(3);
    let (plan, events) = published(world.decide(&[]));
    assert_eq!(plan.spec.policy, "pool");
    assert_eq!(plan.spec.summary.pods_helped, 3);
    assert_eq!(plan.spec.summary.gpus_changed, 1, "three 1g.10gb fit on one GPU: {:?}", plan.spec.nodes);
    let gpu = &plan.spec.nodes[0].gpus[0];
    assert_eq!(gpu.operations.destroy, vec![geometer_api::PlacedInstance::new("7g.80gb", 0)]);
    assert!(gpu.to.iter().filter(|p| p.profile == "1g.10gb").count() >= 3, "{:?}", gpu.to);
    assert_eq!(plan.labels()[POLICY_LABEL], "pool");
    assert_eq!(plan.owner_references()[0].uid, "uid-pool");
    assert!(plan.name_any().starts_with("pool-20231114-"), "{}", plan.name_any());
    let status = plan.status.as_ref().unwrap();
    assert_eq!(status.phase, MigPlanPhase::Proposed);
    assert!(status.conditions[0].message.contains("3 pending pod(s)"), "{:?}", status.conditions);
    assert_eq!(events.len(), 3, "one event per helped pod");
}

#[test]
fn the_same_plan_is_not_published_twice() {
    let world = World::new(2);
    let (first, _) = published(world.decide(&[]));
    match world.decide(&[&first]) {
        Decision::Unchanged { plan } => assert_eq!(plan, first.name_any()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_demand_for_new_slices_publishes_nothing() {
    let mut world = World::new(1);
    world.gpu_a_holds(&[("4g.40gb", 0, None), ("1g.10gb", 6, None)]);
    match world.decide(&[]) {
        Decision::NothingToDo { events } => assert!(events.is_empty(), "the pod fits an existing free slice"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nodes_that_have_not_settled_stay_out() {
    let mut world = World::new(1);
    let busy = in_phase(mignode("gpu-a", 2, Some("older"), &[(0, SEVEN)]), "Draining", "");
    let failed = in_phase(mignode("gpu-b", 1, None, &[(0, SEVEN)]), "Failed", "drain timed out");
    world.mignodes = by_name(vec![busy, failed]);
    let prepared = world.prepare();
    assert!(prepared.snapshot.nodes.is_empty());
    let why: BTreeMap<&str, &str> = prepared.excluded.iter().map(|(n, w)| (n.as_str(), w.as_str())).collect();
    assert!(why["gpu-a"].contains("reconfiguring"), "{why:?}");
    assert!(why["gpu-b"].contains("drain timed out"), "{why:?}");
    world.mignodes.remove("gpu-b");
    let prepared = world.prepare();
    assert!(
        prepared.excluded.iter().any(|(n, w)| n == "gpu-b" && w.contains("agent")),
        "{:?}",
        prepared.excluded
    );
}

#[test]
fn a_node_inside_its_stabilisation_window_stays_out_until_it_ends() {
    let mut world = World::new(1);
    world.policy.spec.stabilisation_seconds = 600;
    let changed = |ago: i64| {
        let mut node = mignode("gpu-a", 1, None, &[(0, SEVEN)]);
        let at = crate::world::written_at_value(now() - jiff::SignedDuration::from_secs(ago));
        node.metadata.annotations = Some(BTreeMap::from([(crate::world::SPEC_WRITTEN_AT.to_string(), at)]));
        Arc::new(node)
    };
    // Changed a minute ago: the plan goes to gpu-b instead of waiting nine minutes for gpu-a.
    world.mignodes.insert("gpu-a".into(), changed(60));
    let prepared = world.prepare();
    assert!(prepared.settling, "the window ends on its own");
    assert!(
        prepared.excluded.iter().any(|(n, w)| n == "gpu-a" && w.contains("stabilisationSeconds")),
        "{:?}",
        prepared.excluded
    );
    let (plan, _) = published(world.decide(&[]));
    assert_eq!(plan.spec.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["gpu-b"]);
    // Changed eleven minutes ago: planned like any other node.
    world.mignodes.insert("gpu-a".into(), changed(660));
    assert!(world.prepare().excluded.is_empty());
}

#[test]
fn a_node_the_gpu_operators_labels_refuse_is_never_planned_and_the_plan_says_why() {
    let mut world = World::new(1);
    let mut node = fixtures::node("gpu-a", "pool");
    let labels = node.metadata.labels.get_or_insert_with(Default::default);
    labels.insert("nvidia.com/gpu.deploy.device-plugin".into(), "true".into());
    labels.insert("nvidia.com/gpu.deploy.mig-manager".into(), "false".into());
    labels.insert("nvidia.com/mig.strategy".into(), "single".into());
    world.nodes.insert("gpu-a".into(), Arc::new(node));
    let prepared = world.prepare();
    assert_eq!(prepared.snapshot.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["gpu-b"]);
    assert!(!prepared.settling, "the strategy does not change on its own");
    let (plan, _) = published(world.decide(&[]));
    assert_eq!(plan.spec.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["gpu-b"]);
    let planned = plan.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Planned").unwrap();
    assert!(
        planned.message.contains("gpu-a (refused: the device plugin's MIG strategy is \"single\""),
        "{}",
        planned.message
    );
}

#[test]
fn a_node_the_catalog_cannot_place_stays_out_and_the_rest_is_planned() {
    let mut world = World::new(1);
    world.gpu_a_holds(&[("4g.40gb", 3, None)]);
    let prepared = world.prepare();
    assert_eq!(prepared.snapshot.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["gpu-b"]);
    assert!(
        prepared.excluded.iter().any(|(n, w)| n == "gpu-a" && w.contains("4g.40gb@3")),
        "{:?}",
        prepared.excluded
    );
    let (plan, _) = published(world.decide(&[]));
    assert_eq!(plan.spec.nodes[0].node, "gpu-b");
}

#[test]
fn a_node_whose_inventory_names_an_unreadable_pod_stays_out_and_the_rest_is_planned() {
    // Read as free, the slice could be destroyed under the pod that uses it.
    let mut world = World::new(1);
    world.gpu_a_holds(&[("7g.80gb", 0, Some("no-namespace"))]);
    let prepared = world.prepare();
    assert_eq!(prepared.snapshot.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["gpu-b"]);
    assert!(
        prepared.excluded.iter().any(|(n, w)| n == "gpu-a"
            && w.contains("status.gpus[0].instances[0].pod")
            && w.contains("= no-namespace:")),
        "{:?}",
        prepared.excluded
    );
    let (plan, _) = published(world.decide(&[]));
    assert_eq!(plan.spec.nodes[0].node, "gpu-b");
}

#[test]
fn pods_ask_for_what_the_device_plugin_advertises_and_are_planned_as_its_profile() {
    // The agent published that this node's device plugin advertises 1g.10gb under another
    // name (a driver reporting other memory); a pod asking for that name is 1g.10gb demand.
    let mut world = World::new(0);
    for node in world.mignodes.values_mut() {
        let status = Arc::make_mut(node).status.as_mut().unwrap();
        status.gpus[0].advertised_as.insert("1g.10gb".into(), "nvidia.com/mig-1g.12gb".into());
    }
    world.pods.push(Arc::new(unschedulable("ml", "renamed", "1g.12gb")));
    let prepared = world.prepare();
    assert_eq!(prepared.snapshot.pending[0].requests, BTreeMap::from([("1g.10gb".to_string(), 1)]));
    let (plan, _) = published(world.decide(&[]));
    assert_eq!(plan.spec.demand.met.len(), 1, "{:?}", plan.spec.demand);
    assert_eq!(plan.spec.demand.met[0].profile, "1g.10gb");
}

#[test]
fn a_disallowed_profile_is_explained_on_the_pod() {
    let mut world = World::new(1);
    world.policy.spec.allowed_profiles = vec!["2g.20gb".into()];
    match world.decide(&[]) {
        Decision::NothingToDo { events } => match &events[..] {
            [Action::Event(e)] => {
                assert!(e.warning && e.reason == "NoSlicePlanned", "{e:?}");
                assert!(e.note.contains("allowedProfiles"), "{}", e.note);
                assert_eq!(e.regarding.name.as_deref(), Some("infer-0"));
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// A pending pod created `age` seconds before the round.
fn pending_since(name: &str, profile: &str, age: i64) -> Arc<PodView> {
    let mut pod = unschedulable("ml", name, profile);
    pod.metadata.creation_timestamp = Some(Time(now() - jiff::SignedDuration::from_secs(age)));
    Arc::new(pod)
}

/// The round's expected pods, as `namespace/name profile`.
fn expected(world: &World) -> Vec<String> {
    let pods = world.prepare().snapshot.expected;
    assert!(pods.iter().all(|p| p.node.is_none()), "expected pods are not bound");
    pods.iter()
        .map(|p| format!("{} {}", p.key(), p.requests.keys().cloned().collect::<Vec<_>>().join("+")))
        .collect()
}

#[test]
fn the_forecast_prepares_what_recent_pods_asked_for() {
    // Three nodes with a free GPU each; a 4g.40gb pod came 30 s ago, a 1g.10gb pod 5 s ago.
    let mut world = World::new(0);
    world.nodes = ["gpu-a", "gpu-b", "gpu-c"]
        .iter()
        .map(|n| (n.to_string(), Arc::new(fixtures::node(n, "pool"))))
        .collect();
    world.mignodes =
        by_name(["gpu-a", "gpu-b", "gpu-c"].iter().map(|n| mignode(n, 1, None, &[(0, SEVEN)])).collect());
    world.pods = vec![pending_since("mid", "4g.40gb", 30), pending_since("small", "1g.10gb", 5)];
    // Recent too, but no guide to what comes next: a finished pod on a managed node, and a
    // running one on a node of no policy.
    let mut done = fixtures::pod("ml", "done", Some("gpu-a"));
    done.metadata.creation_timestamp = Some(Time(now() - jiff::SignedDuration::from_secs(20)));
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let mut elsewhere = fixtures::pod("ml", "elsewhere", Some("cpu-node"));
    elsewhere.metadata.creation_timestamp = done.metadata.creation_timestamp.clone();
    elsewhere.status.as_mut().unwrap().phase = Some("Running".into());
    world.pods.extend([Arc::new(done), Arc::new(elsewhere)]);
    let spare_4g = |plan: &MigPlan| {
        plan.spec
            .nodes
            .iter()
            .flat_map(|n| &n.gpus)
            .flat_map(|g| &g.to)
            .filter(|p| p.profile == "4g.40gb")
            .count()
            - 1
    };

    // Off (the default): both pods share one GPU.
    let (plan, _) = published(world.decide(&[]));
    assert_eq!(
        (plan.spec.summary.pods_helped, plan.spec.summary.gpus_changed),
        (2, 1),
        "{:?}",
        plan.spec.nodes
    );
    assert!(world.prepare().snapshot.expected.is_empty());

    // A 60 s window expects another 4g.40gb and 1g.10gb: a second GPU gets a 4g.40gb ready.
    world.policy.spec.forecast_window_seconds = 60;
    assert_eq!(expected(&world), ["ml/mid 4g.40gb", "ml/small 1g.10gb"]);
    let (plan, _) = published(world.decide(&[]));
    assert_eq!(
        (plan.spec.summary.pods_helped, plan.spec.summary.gpus_changed),
        (2, 2),
        "{:?}",
        plan.spec.nodes
    );
    assert_eq!(spare_4g(&plan), 1, "{:?}", plan.spec.nodes);
    // The rollout takes the node the pending pods need before the one changed for the forecast.
    assert_eq!(plan.spec.demand.met[0].node, plan.spec.nodes[0].node, "{:?}", plan.spec.nodes);
    let planned = &plan.status.as_ref().unwrap().conditions[0].message;
    assert!(
        planned.contains("forecast: room for 2 of 2 pod(s) like those created in the last 60 s"),
        "{planned}"
    );

    // A 10 s window only sees the 1g.10gb pod, whose spare slices the first GPU has anyway.
    world.policy.spec.forecast_window_seconds = 10;
    assert_eq!(expected(&world), ["ml/small 1g.10gb"]);
    let (plan, _) = published(world.decide(&[]));
    assert_eq!(plan.spec.summary.gpus_changed, 1, "{:?}", plan.spec.nodes);
}

#[test]
fn running_pods_are_in_the_round_only_as_eviction_candidates() {
    // gpu-a's GPU holds a 1g.10gb slice a running pod uses; the pending pod wants 1g.10gb.
    let mut world = World::new(1);
    world.gpu_a_holds(&[("1g.10gb", 0, Some("ml/busy"))]);
    world.pods.push(Arc::new(fixtures::pod("ml", "busy", Some("gpu-a"))));
    let in_use = |prepared: &Prepared| {
        prepared.snapshot.nodes[0].gpus[0].instances.iter().filter_map(|i| i.pod.as_ref()).count()
    };
    // Eviction off (the default): no running pod in the snapshot, the slice still in use.
    let prepared = world.prepare();
    assert!(prepared.snapshot.running.is_empty(), "{:?}", prepared.snapshot.running);
    assert_eq!(in_use(&prepared), 1);
    assert_eq!(prepared.snapshot.pending.len(), 1);
    // The plan never destroys the slice in use.
    let (plan, _) = published(world.decide(&[]));
    let destroyed = plan.spec.nodes.iter().flat_map(|n| &n.gpus).flat_map(|g| &g.operations.destroy);
    assert!(destroyed.clone().all(|i| i.start != 0 || i.profile != "1g.10gb"), "{:?}", plan.spec.nodes);
    // Eviction on: the running pod is a candidate.
    world.policy.spec.disruption.eviction_allowed = true;
    let prepared = world.prepare();
    assert_eq!(prepared.snapshot.running.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["busy"]);
    assert_eq!(in_use(&prepared), 1);
}

#[test]
fn under_a_window_the_published_plan_turns_the_changed_nodes_empty_gpus_whole_too() {
    let serving: &[Inst<'static>] = &[("7g.80gb", 0, Some("ml/serve"))];
    let plan_for = |stabilisation_seconds: u32, shape_empty_gpus: bool| {
        let mut world = World::new(0);
        world.policy.spec.stabilisation_seconds = stabilisation_seconds;
        world.policy.spec.shape_empty_gpus = shape_empty_gpus;
        // gpu-a: one GPU serving, two in MIG mode with no instance; gpu-b: busy.
        world.mignodes = by_name(vec![
            mignode("gpu-a", 1, None, &[(0, serving), (1, &[]), (2, &[])]),
            mignode("gpu-b", 1, None, &[(0, serving)]),
        ]);
        let train: PodView = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "ml", "name": "train", "uid": "uid-train"},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }))
        .unwrap();
        world.pods.push(Arc::new(train));
        published(world.decide(&[])).0
    };
    let whole = |plan: &MigPlan| -> Vec<u32> {
        let gpus = plan.spec.nodes.iter().filter(|n| n.node == "gpu-a").flat_map(|n| &n.gpus);
        gpus.filter(|g| g.to.len() == 1 && g.to[0].profile == "whole").map(|g| g.index).collect()
    };
    // The pod needs one GPU; the window keeps gpu-a as planned, so its other empty GPU goes
    // whole as well, ready for the next training pod.
    let plan = plan_for(600, true);
    assert_eq!((plan.spec.summary.pods_helped, plan.spec.summary.gpus_changed), (1, 2), "{:?}", plan.spec);
    assert_eq!(whole(&plan), [1, 2], "{:?}", plan.spec.nodes);
    // Without a window the next plan can do that when a pod asks, and `shapeEmptyGpus: false`
    // leaves it to that plan under a window too: one GPU changes.
    for (window, shape) in [(0, true), (600, false)] {
        let plan = plan_for(window, shape);
        assert_eq!(
            (plan.spec.summary.pods_helped, plan.spec.summary.gpus_changed),
            (1, 1),
            "{:?}",
            plan.spec
        );
    }
}
