//! The agent's own MigNode stored under an older, looser CRD with a value Geometer's types
//! cannot hold: the agent changes nothing on the node, reports it once per version with a
//! Warning event on the MigNode naming the field and the value, and carries on as soon as the
//! object is fixed.

use std::time::Duration;

use geometer_testkit::agent::{Harness, NODE};
use geometer_testkit::crd_bounds::looser_crd;
use k8s_openapi::api::events::v1::Event;
use serde_json::json;

const GEOMETRY_START: &str =
    "/properties/spec/properties/gpus/items/properties/geometry/items/properties/start";

fn unreadable_events(h: &Harness) -> Vec<Event> {
    h.events_with_reason("Unreadable")
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("MigNode"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_mignode_changes_nothing_is_reported_on_it_and_a_fixed_one_is_applied() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.server.seed(&looser_crd("MigNode", GEOMETRY_START)).unwrap();
    // u8 holds starts 0..=255: 300 is stored by the looser schema but cannot be read.
    h.server
        .seed_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode",
            "metadata": {"name": NODE},
            "spec": {"plan": "plan-1", "gpus": [{"index": 0, "geometry": [{"profile": "1g.10gb", "start": 300}]}]}}))
        .unwrap();
    let agent = h.spawn_agent(h.config(), None);

    let event = h.wait_for("a warning on the MigNode", |h| unreadable_events(h).into_iter().next()).await;
    let note = event.note.unwrap_or_default();
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.regarding.and_then(|r| r.name).as_deref(), Some(NODE));
    assert!(note.contains("spec.gpus[0].geometry[0].start") && note.contains("300"), "{note}");
    // The agent keeps retrying; the same object is not reported again, and nothing changes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(unreadable_events(&h).len(), 1, "one report per version of the object");
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
    assert_eq!(h.cordon_state(), (false, false), "the node is not cordoned for a spec it cannot read");

    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.wait_ready(generation).await;
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    agent.abort();
}
