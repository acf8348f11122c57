//! Fault injection for tests: make chosen requests slow or fail, and cut open watches.
//!
//! ```
//! # fn main() -> anyhow::Result<()> {
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! use geometer_apiserver::{ApiServer, Fault, Verb};
//! use k8s_openapi::api::core::v1::Pod;
//!
//! let server = ApiServer::new();
//! let pod = serde_json::json!({
//!     "metadata": {"name": "train-0", "namespace": "default"},
//!     "spec": {"containers": [{"name": "main", "image": "train"}]},
//! });
//! server.seed(&serde_json::from_value::<Pod>(pod)?)?;
//! // The next two evictions of pod "train-0" are refused as if a budget said no.
//! server.faults().inject(Fault::error(429).verb(Verb::Create).resource("pods/eviction").name("train-0").times(2));
//!
//! let pods = kube::Api::<Pod>::namespaced(server.client(), "default");
//! for _ in 0..2 {
//!     let refused = pods.evict("train-0", &Default::default()).await.unwrap_err();
//!     assert!(matches!(&refused, kube::Error::Api(s) if s.code == 429), "{refused}");
//! }
//! pods.evict("train-0", &Default::default()).await?; // the third goes through
//! assert!(pods.get_opt("train-0").await?.is_none());
//! # Ok(()) })
//! # }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

use super::error::ApiError;
use super::request::Verb;
use super::watch::Control;

/// What a matching request suffers.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    verb: Option<Verb>,
    resource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    delay: Option<Duration>,
    error: Option<(u16, String)>,
    times: Option<usize>,
}

impl Fault {
    fn blank() -> Fault {
        Fault {
            verb: None,
            resource: None,
            namespace: None,
            name: None,
            delay: None,
            error: None,
            times: None,
        }
    }

    /// Answer with this HTTP status and the matching Kubernetes `Status` reason
    /// (409 Conflict, 429 TooManyRequests, 500 InternalError, 503 ServiceUnavailable, ...).
    pub fn error(code: u16) -> Fault {
        Fault { error: Some((code, format!("injected fault: HTTP {code}"))), ..Fault::blank() }
    }

    /// Hold matching requests for `d` before serving them normally.
    pub fn delay(d: Duration) -> Fault {
        Fault { delay: Some(d), ..Fault::blank() }
    }

    /// Also delay an error fault (or replace the delay of a delay fault).
    pub fn after(mut self, d: Duration) -> Fault {
        self.delay = Some(d);
        self
    }

    pub fn verb(mut self, verb: Verb) -> Fault {
        self.verb = Some(verb);
        self
    }

    /// A plural (`pods`) or plural/subresource (`pods/eviction`, `nodes/status`).
    pub fn resource(mut self, resource: &str) -> Fault {
        self.resource = Some(resource.to_string());
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Fault {
        self.namespace = Some(namespace.to_string());
        self
    }

    pub fn name(mut self, name: &str) -> Fault {
        self.name = Some(name.to_string());
        self
    }

    /// Only the next `n` matching requests (default: every one until cleared).
    pub fn times(mut self, n: usize) -> Fault {
        self.times = Some(n);
        self
    }

    pub fn message(mut self, message: &str) -> Fault {
        if let Some((_, m)) = &mut self.error {
            *m = message.to_string();
        }
        self
    }

    fn matches(&self, req: &RequestFacts<'_>) -> bool {
        self.verb.is_none_or(|v| Some(v) == req.verb)
            && self.resource.as_deref().is_none_or(|r| r == req.resource)
            && self.namespace.as_deref().is_none_or(|n| Some(n) == req.namespace)
            && self.name.as_deref().is_none_or(|n| Some(n) == req.name)
    }
}

/// What a fault can match on.
pub(crate) struct RequestFacts<'a> {
    pub verb: Option<Verb>,
    /// `pods` or `pods/eviction`.
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

/// What the request must suffer, decided once per request.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub delay: Option<Duration>,
    pub error: Option<ApiError>,
}

struct Rule {
    fault: Fault,
    fired: usize,
}

/// The server's fault switchboard (see [`ApiServer::faults`](super::ApiServer::faults)).
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    hits: Arc<Mutex<usize>>,
    control: broadcast::Sender<Control>,
}

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

impl Faults {
    pub(crate) fn new(control: broadcast::Sender<Control>) -> Faults {
        Faults { rules: Mutex::new(Vec::new()), hits: Arc::new(Mutex::new(0)), control }
    }

    /// Adds a fault; the first matching fault of each kind (delay, error) applies.
    pub fn inject(&self, fault: Fault) {
        self.rules.lock().expect("faults lock").push(Rule { fault, fired: 0 });
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.rules.lock().expect("faults lock").clear();
    }

    /// How many requests faults have hit so far.
    pub fn hits(&self) -> usize {
        *self.hits.lock().expect("faults lock")
    }

    /// Ends every open watch of `resource` (a plural such as `pods`), as a dropped connection
    /// would; clients see their stream end and must resume.
    pub fn drop_watches(&self, resource: &str) {
        let _ = self.control.send(Control::Drop(Some(resource.to_string())));
    }

    /// Ends every open watch.
    pub fn drop_all_watches(&self) {
        let _ = self.control.send(Control::Drop(None));
    }

    pub(crate) fn verdict(&self, req: &RequestFacts<'_>) -> Verdict {
        let mut rules = self.rules.lock().expect("faults lock");
        let mut verdict = Verdict::default();
        let mut hit = false;
        for rule in rules.iter_mut() {
            if rule.fault.times.is_some_and(|t| rule.fired >= t) || !rule.fault.matches(req) {
                continue;
            }
            let mut used = false;
            if verdict.error.is_none() {
                if let Some((code, message)) = &rule.fault.error {
                    verdict.error = Some(ApiError::new(*code, reason_for(*code), message.clone()));
                    used = true;
                    if verdict.delay.is_none() {
                        verdict.delay = rule.fault.delay;
                    }
                }
            }
            if verdict.delay.is_none() && rule.fault.error.is_none() {
                verdict.delay = rule.fault.delay;
                used = true;
            }
            if used {
                rule.fired += 1;
                hit = true;
            }
        }
        rules.retain(|r| r.fault.times.is_none_or(|t| r.fired < t));
        if hit {
            *self.hits.lock().expect("faults lock") += 1;
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(verb: Verb, resource: &'a str, name: &'a str) -> RequestFacts<'a> {
        RequestFacts { verb: Some(verb), resource, namespace: Some("default"), name: Some(name) }
    }

    #[test]
    fn counted_faults_run_out() {
        let faults = Faults::new(broadcast::channel(4).0);
        faults.inject(Fault::error(409).verb(Verb::Update).resource("pods").name("a").times(2));
        assert_eq!(faults.verdict(&facts(Verb::Update, "pods", "b")).error, None);
        assert_eq!(faults.verdict(&facts(Verb::Get, "pods", "a")).error, None);
        assert_eq!(faults.verdict(&facts(Verb::Update, "pods", "a")).error.map(|e| e.code), Some(409));
        assert_eq!(
            faults.verdict(&facts(Verb::Update, "pods", "a")).error.map(|e| e.reason),
            Some("Conflict")
        );
        assert_eq!(faults.verdict(&facts(Verb::Update, "pods", "a")).error, None);
        assert_eq!(faults.hits(), 2);
    }
}
