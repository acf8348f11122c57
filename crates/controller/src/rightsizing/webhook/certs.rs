//! The webhook's certificates: a CA, a serving certificate it signs, and what the TLS server
//! presents ([`Serving`]). Where they are kept is [`super::store`].

use std::sync::{Arc, RwLock};

use jiff::{tz::TimeZone, SignedDuration, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;

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
pub const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(30 * 24);
/// A serving certificate's life.
const SERVING_DAYS: i64 = 365;
/// The CA's life: it outlives many serving certificates, so renewing one changes nothing the
/// API server trusts.
const CA_DAYS: i64 = 10 * 365;
const CA_NAME: &str = "geometer-webhook-ca";

/// PEM texts of a serving certificate and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA: its certificate, its key, and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ca {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: Timestamp,
}

/// The parameters every Geometer webhook CA is made with; with the CA's key they rebuild its
/// issuer (the subject and the key identifier derive from these and the key).
fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(DnType::CommonName, CA_NAME);
    ca.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    Ok(ca)
}

impl Ca {
    /// A new CA, valid from `now` for [`CA_DAYS`].
    pub fn new(now: Timestamp) -> Result<Ca, CertError> {
        let not_after = now + SignedDuration::from_hours(CA_DAYS * 24);
        let mut params = ca_params()?;
        validity(&mut params, now, not_after);
        let key = KeyPair::generate()?;
        let key_pem = key.serialize_pem();
        let ca = CertifiedIssuer::self_signed(params, key)?;
        Ok(Ca { cert_pem: ca.pem(), key_pem, not_after })
    }

    /// A serving certificate for `names` (DNS names or IP addresses) signed by this CA, valid
    /// from `now` for [`SERVING_DAYS`], and when it expires.
    pub fn issue(&self, names: &[String], now: Timestamp) -> Result<(Material, Timestamp), CertError> {
        let issuer = Issuer::new(ca_params()?, KeyPair::from_pem(&self.key_pem)?);
        let not_after = now + SignedDuration::from_hours(SERVING_DAYS * 24);
        let mut serving = CertificateParams::new(names.to_vec())?;
        serving
            .distinguished_name
            .push(DnType::CommonName, names.first().map_or("geometer-webhook", |n| n.as_str()));
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut serving, now, not_after);
        let key = KeyPair::generate()?;
        let cert = serving.signed_by(&key, &issuer)?;
        Ok((Material { cert_pem: cert.pem(), key_pem: key.serialize_pem() }, not_after))
    }
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

/// The first PEM block of `pem` (a bundle's newest CA).
pub fn first_pem(pem: &str) -> Option<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let end = pem.find(END)? + END.len();
    Some(format!("{}\n", pem[..end].trim_start()))
}

/// The certificate the TLS server presents; swapped when it is renewed.
#[derive(Debug, Default)]
pub struct Serving(RwLock<Option<(Material, Arc<CertifiedKey>)>>);

impl Serving {
    /// Presents `material` from the next handshake on (unchanged material is kept as is; a
    /// broken one is refused and the current one kept).
    pub fn set(&self, material: &Material) -> Result<(), CertError> {
        let mut current = self.0.write().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|(m, _)| m == material) {
            return Ok(());
        }
        *current = Some((material.clone(), Arc::new(certified_key(material)?)));
        Ok(())
    }

    /// Whether a certificate is presented (the replica can answer the API server).
    pub fn is_set(&self) -> bool {
        self.0.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }
}

impl ResolvesServerCert for Serving {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(_, key)| key.clone())
    }
}

/// The certificate chain and key, checked to belong together (a pair read mid-rotation may not).
pub fn certified_key(material: &Material) -> Result<CertifiedKey, CertError> {
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
    let certified = CertifiedKey::new(chain, key);
    certified
        .keys_match()
        .map_err(|e| CertError::Unusable(format!("tls.key is not the key of tls.crt: {e}")))?;
    Ok(certified)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["geometer-webhook.geometer-system.svc".into(), "127.0.0.1".into()]
    }

    #[test]
    fn serving_certificates_of_one_ca_are_usable_and_expire_after_a_year() {
        let now: Timestamp = "2026-12-04T00:00:00Z".parse().unwrap();
        let ca = Ca::new(now).unwrap();
        assert_eq!(ca.not_after, "2036-12-01T00:00:00Z".parse::<Timestamp>().unwrap());
        let (first, not_after) = ca.issue(&names(), now).unwrap();
        assert_eq!(not_after, "2027-12-04T00:00:00Z".parse::<Timestamp>().unwrap());
        let (second, _) = ca.issue(&names(), not_after).unwrap();
        assert!(certified_key(&first).is_ok() && certified_key(&second).is_ok());
        assert_ne!(first, second, "a renewal is a new key and certificate");
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let now = Timestamp::now();
        let ca = Ca::new(now).unwrap();
        let (a, _) = ca.issue(&names(), now).unwrap();
        let (b, _) = ca.issue(&names(), now).unwrap();
        let mixed = Material { cert_pem: a.cert_pem, key_pem: b.key_pem };
        assert!(certified_key(&mixed).unwrap_err().to_string().contains("not the key of tls.crt"));
        let serving = Serving::default();
        let refused = serving.set(&mixed).unwrap_err().to_string();
        assert!(refused.contains("not the key of tls.crt"), "{refused}");
        assert!(!serving.is_set(), "nothing half-presented");
    }

    #[test]
    fn a_bundles_first_ca_is_its_newest() {
        let (a, b) = (Ca::new(Timestamp::now()).unwrap(), Ca::new(Timestamp::now()).unwrap());
        let bundle = format!("{}{}", b.cert_pem, a.cert_pem);
        assert_eq!(first_pem(&bundle).unwrap().trim(), b.cert_pem.trim());
    }
}
