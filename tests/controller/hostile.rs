//! One hostile object of each kind the controller reads, all at once: a pod bound to a managed
//! node asking for four billion MIG slices (it used to make the controller allocate tens of
//! gigabytes and abort, on every restart), a node whose taint the planner cannot read, a
//! MigNode and a MigPolicy stored under an older, looser CRD with numbers Geometer's types
//! cannot hold (one such policy used to make every policy list undecodable). The controller
//! keeps planning for everything else and reports each bad object: a Warning event on it, a
//! `Ready=False` condition on the policy, a gauge in /metrics.

use geometer_testkit::controller::world::{wait_for, World};
use geometer_testkit::crd_bounds::{looser_crd, POLICY_TIME_LIMIT};
use k8s_openapi::api::events::v1::Event;
use serde_json::{json, Value};

const SEVEN: &[(&str, u8, Option<&str>)] = &[("7g.80gb", 0, None)];

fn warning_about(world: &World, kind: &str, name: &str) -> Option<Event> {
    world.server.objects::<Event>().into_iter().find(|e| {
        let r = e.regarding.as_ref();
        e.type_.as_deref() == Some("Warning")
            && r.and_then(|r| r.kind.as_deref()) == Some(kind)
            && r.and_then(|r| r.name.as_deref()) == Some(name)
    })
}

fn hostile_world() -> World {
    let world = World::new();
    world.server.seed(&looser_crd("MigPolicy", POLICY_TIME_LIMIT)).unwrap();
    let instance_start =
        "/properties/status/properties/gpus/items/properties/instances/items/properties/start";
    world.server.seed(&looser_crd("MigNode", instance_start)).unwrap();

    world.node("gpu-a", "pool", &[SEVEN]);
    world.policy("pool", "DryRun", json!({}));
    world.pending("infer-0", "3g.40gb");

    // A pod bound to the managed node asking for u32::MAX slices.
    world
        .server
        .seed_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog", "namespace": "ml"},
            "spec": {"nodeName": "gpu-a", "containers": [{"name": "main", "image": "x",
                "resources": {"limits": {"nvidia.com/mig-1g.10gb": "4294967295"}}}]},
            "status": {"phase": "Running"}}))
        .unwrap();
    // A node of the pool whose taint effect no scheduler knows.
    world.node("gpu-taint", "pool", &[SEVEN]);
    let mut node: Value = serde_json::to_value(world.node_object("gpu-taint")).unwrap();
    node["spec"] = json!({"taints": [{"key": "k", "effect": "Sometimes"}]});
    world.server.seed_value(node).unwrap();
    // A MigNode of the pool with a start no GPU has (u8 holds 0..=255).
    world.node("gpu-old", "pool", &[SEVEN]);
    let mut mignode: Value = serde_json::to_value(world.mignode("gpu-old")).unwrap();
    mignode["status"]["gpus"][0]["instances"][0]["start"] = json!(300);
    world.server.seed_value(mignode).unwrap();
    // Another pool's policy with a time limit past u32.
    world.policy("other", "DryRun", json!({"solver": {"timeLimitMs": 4294967296u64}}));
    world
}

#[tokio::test]
async fn one_hostile_object_of_each_kind_is_reported_and_the_rest_is_planned() {
    let world = hostile_world();
    let controller = world.start(None);

    let plan =
        wait_for("a plan for the good pool", || world.plans().into_iter().find(|p| p.spec.policy == "pool"))
            .await;
    assert_eq!(plan.spec.demand.met.len(), 1, "{:?}", plan.spec.demand);
    assert_eq!(plan.spec.demand.met[0].pod, "ml/infer-0");
    assert_eq!(plan.spec.demand.met[0].node, "gpu-a");

    for (kind, name, words) in [
        ("Pod", "hog", "4294967295"),
        ("Node", "gpu-taint", "spec.taints[0].effect"),
        ("MigNode", "gpu-old", "status.gpus[0].instances[0].start"),
        ("MigPolicy", "other", "spec.solver.timeLimitMs"),
    ] {
        let event =
            wait_for(&format!("a warning on {kind} {name}"), || warning_about(&world, kind, name)).await;
        let note = event.note.unwrap_or_default();
        assert!(note.contains(words) && note.contains(name), "{kind} {name}: {note}");
        assert!(note.len() < 1100, "the note quotes the object, not its body: {} bytes", note.len());
    }
    let other = wait_for("the unreadable policy's condition", || {
        let policy = world.server.object_json::<geometer_api::MigPolicy>("", "other")?;
        let ready = policy["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?.clone();
        Some(ready)
    })
    .await;
    assert_eq!(
        (other["status"].as_str(), other["reason"].as_str()),
        (Some("False"), Some("Unreadable")),
        "{other}"
    );
    for kind in ["Pod", "Node", "MigNode", "MigPolicy"] {
        let series = format!("geometer_skipped_objects{{kind=\"{kind}\"}}");
        assert_eq!(controller.metric(&series), 1.0, "{series}");
    }
}
