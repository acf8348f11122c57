//! Where the webhook's certificate is kept, handled as operators usually do:
//!
//! - **Managed** (the default in `deploy/`): the controller keeps a CA (ten years) and a serving
//!   certificate (one year) in a Secret of its namespace, shared by its replicas. The serving
//!   certificate is reissued from the same CA 30 days before it expires, so renewing changes
//!   nothing the API server trusts; the CA goes into the `caBundle` of every webhook of the
//!   MutatingWebhookConfiguration. This follows open-policy-agent/cert-controller
//!   `pkg/rotator/rotator.go` (the CA key kept in the Secret, the serving certificate renewed
//!   from it, the CA injected into the webhook configuration), which Kueue uses for its own
//!   webhooks (kubernetes-sigs/kueue `pkg/util/cert/cert.go`).
//! - **Directory**: `tls.crt` and `tls.key` in a folder, re-read when they change: a Secret
//!   that cert-manager keeps, mounted into the pod, with cert-manager's CA injector filling the
//!   `caBundle` (`cert-manager.io/inject-ca-from`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::{Api, Client};

use super::certs::{certified_key, first_pem, Ca, CertError, Material, Serving, RENEW_BEFORE};

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum CertSource {
    /// Kept by the controller in a Secret; the CA goes into the webhook configuration.
    Managed(Managed),
    /// `tls.crt` and `tls.key` in this folder, kept by someone else (cert-manager).
    Dir(PathBuf),
}

/// The objects a managed certificate lives in, and the names it is valid for.
#[derive(Debug, Clone)]
pub struct Managed {
    pub namespace: String,
    /// The Secret (type `kubernetes.io/tls`, with `ca.crt` and `ca.key`).
    pub secret: String,
    /// The MutatingWebhookConfiguration whose webhooks get the CA as `caBundle`.
    pub configuration: String,
    /// The ValidatingWebhookConfiguration of the agents' evictions, which gets it too.
    pub eviction_configuration: String,
    /// DNS names and IP addresses the API server reaches the webhook by.
    pub names: Vec<String>,
}

const TLS: &str = "kubernetes.io/tls";
const NOT_AFTER: &str = "geometer.dev/not-after";
const CA_NOT_AFTER: &str = "geometer.dev/ca-not-after";
const NAMES: &str = "geometer.dev/names";

/// What the managed Secret holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    ca: Ca,
    /// The CAs clients should trust: the current one first, then the one before it, if any.
    bundle: String,
    serving: Material,
    not_after: Timestamp,
    names: String,
}

impl Stored {
    fn read(secret: &Secret) -> Option<Stored> {
        let annotations = secret.metadata.annotations.as_ref()?;
        let text = |key: &str| String::from_utf8(secret.data.as_ref()?.get(key)?.0.clone()).ok();
        let bundle = text("ca.crt")?;
        Some(Stored {
            ca: Ca {
                cert_pem: first_pem(&bundle)?,
                key_pem: text("ca.key")?,
                not_after: annotations.get(CA_NOT_AFTER)?.parse().ok()?,
            },
            bundle,
            serving: Material { cert_pem: text("tls.crt")?, key_pem: text("tls.key")? },
            not_after: annotations.get(NOT_AFTER)?.parse().ok()?,
            names: annotations.get(NAMES)?.clone(),
        })
    }

    fn secret(&self, managed: &Managed, existing: Option<&Secret>) -> Secret {
        let data = [
            ("tls.crt", &self.serving.cert_pem),
            ("tls.key", &self.serving.key_pem),
            ("ca.crt", &self.bundle),
            ("ca.key", &self.ca.key_pem),
        ];
        Secret {
            metadata: ObjectMeta {
                name: Some(managed.secret.clone()),
                namespace: Some(managed.namespace.clone()),
                resource_version: existing.and_then(|s| s.metadata.resource_version.clone()),
                labels: existing.and_then(|s| s.metadata.labels.clone()),
                annotations: Some(
                    [
                        (NOT_AFTER.to_string(), self.not_after.to_string()),
                        (CA_NOT_AFTER.to_string(), self.ca.not_after.to_string()),
                        (NAMES.to_string(), self.names.clone()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            type_: Some(TLS.into()),
            data: Some(
                data.into_iter().map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes()))).collect(),
            ),
            ..Secret::default()
        }
    }
}

/// What to store instead of `existing` at `now`, or `None` while it is good (only when there is
/// one): the serving
/// certificate is reissued from the same CA when it nears its end or names other names; a CA
/// near its own end is replaced, the old one kept in the bundle.
fn renewed(existing: Option<&Stored>, names: &[String], now: Timestamp) -> Result<Option<Stored>, CertError> {
    let wanted = names.join(",");
    let ca_good = |s: &&Stored| {
        s.ca.not_after - RENEW_BEFORE > now
            && certified_key(&Material { cert_pem: s.ca.cert_pem.clone(), key_pem: s.ca.key_pem.clone() })
                .is_ok()
    };
    let current_ca = existing.filter(ca_good);
    if let Some(s) = current_ca {
        if s.not_after - RENEW_BEFORE > now && s.names == wanted && certified_key(&s.serving).is_ok() {
            return Ok(None);
        }
    }
    let (ca, bundle) = match current_ca {
        Some(s) => (s.ca.clone(), s.bundle.clone()),
        None => {
            let ca = Ca::new(now)?;
            let previous = existing.and_then(|s| first_pem(&s.bundle)).unwrap_or_default();
            let bundle = format!("{}{previous}", ca.cert_pem);
            (ca, bundle)
        }
    };
    let (serving, not_after) = ca.issue(names, now)?;
    Ok(Some(Stored { ca, bundle, serving, not_after, names: wanted }))
}

/// The managed Secret's content, issued or renewed first where needed. Two replicas may race:
/// the loser's write conflicts, and it takes the winner's.
async fn managed_secret(client: &Client, managed: &Managed, now: Timestamp) -> Result<Stored, CertError> {
    let api = Api::<Secret>::namespaced(client.clone(), &managed.namespace);
    let what = || format!("Secret {}/{}", managed.namespace, managed.secret);
    let api_error = |source| CertError::Api { what: what(), source };
    let existing = api.get_opt(&managed.secret).await.map_err(api_error)?;
    if let Some(kind) = existing.as_ref().and_then(|s| s.type_.clone()).filter(|t| t != TLS) {
        return Err(CertError::Unusable(format!(
            "{} is of type {kind}, not {TLS}; delete it and the controller creates its own",
            what()
        )));
    }
    let stored = existing.as_ref().and_then(Stored::read);
    let fresh = match (renewed(stored.as_ref(), &managed.names, now)?, stored) {
        (Some(fresh), _) => fresh,
        (None, Some(good)) => return Ok(good),
        (None, None) => return Err(CertError::Unusable(format!("{} could not be issued", what()))),
    };
    let secret = fresh.secret(managed, existing.as_ref());
    let written = match &existing {
        None => api.create(&PostParams::default(), &secret).await,
        Some(_) => api.replace(&managed.secret, &PostParams::default(), &secret).await,
    };
    match written {
        Ok(_) => {
            tracing::info!(secret = %what(), names = %fresh.names, not_after = %fresh.not_after, "issued the webhook's serving certificate");
            Ok(fresh)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let winner = api.get(&managed.secret).await.map_err(api_error)?;
            Stored::read(&winner)
                .filter(|s| matches!(renewed(Some(s), &managed.names, now), Ok(None)))
                .ok_or_else(|| {
                    CertError::Unusable(format!("{} changed under us and is not usable yet", what()))
                })
        }
        Err(source) => Err(api_error(source)),
    }
}

/// Writes `bundle` as the `caBundle` of every webhook of both configurations.
async fn inject_ca(client: &Client, managed: &Managed, bundle: &str) -> Result<(), CertError> {
    inject_into::<MutatingWebhookConfiguration>(client, &managed.configuration, bundle).await?;
    inject_into::<ValidatingWebhookConfiguration>(client, &managed.eviction_configuration, bundle).await
}

/// A webhook configuration, mutating or validating: the client configurations of its webhooks.
trait WebhookConfiguration:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
{
    fn client_configs(&mut self) -> Vec<&mut WebhookClientConfig>;
}

impl WebhookConfiguration for MutatingWebhookConfiguration {
    fn client_configs(&mut self) -> Vec<&mut WebhookClientConfig> {
        self.webhooks.iter_mut().flatten().map(|w| &mut w.client_config).collect()
    }
}

impl WebhookConfiguration for ValidatingWebhookConfiguration {
    fn client_configs(&mut self) -> Vec<&mut WebhookClientConfig> {
        self.webhooks.iter_mut().flatten().map(|w| &mut w.client_config).collect()
    }
}

/// Writes `bundle` as the `caBundle` of every webhook of configuration `name`. A missing
/// configuration is not an error (the webhook is not installed); the next check tries again.
async fn inject_into<C: WebhookConfiguration>(
    client: &Client,
    name: &str,
    bundle: &str,
) -> Result<(), CertError> {
    let api = Api::<C>::all(client.clone());
    let what = || format!("{} {name}", C::kind(&()));
    let api_error = |source| CertError::Api { what: what(), source };
    let Some(mut configuration) = api.get_opt(name).await.map_err(api_error)? else {
        tracing::warn!(configuration = %what(), "the webhook configuration is not installed; the API server will not call the webhook");
        return Ok(());
    };
    let bundle = ByteString(bundle.as_bytes().to_vec());
    let mut changed = false;
    for client_config in configuration.client_configs() {
        if client_config.ca_bundle.as_ref() != Some(&bundle) {
            client_config.ca_bundle = Some(bundle.clone());
            changed = true;
        }
    }
    if changed {
        configuration.meta_mut().managed_fields = None;
        api.replace(name, &PostParams::default(), &configuration).await.map_err(api_error)?;
        tracing::info!(configuration = %what(), "wrote the webhook's CA into the configuration");
    }
    Ok(())
}

/// The serving certificate in `dir`.
fn from_dir(dir: &std::path::Path) -> Result<Material, CertError> {
    let read = |file: &str| {
        let path = dir.join(file);
        std::fs::read_to_string(&path)
            .map_err(|e| CertError::Unusable(format!("cannot read {}: {e}", path.display())))
    };
    Ok(Material { cert_pem: read("tls.crt")?, key_pem: read("tls.key")? })
}

/// Keeps `serving` current from `source`, checking every `every`: the certificate is presented
/// as soon as it is read, before the CA is written into the webhook configuration (a replica
/// that cannot write it still answers with the certificate the others wrote the CA for).
pub async fn keep(client: Client, source: CertSource, serving: Arc<Serving>, every: Duration) {
    loop {
        let now = Timestamp::now();
        let result = match &source {
            CertSource::Dir(dir) => from_dir(dir).and_then(|m| serving.set(&m)),
            CertSource::Managed(managed) => match managed_secret(&client, managed, now).await {
                Ok(stored) => match serving.set(&stored.serving) {
                    Ok(()) => inject_ca(&client, managed, &stored.bundle).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "the webhook's certificate: retrying");
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    fn names() -> Vec<String> {
        vec!["geometer-webhook.geometer-system.svc".into()]
    }

    fn managed() -> Managed {
        Managed {
            namespace: "geometer-system".into(),
            secret: "geometer-webhook-tls".into(),
            configuration: "geometer-rightsizing".into(),
            eviction_configuration: "geometer-agent-evictions".into(),
            names: names(),
        }
    }

    fn days(n: i64) -> SignedDuration {
        SignedDuration::from_hours(n * 24)
    }

    #[test]
    fn a_stored_certificate_is_kept_then_reissued_from_the_same_ca_a_month_before_it_expires() {
        let now: Timestamp = "2026-12-04T00:00:00Z".parse().unwrap();
        let first = renewed(None, &names(), now).unwrap().expect("issued when missing");
        let read = Stored::read(&first.secret(&managed(), None)).expect("the Secret reads back");
        assert_eq!(read, first);
        assert_eq!(renewed(Some(&read), &names(), now + days(300)).unwrap(), None, "kept while good");

        let renewal = renewed(Some(&read), &names(), now + days(340)).unwrap().expect("renewed");
        assert_eq!(renewal.ca, first.ca, "the same CA signs it");
        assert_eq!(renewal.bundle, first.bundle, "so the API server's trust is unchanged");
        assert_ne!(renewal.serving, first.serving);
        let other = vec!["127.0.0.1".to_string()];
        assert_eq!(renewed(Some(&read), &other, now).unwrap().unwrap().ca, first.ca, "new names, same CA");
    }

    #[test]
    fn a_ca_near_its_end_is_replaced_and_the_bundle_keeps_the_old_one() {
        let now: Timestamp = "2026-12-04T00:00:00Z".parse().unwrap();
        let first = renewed(None, &names(), now).unwrap().unwrap();
        let late = first.ca.not_after - days(10);
        let next = renewed(Some(&first), &names(), late).unwrap().unwrap();
        assert_ne!(next.ca, first.ca);
        assert_eq!(next.bundle, format!("{}{}", next.ca.cert_pem, first.ca.cert_pem));
    }

    #[test]
    fn a_secret_with_a_broken_key_is_reissued() {
        let now = Timestamp::now();
        let mut stored = renewed(None, &names(), now).unwrap().unwrap();
        stored.serving.key_pem =
            "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n".into();
        assert!(renewed(Some(&stored), &names(), now).unwrap().is_some());
    }
}
