//! Reading the cluster, or a snapshot of it, for the read-only commands (`plan`, `recommend`).

use std::sync::Arc;

use std::io::Read;

use anyhow::{anyhow, Context};
use kube::api::ListParams;
use kube::{Api, Client};

use crate::cli::output::{self, Failure};
use geometer_controller::Decoded;

/// Every `K` in the cluster that can be read; one that cannot is named on standard error and
/// left out, as the controller does.
pub(super) async fn list<K>(client: &Client) -> Result<Vec<Arc<K>>, Failure>
where
    K: kube::Resource<DynamicType = ()> + Clone + geometer_api::decode::Stored + std::fmt::Debug,
{
    let kind = K::kind(&()).to_string();
    let api = Api::<Decoded<K>>::all(client.clone());
    let list = api.list(&ListParams::default()).await.map_err(|e| {
        Failure::internal(anyhow!(
            "cannot list {kind}s: {} (is Geometer installed? `geometer crds | kubectl apply -f -`)",
            output::kube_error(&e)
        ))
    })?;
    let mut read = Vec::new();
    for item in list.items {
        match item {
            Decoded::Read(k) => read.push(k),
            Decoded::Unreadable(u) => eprintln!(
                "warning: skipped {kind} {}: cannot be read: {}",
                u.meta.name.as_deref().unwrap_or("(no name)"),
                u.error
            ),
        }
    }
    Ok(read)
}

/// The text of `path` (a file, or standard input for `-`); `flag` names it in errors.
pub(super) fn read_input(path: &str, flag: &str) -> Result<String, Failure> {
    let mut text = String::new();
    if path == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read {flag} from standard input"))
            .map_err(Failure::bad_input)?;
    } else {
        text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {flag} {path}"))
            .map_err(Failure::bad_input)?;
    }
    Ok(text)
}
