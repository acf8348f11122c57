//! The webhook's serving certificate, handled as operators usually do:
//!
//! - **Managed** (the default in `deploy/`): the controller keeps a CA and a serving certificate
//!   in a Secret of its namespace, shared by its replicas, renews them 30 days before they
//!   expire, and writes the CA into the `caBundle` of its MutatingWebhookConfiguration. This is
//!   what Kueue's internal certificate management does (kubernetes-sigs/kueue
//!   `pkg/util/cert/cert.go`, over open-policy-agent/cert-controller `pkg/rotator/rotator.go`).
//! - **Directory**: `tls.crt` and `tls.key` in a folder, re-read when they change: a Secret
//!   that cert-manager keeps, mounted into the pod, with cert-manager's CA injector filling the
//!   `caBundle` (`cert-manager.io/inject-ca-from`).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use jiff::{tz::TimeZone, SignedDuration, Timestamp};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;

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
    /// The Secret (type `kubernetes.io/tls`, with `ca.crt`).
    pub secret: String,
    /// The MutatingWebhookConfiguration whose webhooks get the CA as `caBundle`.
    pub configuration: String,
    /// DNS names and IP addresses the API server reaches the webhook by.
    pub names: Vec<String>,
}

#[derive(Debug, Error)]
pub enum CertError {
    #[error("cannot issue a certificate: {0}")]
    Issue(#[from] rcgen::Error),
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("{0}")]
    Unusable(String),
}

/// Certificates are renewed this long before they expire.
const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(30 * 24);
/// A serving certificate's life; its CA lives ten times as long.
const VALID_DAYS: i64 = 365;
const NOT_AFTER: &str = "geometer.dev/not-after";
const NAMES: &str = "geometer.dev/names";

/// PEM texts of a serving certificate, its key, and the CAs a client should trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

/// A fresh CA and a serving certificate for `names` signed by it, valid from `now`.
pub fn issue(names: &[String], now: Timestamp) -> Result<(Material, Timestamp), CertError> {
    let not_after = now + SignedDuration::from_hours(VALID_DAYS * 24);
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(DnType::CommonName, "geometer-webhook-ca");
    ca.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    validity(&mut ca, now, now + SignedDuration::from_hours(10 * VALID_DAYS * 24));
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

    let mut serving = CertificateParams::new(names.to_vec())?;
    serving
        .distinguished_name
        .push(DnType::CommonName, names.first().map_or("geometer-webhook", |n| n.as_str()));
    serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut serving, now, not_after);
    let key = KeyPair::generate()?;
    let cert = serving.signed_by(&key, &ca)?;
    Ok((Material { cert_pem: cert.pem(), key_pem: key.serialize_pem(), ca_pem: ca.pem() }, not_after))
}

/// Valid from midnight UTC of the day before `now` to midnight UTC of `until`'s day.
fn validity(params: &mut CertificateParams, now: Timestamp, until: Timestamp) {
    let day = |t: Timestamp| {
        let date = t.to_zoned(TimeZone::UTC).date();
        // A civil date's month and day are 1..=12 and 1..=31.
        rcgen::date_time_ymd(i32::from(date.year()), date.month().unsigned_abs(), date.day().unsigned_abs())
    };
    params.not_before = day(now - SignedDuration::from_hours(24));
    params.not_after = day(until);
}

/// The certificate the TLS server presents; swapped when it is renewed.
#[derive(Debug, Default)]
pub struct Serving(RwLock<Option<(Material, Arc<CertifiedKey>)>>);

impl Serving {
    /// Presents `material` from the next handshake on (unchanged material is kept as is).
    pub fn set(&self, material: &Material) -> Result<(), CertError> {
        let mut current = self.0.write().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|(m, _)| m == material) {
            return Ok(());
        }
        *current = Some((material.clone(), Arc::new(certified_key(material)?)));
        Ok(())
    }

    pub fn is_set(&self) -> bool {
        self.0.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }
}

impl ResolvesServerCert for Serving {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(_, key)| key.clone())
    }
}

fn certified_key(material: &Material) -> Result<CertifiedKey, CertError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(material.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::Unusable(format!("tls.crt is not PEM certificates: {e}")))?;
    if chain.is_empty() {
        return Err(CertError::Unusable("tls.crt holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(material.key_pem.as_bytes())
        .map_err(|e| CertError::Unusable(format!("tls.key is not a PEM private key: {e}")))?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| CertError::Unusable(format!("tls.key cannot sign: {e}")))?;
    Ok(CertifiedKey::new(chain, key))
}

/// The current material from `source`: read from the folder, or the managed Secret's (issued
/// or renewed first where needed, and its CA written into the webhook configuration).
pub async fn current(client: &Client, source: &CertSource, now: Timestamp) -> Result<Material, CertError> {
    match source {
        CertSource::Dir(dir) => {
            let read = |file: &str| {
                let path = dir.join(file);
                std::fs::read_to_string(&path)
                    .map_err(|e| CertError::Unusable(format!("cannot read {}: {e}", path.display())))
            };
            Ok(Material { cert_pem: read("tls.crt")?, key_pem: read("tls.key")?, ca_pem: String::new() })
        }
        CertSource::Managed(managed) => {
            let material = secret(client, managed, now).await?;
            inject_ca(client, managed, &material.ca_pem).await?;
            Ok(material)
        }
    }
}

/// The managed Secret's material, issuing it when missing, expiring, or for other names.
async fn secret(client: &Client, managed: &Managed, now: Timestamp) -> Result<Material, CertError> {
    let api = Api::<Secret>::namespaced(client.clone(), &managed.namespace);
    let what = || format!("Secret {}/{}", managed.namespace, managed.secret);
    let existing =
        api.get_opt(&managed.secret).await.map_err(|source| CertError::Api { what: what(), source })?;
    if let Some(material) = existing.as_ref().and_then(|s| still_good(s, &managed.names, now)) {
        return Ok(material);
    }
    let (mut material, not_after) = issue(&managed.names, now)?;
    // Clients keep trusting the CA before this one until they read the new bundle.
    if let Some(previous) = existing.as_ref().and_then(|s| text(s, "ca.crt")).and_then(|ca| first_pem(&ca)) {
        material.ca_pem.push_str(&previous);
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(managed.secret.clone()),
            namespace: Some(managed.namespace.clone()),
            resource_version: existing.as_ref().and_then(|s| s.metadata.resource_version.clone()),
            annotations: Some(
                [
                    (NOT_AFTER.to_string(), not_after.to_string()),
                    (NAMES.to_string(), managed.names.join(",")),
                ]
                .into(),
            ),
            labels: existing.as_ref().and_then(|s| s.metadata.labels.clone()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [("tls.crt", &material.cert_pem), ("tls.key", &material.key_pem), ("ca.crt", &material.ca_pem)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    };
    // Two replicas may race: the loser's write conflicts, and it takes the winner's.
    let written = match existing {
        None => api.create(&PostParams::default(), &secret).await,
        Some(_) => api.replace(&managed.secret, &PostParams::default(), &secret).await,
    };
    match written {
        Ok(_) => {
            tracing::info!(secret = %what(), names = ?managed.names, not_after = %not_after, "issued the webhook's certificate");
            Ok(material)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let winner =
                api.get(&managed.secret).await.map_err(|source| CertError::Api { what: what(), source })?;
            still_good(&winner, &managed.names, now).ok_or_else(|| {
                CertError::Unusable(format!("{} changed under us and is not usable yet", what()))
            })
        }
        Err(source) => Err(CertError::Api { what: what(), source }),
    }
}

/// The Secret's material while it is valid for `names` for longer than [`RENEW_BEFORE`].
fn still_good(secret: &Secret, names: &[String], now: Timestamp) -> Option<Material> {
    let annotations = secret.metadata.annotations.as_ref()?;
    let not_after: Timestamp = annotations.get(NOT_AFTER)?.parse().ok()?;
    if not_after - RENEW_BEFORE <= now || annotations.get(NAMES)? != &names.join(",") {
        return None;
    }
    let material = Material {
        cert_pem: text(secret, "tls.crt")?,
        key_pem: text(secret, "tls.key")?,
        ca_pem: text(secret, "ca.crt")?,
    };
    certified_key(&material).ok().map(|_| material)
}

fn text(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// The first PEM block of `pem`.
fn first_pem(pem: &str) -> Option<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let end = pem.find(END)? + END.len();
    Some(format!("{}\n", pem[..end].trim_start()))
}

/// Writes `ca_pem` as the `caBundle` of every webhook of the configuration. A missing
/// configuration is not an error (the webhook is not installed); the next round tries again.
async fn inject_ca(client: &Client, managed: &Managed, ca_pem: &str) -> Result<(), CertError> {
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let what = || format!("MutatingWebhookConfiguration {}", managed.configuration);
    let Some(mut configuration) = api
        .get_opt(&managed.configuration)
        .await
        .map_err(|source| CertError::Api { what: what(), source })?
    else {
        tracing::warn!(configuration = %managed.configuration, "the webhook configuration is not installed; the API server will not call the webhook");
        return Ok(());
    };
    let bundle = ByteString(ca_pem.as_bytes().to_vec());
    let mut changed = false;
    for webhook in configuration.webhooks.iter_mut().flatten() {
        if webhook.client_config.ca_bundle.as_ref() != Some(&bundle) {
            webhook.client_config.ca_bundle = Some(bundle.clone());
            changed = true;
        }
    }
    if changed {
        configuration.metadata.managed_fields = None;
        api.replace(&managed.configuration, &PostParams::default(), &configuration)
            .await
            .map_err(|source| CertError::Api { what: what(), source })?;
        tracing::info!(configuration = %managed.configuration, "wrote the webhook's CA into the configuration");
    }
    Ok(())
}

/// Keeps `serving` current from `source`, checking every `every`.
pub async fn keep(client: Client, source: CertSource, serving: Arc<Serving>, every: std::time::Duration) {
    loop {
        match current(&client, &source, Timestamp::now()).await.and_then(|m| serving.set(&m)) {
            Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "the webhook's certificate is not ready; retrying"),
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["geometer-webhook.geometer-system.svc".into(), "127.0.0.1".into()]
    }

    fn secret_of(material: &Material, not_after: Timestamp, names: &[String]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                annotations: Some(
                    [(NOT_AFTER.to_string(), not_after.to_string()), (NAMES.to_string(), names.join(","))]
                        .into(),
                ),
                ..ObjectMeta::default()
            },
            data: Some(
                [
                    ("tls.crt", &material.cert_pem),
                    ("tls.key", &material.key_pem),
                    ("ca.crt", &material.ca_pem),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
                .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn an_issued_certificate_is_served_and_kept_until_a_month_before_it_expires() {
        let now: Timestamp = "2026-12-04T00:00:00Z".parse().unwrap();
        let (material, not_after) = issue(&names(), now).unwrap();
        assert_eq!(not_after, "2027-12-04T00:00:00Z".parse::<Timestamp>().unwrap());
        assert!(certified_key(&material).is_ok());
        let secret = secret_of(&material, not_after, &names());
        assert_eq!(still_good(&secret, &names(), now), Some(material.clone()));
        let late = not_after - SignedDuration::from_hours(29 * 24);
        assert_eq!(still_good(&secret, &names(), late), None, "renewed 30 days before it expires");
        assert_eq!(still_good(&secret, &names()[..1], now), None, "renewed for other names");
    }

    #[test]
    fn a_secret_with_a_broken_key_is_not_used() {
        let now = Timestamp::now();
        let (mut material, not_after) = issue(&names(), now).unwrap();
        material.key_pem = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n".into();
        assert_eq!(still_good(&secret_of(&material, not_after, &names()), &names(), now), None);
    }

    #[test]
    fn the_bundle_keeps_only_the_newest_previous_ca() {
        let (a, _) = issue(&names(), Timestamp::now()).unwrap();
        let (b, _) = issue(&names(), Timestamp::now()).unwrap();
        let bundle = format!("{}{}", b.ca_pem, a.ca_pem);
        assert_eq!(first_pem(&bundle).unwrap().trim(), b.ca_pem.trim());
    }
}
