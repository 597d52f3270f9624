//! Self-signed certificate authorities and serving certificates (rcgen).
//!
//! Used for the api-manager webhook server and by tests that serve webhooks on 127.0.0.1.

use chrono::{DateTime, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen rejected the parameters or could not sign.
    #[error("cannot generate certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// A CA and a serving certificate signed by it, all PEM-encoded. `Debug` leaves the key out.
#[derive(Clone)]
pub struct ServingCert {
    /// The CA certificate clients trust (the webhook `caBundle`).
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key.
    pub key_pem: String,
    /// When the serving certificate expires.
    pub not_after: DateTime<Utc>,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("not_after", &self.not_after)
            .finish()
    }
}

/// Issues a fresh CA and a serving certificate for `names` (DNS names or IP addresses),
/// both valid for `validity` from now.
pub fn issue_serving_cert(
    common_name: &str,
    names: &[String],
    validity: chrono::Duration,
) -> Result<ServingCert, Error> {
    let now = Utc::now();
    let not_after = now + validity;
    let to_offset = |t: DateTime<Utc>| {
        time::OffsetDateTime::from_unix_timestamp(t.timestamp()).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    };

    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{common_name}-ca"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    // The CA outlives the leaf so that a re-issued leaf under the same CA stays trusted.
    ca_params.not_before = to_offset(now - chrono::Duration::minutes(5));
    ca_params.not_after = to_offset(now + validity * 2);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params = CertificateParams::new(names.to_vec())?;
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = to_offset(now - chrono::Duration::minutes(5));
    params.not_after = to_offset(not_after);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;

    Ok(ServingCert {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn issues_pem_ca_and_leaf() {
        let c = issue_serving_cert(
            "test",
            &["127.0.0.1".into(), "svc.ns.svc".into()],
            chrono::Duration::days(1),
        )
        .unwrap();
        assert!(c.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(c.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(c.key_pem.contains("PRIVATE KEY"));
        assert_ne!(c.ca_pem, c.cert_pem);
        assert!(c.not_after > Utc::now());
    }

    #[test]
    fn debug_output_never_shows_the_private_key() {
        let cert = issue_serving_cert("t", &["t".into()], chrono::Duration::hours(1)).unwrap();
        let shown = format!("{cert:?}");
        assert!(
            shown.contains("<redacted>") && !shown.contains("PRIVATE KEY"),
            "{shown}"
        );
    }
}
