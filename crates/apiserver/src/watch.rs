//! Watches: replay from a resourceVersion out of the bounded history (or a snapshot of
//! synthetic ADDED events), then follow new changes; bookmarks when asked; a `410 Gone` ERROR
//! event when the version is older than the history; selector-aware ADDED/DELETED when an
//! object starts or stops matching.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use super::convert::to_served;
use super::error::ApiError;
use super::read::Filter;
use super::resource::ResourceRef;
use super::store::{Change, ChangeType};
use super::table::{self, Include};
use super::Inner;

/// Messages from tests to open watches.
#[derive(Debug, Clone)]
pub(crate) enum Control {
    /// End watches of this resource (plural), or of every resource.
    Drop(Option<String>),
    /// Send a bookmark now on every watch that allows them.
    Bookmark,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Table(Include),
    Metadata,
}

pub(crate) struct WatchSpec {
    pub rt: ResourceRef,
    pub version: String,
    pub filter: Filter,
    /// `None`: start with the current state as ADDED events; `Some(rv)`: replay after `rv`.
    pub from: Option<u64>,
    pub bookmarks: bool,
    /// `sendInitialEvents=true`: end the initial ADDED events with a marked bookmark.
    pub initial_events_end: bool,
    pub timeout: Option<Duration>,
    pub format: Format,
}

const BATCH: usize = 512;

/// Decrements the open-watch count when the watch ends, however it ends.
struct Open {
    inner: Arc<Inner>,
    resource: String,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.inner.watches.send_modify(|m| {
            if let Some(n) = m.get_mut(&self.resource) {
                *n = n.saturating_sub(1);
            }
        });
    }
}

fn frame(kind: &str, object: &Value) -> Bytes {
    let mut line =
        serde_json::to_vec(&json!({"type": kind, "object": object})).expect("a Value always serializes");
    line.push(b'\n');
    Bytes::from(line)
}

impl WatchSpec {
    fn render(&self, obj: &Arc<Value>) -> Value {
        let served = to_served(&self.rt, &self.version, obj);
        match self.format {
            Format::Json => (*served).clone(),
            Format::Metadata => table::partial_metadata(&served),
            Format::Table(include) => table::table(
                &self.rt,
                &self.version,
                std::slice::from_ref(&served),
                include,
                json!({"resourceVersion": served["metadata"]["resourceVersion"]}),
            ),
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut obj = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(&self.version),
            "metadata": {"resourceVersion": rv.to_string()}});
        if initial_end {
            obj["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        frame("BOOKMARK", &obj)
    }

    /// The event a change means for this watch, if any.
    fn classify(&self, change: &Change) -> Option<Bytes> {
        if change.storage != self.rt.storage {
            return None;
        }
        if let Some(ns) = &self.filter.namespace {
            if &change.namespace != ns {
                return None;
            }
        }
        let now = self.filter.matches(&change.object);
        let before = change.previous.as_ref().is_some_and(|p| self.filter.matches(p));
        let kind = match change.kind {
            ChangeType::Added if now => ChangeType::Added,
            ChangeType::Modified if now && before => ChangeType::Modified,
            ChangeType::Modified if now => ChangeType::Added,
            ChangeType::Modified if before => ChangeType::Deleted,
            ChangeType::Deleted if before || now => ChangeType::Deleted,
            _ => return None,
        };
        Some(frame(kind.as_str(), &self.render(&change.object)))
    }
}

/// Starts a watch; the returned receiver yields its newline-delimited JSON events.
pub(crate) fn start(inner: &Arc<Inner>, spec: WatchSpec) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(256);
    let resource = spec.rt.plural.clone();
    inner.watches.send_modify(|m| *m.entry(resource.clone()).or_default() += 1);
    let open = Open { inner: inner.clone(), resource };
    let mut rv_rx = inner.rv_watch.clone();
    rv_rx.borrow_and_update();
    let control = inner.control.subscribe();
    let (initial, last, expired) = {
        let store = inner.store.lock().expect("store lock poisoned");
        match spec.from {
            None => {
                let objs: Vec<Arc<Value>> = store
                    .iter(&spec.rt.storage, spec.filter.namespace.as_deref())
                    .filter(|o| spec.filter.matches(o))
                    .cloned()
                    .collect();
                (objs, store.current_rv(), None)
            }
            Some(rv) => match store.check_available(rv) {
                Ok(()) => (Vec::new(), rv, None),
                Err(e) => (Vec::new(), rv, Some(e.oldest_available)),
            },
        }
    };
    let bookmark_every = inner.config.bookmark_interval;
    let inner = inner.clone();
    tokio::spawn(async move {
        let _open = open;
        if let Some(oldest) = expired {
            let err = ApiError::gone(format!("too old resource version: {last} ({oldest})"));
            let _ = tx.send(frame("ERROR", &err.to_status())).await;
            return;
        }
        for obj in &initial {
            if tx.send(frame("ADDED", &spec.render(obj))).await.is_err() {
                return;
            }
        }
        drop(initial);
        if spec.initial_events_end && tx.send(spec.bookmark(last, true)).await.is_err() {
            return;
        }
        follow(&inner, &spec, last, tx, control, rv_rx, bookmark_every).await;
    });
    rx
}

async fn follow(
    inner: &Arc<Inner>,
    spec: &WatchSpec,
    mut last: u64,
    tx: mpsc::Sender<Bytes>,
    mut control: broadcast::Receiver<Control>,
    mut rv_rx: tokio::sync::watch::Receiver<u64>,
    bookmark_every: Duration,
) {
    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + bookmark_every, bookmark_every);
    loop {
        loop {
            rv_rx.borrow_and_update();
            let read = {
                let store = inner.store.lock().expect("store lock poisoned");
                let current = store.current_rv();
                store.changes_after(last, BATCH).map(|b| {
                    let done = b.len() < BATCH;
                    (b, done.then_some(current))
                })
            };
            let (batch, caught_up) = match read {
                Ok(x) => x,
                Err(e) => {
                    let err =
                        ApiError::gone(format!("too old resource version: {last} ({})", e.oldest_available));
                    let _ = tx.send(frame("ERROR", &err.to_status())).await;
                    return;
                }
            };
            for change in &batch {
                last = change.rv;
                if let Some(event) = spec.classify(change) {
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
            }
            if let Some(current) = caught_up {
                last = last.max(current);
                break;
            }
        }
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = rv_rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = ticker.tick(), if spec.bookmarks => {
                if tx.send(spec.bookmark(last, false)).await.is_err() {
                    return;
                }
            }
            msg = control.recv() => match msg {
                Ok(Control::Drop(None)) => return,
                Ok(Control::Drop(Some(r))) if r == spec.rt.plural => return,
                Ok(Control::Bookmark) if spec.bookmarks
                    && tx.send(spec.bookmark(last, false)).await.is_err() => {
                        return;
                    }
                Err(broadcast::error::RecvError::Closed) => return,
                _ => {}
            },
            _ = until_deadline => return,
            _ = tx.closed() => return,
        }
    }
}
