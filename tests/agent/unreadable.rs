//! The agent's own MigNode stored under an older, looser CRD with a value Geometer's types
//! cannot hold: the agent changes nothing on the node, reports it once per generation with a
//! Warning event and a `Ready=False` condition on the MigNode naming the field and the value
//! (keeping the conditions already there), and carries on as soon as the object is fixed.

use std::sync::Arc;

use geometer_agent::AgentMetrics;

use geometer_api::MigNode;
use geometer_apiserver::{Fault, Verb};
use geometer_testkit::agent::{Harness, NODE};
use geometer_testkit::crd_bounds::looser_crd;
use k8s_openapi::api::events::v1::Event;
use serde_json::{json, Value};

const GEOMETRY_START: &str =
    "/properties/spec/properties/gpus/items/properties/geometry/items/properties/start";

const UNREADABLE_GAUGE_SET: &str = "geometer_agent_unreadable_objects{kind=\"MigNode\"} 1";

fn unreadable_events(h: &Harness) -> Vec<Event> {
    h.events_with_reason("Unreadable")
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("MigNode"))
        .collect()
}

/// The MigNode's condition of type `type_`, read raw (the object does not decode).
fn raw_condition(h: &Harness, type_: &str) -> Option<Value> {
    let raw = h.server.object_json::<MigNode>("", NODE)?;
    let conditions = raw.pointer("/status/conditions")?.as_array()?.clone();
    conditions.into_iter().find(|c| c["type"] == type_)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_mignode_changes_nothing_is_reported_on_it_and_a_fixed_one_is_applied() {
    let h = Harness::new(&[("H100-80GB", &[("7g.80gb", 0)])]).await;
    h.server.seed(&looser_crd("MigNode", GEOMETRY_START)).unwrap();
    // u8 holds starts 0..=255: 300 is stored by the looser schema but cannot be read.
    h.server
        .seed_value(json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode",
            "metadata": {"name": NODE},
            "spec": {"plan": "plan-1", "gpus": [{"index": 0, "geometry": [{"profile": "1g.10gb", "start": 300}]}]},
            "status": {"conditions": [{"type": "CatalogMismatch", "status": "False", "reason": "Agrees",
                "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}))
        .unwrap();
    // The first writes of the condition fail: it is retried on its own, the event is not.
    h.server.faults().inject(Fault::error(500).verb(Verb::Patch).resource("mignodes/status").times(3));
    let metrics = Arc::new(AgentMetrics::new());
    let agent = h.agent(h.config(), Arc::new(h.sim.clone())).with_metrics(metrics.clone());
    let agent = tokio::spawn(agent.run());

    let event = h.wait_for("a warning on the MigNode", |h| unreadable_events(h).into_iter().next()).await;
    let note = event.note.unwrap_or_default();
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.regarding.and_then(|r| r.name).as_deref(), Some(NODE));
    assert!(note.contains("spec.gpus[0].geometry[0].start") && note.contains("300"), "{note}");
    let ready = h.wait_for("Ready=False on the MigNode", |h| raw_condition(h, "Ready")).await;
    assert_eq!((&ready["status"], &ready["reason"]), (&json!("False"), &json!("Unreadable")));
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("spec.gpus[0].geometry[0].start") && message.contains("300"), "{message}");
    assert!(raw_condition(&h, "CatalogMismatch").is_some(), "the conditions already there are kept");
    assert_eq!(h.server.faults().hits(), 3, "the condition was written after three failed tries");
    assert!(metrics.encode().contains(UNREADABLE_GAUGE_SET), "{}", metrics.encode());
    // The agent keeps retrying; the same object is not reported again, and nothing changes.
    h.wait_for_agent_rounds(3).await;
    let events = unreadable_events(&h);
    assert_eq!(events.len(), 1, "one report per generation of the object, not per write of its status");
    assert!(events[0].series.is_none(), "published once, not repeated into a series: {:?}", events[0].series);
    assert_eq!(h.geometry(0), vec!["7g.80gb@0"]);
    assert_eq!(h.cordon_state(), (false, false), "the node is not cordoned for a spec it cannot read");

    let generation = h.set_spec(&[(0, &[("3g.40gb", 0), ("3g.40gb", 4)])]).await;
    h.wait_ready(generation).await;
    assert_eq!(h.geometry(0), vec!["3g.40gb@0", "3g.40gb@4"]);
    assert!(!metrics.encode().contains(UNREADABLE_GAUGE_SET), "the gauge drops once the MigNode reads");
    agent.abort();
}
