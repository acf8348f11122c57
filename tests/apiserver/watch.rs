//! Watches against the in-memory API server with kube-rs's own runtime: `watcher`,
//! `reflector` and `Controller` see every change; resume after a dropped connection; 410 Gone
//! for an expired resourceVersion; bookmarks; streaming lists; selector-aware events.
//!
//! No test waits on the clock: they wait for the server to report an open watch, or for the
//! next event. `tokio::time::timeout` only turns a hang into a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use geometer_apiserver::{ApiServer, Fault, Verb};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::controller::Action;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{reflector, Controller};
use serde_json::json;
use tokio::sync::mpsc;

const HANG: Duration = Duration::from_secs(20);

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}]},
    }))
    .unwrap()
}

/// Runs a watcher in the background; events arrive on the returned channel (capacity 1, so
/// the watcher only moves on when the test reads).
fn spawn_watcher(
    api: Api<Pod>,
    config: watcher::Config,
) -> mpsc::Receiver<Result<Event<Pod>, watcher::Error>> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    rx
}

async fn next(
    rx: &mut mpsc::Receiver<Result<Event<Pod>, watcher::Error>>,
) -> Result<Event<Pod>, watcher::Error> {
    tokio::time::timeout(HANG, rx.recv()).await.expect("the watcher stalled").expect("the watcher ended")
}

fn describe(event: &Event<Pod>) -> String {
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    match event {
        Event::Init => "init".into(),
        Event::InitApply(p) => format!("init-apply {}", name(p)),
        Event::InitDone => "init-done".into(),
        Event::Apply(p) => format!("apply {} {:?}", name(p), p.metadata.labels.clone().unwrap_or_default()),
        Event::Delete(p) => format!("delete {}", name(p)),
    }
}

#[tokio::test]
async fn watcher_sees_every_change_in_order() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    pods.create(&PostParams::default(), &pod("before", json!({}))).await.unwrap();
    let mut rx = spawn_watcher(pods.clone(), watcher::Config::default());
    assert_eq!(describe(&next(&mut rx).await.unwrap()), "init");
    assert_eq!(describe(&next(&mut rx).await.unwrap()), "init-apply before");
    assert_eq!(describe(&next(&mut rx).await.unwrap()), "init-done");
    server.wait_for_watches("pods", 1).await;

    pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    pods.patch("p", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})))
        .await
        .unwrap();
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    pods.delete("before", &DeleteParams::default()).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(describe(&next(&mut rx).await.unwrap()));
    }
    assert_eq!(got, ["apply p {}", "apply p {\"v\": \"2\"}", "delete p", "delete before"]);
}

#[tokio::test]
async fn reflector_converges_on_the_server_state_through_churn() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::all(server.client());
    let (reader, writer) = reflector::store::<Pod>();
    // A small page size so the initial list is paginated too.
    let stream = reflector(writer, watcher::watcher(pods.clone(), watcher::Config::default().page_size(7)));
    let mut stream = stream.boxed();
    let default: Api<Pod> = Api::default_namespaced(server.client());
    for i in 0..30 {
        default
            .create(&PostParams::default(), &pod(&format!("p{i}"), json!({"i": i.to_string()})))
            .await
            .unwrap();
    }
    // Read until the initial list is done, then churn while watching.
    loop {
        if let Event::InitDone =
            tokio::time::timeout(HANG, stream.try_next()).await.unwrap().unwrap().unwrap()
        {
            break;
        }
    }
    assert_eq!(reader.state().len(), 30);
    for i in 0..30 {
        match i % 3 {
            0 => drop(default.delete(&format!("p{i}"), &DeleteParams::default()).await.unwrap()),
            1 => drop(
                default
                    .patch(
                        &format!("p{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"labels": {"i": "changed"}}})),
                    )
                    .await
                    .unwrap(),
            ),
            _ => {}
        }
    }
    for i in 30..35 {
        default.create(&PostParams::default(), &pod(&format!("p{i}"), json!({}))).await.unwrap();
    }
    let expected: BTreeMap<String, String> = server
        .objects::<Pod>()
        .into_iter()
        .map(|p| (p.metadata.name.unwrap(), p.metadata.resource_version.unwrap()))
        .collect();
    let snapshot = |r: &reflector::Store<Pod>| -> BTreeMap<String, String> {
        r.state()
            .iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p.metadata.resource_version.clone().unwrap()))
            .collect()
    };
    while snapshot(&reader) != expected {
        tokio::time::timeout(HANG, stream.try_next())
            .await
            .expect("reflector stalled before converging")
            .unwrap();
    }
    assert_eq!(expected.len(), 25);
}

#[tokio::test]
async fn controller_reconciles_every_object_and_change() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let seen: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> = Arc::default();
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let ctx = Arc::new((seen.clone(), tx));
    let controller = Controller::new(pods.clone(), watcher::Config::default()).run(
        |p: Arc<Pod>,
         ctx: Arc<(Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>, mpsc::UnboundedSender<()>)>| async move {
            let labels = p.metadata.labels.clone().unwrap_or_default();
            ctx.0
                .lock()
                .unwrap()
                .entry(p.metadata.name.clone().unwrap())
                .or_default()
                .insert(labels.get("v").cloned().unwrap_or_default());
            let _ = ctx.1.send(());
            Ok::<_, kube::Error>(Action::await_change())
        },
        |_, _, _| Action::requeue(Duration::from_secs(1)),
        ctx,
    );
    tokio::spawn(controller.for_each(|_| async {}));
    for i in 0..5 {
        pods.create(&PostParams::default(), &pod(&format!("c{i}"), json!({"v": "1"}))).await.unwrap();
    }
    let done =
        |s: &BTreeMap<String, BTreeSet<String>>, v: &str| s.len() == 5 && s.values().all(|vs| vs.contains(v));
    while !done(&seen.lock().unwrap(), "1") {
        tokio::time::timeout(HANG, rx.recv()).await.expect("controller stalled");
    }
    server.wait_for_watches("pods", 1).await;
    for i in 0..5 {
        pods.patch(
            &format!("c{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
        )
        .await
        .unwrap();
    }
    while !done(&seen.lock().unwrap(), "2") {
        tokio::time::timeout(HANG, rx.recv()).await.expect("controller missed a change");
    }
}

#[tokio::test]
async fn watch_resumes_after_a_dropped_connection_without_relisting() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let mut rx = spawn_watcher(pods.clone(), watcher::Config::default());
    for expected in ["init", "init-done"] {
        assert_eq!(describe(&next(&mut rx).await.unwrap()), expected);
    }
    server.wait_for_watches("pods", 1).await;
    pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    assert_eq!(describe(&next(&mut rx).await.unwrap()), "apply a {}");

    server.faults().drop_watches("pods");
    pods.create(&PostParams::default(), &pod("b", json!({}))).await.unwrap();
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(describe(&next(&mut rx).await.unwrap()), "apply b {}");
    assert_eq!(describe(&next(&mut rx).await.unwrap()), "delete a");

    let requests = server.requests();
    let lists = requests
        .iter()
        .filter(|r| r.verb == Some(Verb::List) && r.resource.as_deref() == Some("pods"))
        .count();
    let watches: Vec<_> = requests.iter().filter(|r| r.verb == Some(Verb::Watch)).collect();
    assert_eq!(lists, 1, "resuming must not relist");
    assert!(watches.len() >= 2, "the watcher opened a second watch: {watches:?}");
    assert!(
        watches[1].query.contains("resourceVersion="),
        "and resumed from a resourceVersion: {}",
        watches[1].query
    );
}

#[tokio::test]
async fn expired_resource_version_gets_410_and_the_watcher_relists() {
    let server = ApiServer::builder().history_limit(5).build();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let created = pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap();
    let old = created.metadata.resource_version.unwrap();
    for i in 0..10 {
        pods.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"n": i.to_string()}}})),
        )
        .await
        .unwrap();
    }
    // A raw watch from the compacted version gets an ERROR event with a 410 Status.
    let mut raw = pods.watch(&WatchParams::default(), &old).await.unwrap().boxed();
    match tokio::time::timeout(HANG, raw.try_next()).await.unwrap().unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }

    // A watcher whose version expires while it is disconnected starts over with a fresh list.
    let mut rx = spawn_watcher(pods.clone(), watcher::Config::default());
    for expected in ["init", "init-apply a", "init-done"] {
        assert_eq!(describe(&next(&mut rx).await.unwrap()), expected);
    }
    server.wait_for_watches("pods", 1).await;
    server.faults().inject(Fault::error(503).verb(Verb::Watch).resource("pods"));
    server.faults().drop_watches("pods");
    assert!(next(&mut rx).await.is_err(), "the re-watch fails while the fault is on");
    for i in 0..10 {
        pods.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"m": i.to_string()}}})),
        )
        .await
        .unwrap();
    }
    server.faults().clear();
    let mut relisted = false;
    loop {
        match next(&mut rx).await {
            Ok(Event::Init) => relisted = true,
            Ok(Event::InitApply(p)) if relisted => assert_eq!(p.metadata.labels.unwrap()["m"], "9"),
            Ok(Event::InitDone) if relisted => break,
            Ok(other) => panic!("unexpected {}", describe(&other)),
            Err(_) => {}
        }
    }
}

#[tokio::test]
async fn bookmarks_streaming_lists_and_selector_transitions() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    pods.create(&PostParams::default(), &pod("web", json!({"app": "web"}))).await.unwrap();

    // A bookmark (kube-rs asks for them) carries the latest version.
    let mut raw = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert!(matches!(raw.try_next().await.unwrap(), Some(WatchEvent::Added(_))));
    server.wait_for_watches("pods", 1).await;
    server.send_bookmarks();
    match tokio::time::timeout(HANG, raw.try_next()).await.unwrap().unwrap() {
        Some(WatchEvent::Bookmark(b)) => {
            assert_eq!(b.metadata.resource_version, server.resource_version().to_string())
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }

    // Streaming list (sendInitialEvents) ends its initial events with the marked bookmark.
    let mut rx = spawn_watcher(pods.clone(), watcher::Config::default().streaming_lists().labels("app=web"));
    for expected in ["init", "init-apply web", "init-done"] {
        assert_eq!(describe(&next(&mut rx).await.unwrap()), expected);
    }
    // Leaving the selector reads as a deletion, entering it as an addition.
    pods.patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})))
        .await
        .unwrap();
    assert_eq!(describe(&next(&mut rx).await.unwrap()), "delete web");
    pods.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    assert_eq!(describe(&next(&mut rx).await.unwrap()), "apply web {\"app\": \"web\"}");
}
