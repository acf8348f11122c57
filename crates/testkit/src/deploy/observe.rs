//! Clients that sign their requests, so that the in-memory API server's request log tells the
//! controller's calls from the agent's and from the test's own.

use std::collections::BTreeSet;

use geometer_apiserver::ApiServer;
use http::header::{HeaderValue, USER_AGENT};

use super::rbac::Access;

/// A kube client for `server` whose requests carry `User-Agent: who`.
pub fn client_as(server: &ApiServer, who: &'static str) -> kube::Client {
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut req: http::Request<kube::client::Body>| {
            req.headers_mut().insert(USER_AGENT, HeaderValue::from_static(who));
            req
        })
        .service(server.service());
    kube::Client::new(service, "default")
}

/// The resource requests `who` made, as RBAC sees them. Panics when the server's log may have
/// dropped some (it keeps the latest 10,000): the scenario must then be shorter.
pub fn accesses(server: &ApiServer, who: &str) -> BTreeSet<Access> {
    let log = server.requests();
    assert!(log.len() < 10_000, "the request log is full and may have dropped calls; shorten the scenario");
    log.iter()
        .filter(|r| r.user_agent == who)
        .filter_map(|r| {
            Some(Access {
                group: r.group.clone()?,
                resource: r.resource.clone()?,
                verb: r.verb?.to_string(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
            })
        })
        .collect()
}
