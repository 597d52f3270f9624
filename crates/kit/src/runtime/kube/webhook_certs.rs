//! Webhook certificates: a CA and serving certificate kept in one Secret that every replica
//! shares, re-issued once less than half their validity is left, and the CA injected into the
//! webhook configuration's `caBundle` (only that field, with our own field ownership). The
//! api-manager's MutatingWebhookConfiguration and the operator's ValidatingWebhookConfiguration
//! are kept this way.
//!
//! During a rotation the bundle holds the new and the previous CA, so replicas still serving the
//! old certificate keep being trusted until they pick up the new one, which they serve only from
//! the refresh after the one that put its CA in the bundle.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::runtime::process::https::CertSlot;
use crate::runtime::process::pki::{self, ServingCert};

/// A re-issued certificate is served at once, without waiting for the next refresh, when the
/// served one expires within this.
pub const SWITCH_GRACE: chrono::Duration = chrono::Duration::hours(1);

/// Annotation on the Secret recording when the serving certificate expires.
pub const NOT_AFTER_ANNOTATION: &str = "storageos.com/not-after";
const CA_KEY: &str = "ca-cert.pem";
const CERT_KEY: &str = "cert.pem";
const KEY_KEY: &str = "key.pem";

/// Why certificates could not be ensured.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the Secret or the webhook configuration failed.
    #[error("{what}: {source}; check this ServiceAccount's RBAC for secrets and the webhook configuration")]
    Kube {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The webhook configuration does not exist (the operator renders the api-manager's; the
    /// install manifests hold the operator's).
    #[error("{0} does not exist; it is created by the install (the operator's) or by the operator (the api-manager's)")]
    NoWebhookConfig(String),
    /// Generating a certificate failed.
    #[error(transparent)]
    Pki(#[from] pki::Error),
}

/// The kind of webhook configuration whose `caBundle` is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigKind {
    Mutating,
    Validating,
}

impl ConfigKind {
    fn resource(self) -> ApiResource {
        match self {
            Self::Mutating => ApiResource::erase::<MutatingWebhookConfiguration>(&()),
            Self::Validating => ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        }
    }
}

/// Where the certificates live and what they are for.
#[derive(Clone)]
pub struct CertManager {
    pub client: kube::Client,
    pub secret_namespace: String,
    pub secret_name: String,
    pub service_namespace: String,
    pub service_name: String,
    pub webhook_config: String,
    pub kind: ConfigKind,
    /// `app.kubernetes.io/component` of the Secret: who serves with it.
    pub component: String,
    pub validity: chrono::Duration,
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube {
        what,
        source: Box::new(source),
    }
}

/// Whether `cert` is one this replica can serve for `dns_name` at `now`: the certificate and key
/// load and belong together, and the certificate chains to the stored CA, is valid at `now` and
/// covers `dns_name`. The Secret's annotation alone is not evidence (a restore, a manual edit or
/// a copy from another namespace can make it lie).
pub fn verify(cert: &ServingCert, dns_name: &str, now: DateTime<Utc>) -> Result<(), String> {
    // The trait only, to call the standard WebPKI verification; nothing is skipped.
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

    crate::runtime::process::https::CertSlot::new(&cert.cert_pem, &cert.key_pem).map_err(|e| e.to_string())?;
    let ca = CertificateDer::from_pem_slice(cert.ca_pem.as_bytes()).map_err(|e| format!("CA: {e}"))?;
    let ee = CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).map_err(|e| format!("certificate: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).map_err(|e| format!("CA: {e}"))?;
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(std::sync::Arc::new(roots), provider)
        .build()
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(dns_name.to_string()).map_err(|e| e.to_string())?;
    let secs = u64::try_from(now.timestamp()).map_err(|e| e.to_string())?;
    let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
    verifier
        .verify_server_cert(&ee, &[], &name, &[], at)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The certificate stored in `secret`, if complete and not yet due for re-issue at `now`.
pub fn usable(secret: &Secret, validity: chrono::Duration, now: DateTime<Utc>) -> Option<ServingCert> {
    let data = secret.data.as_ref()?;
    let text = |k: &str| {
        data.get(k)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|s| !s.is_empty())
    };
    let not_after: DateTime<Utc> = secret
        .metadata
        .annotations
        .as_ref()?
        .get(NOT_AFTER_ANNOTATION)
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())?
        .with_timezone(&Utc);
    // Re-issue once less than half the validity is left ("valid one year, re-issued after six months").
    if not_after - now < validity / 2 {
        return None;
    }
    Some(ServingCert {
        ca_pem: text(CA_KEY)?,
        cert_pem: text(CERT_KEY)?,
        key_pem: text(KEY_KEY)?,
        not_after,
    })
}

/// The new `caBundle`: `ca` first, then the previous CA if it differs (at most two).
pub fn bundle_with(previous: Option<&[u8]>, ca: &str) -> String {
    const END: &str = "-----END CERTIFICATE-----";
    let ca = ca.trim();
    let previous = previous
        .and_then(|p| std::str::from_utf8(p).ok())
        .unwrap_or_default()
        .trim();
    let first = previous
        .find(END)
        .map(|end| previous[..end + END.len()].trim())
        .unwrap_or_default();
    if first == ca {
        // Already current: keep the bundle as it is.
        return format!("{previous}\n");
    }
    if first.is_empty() {
        format!("{ca}\n")
    } else {
        format!("{ca}\n{first}\n")
    }
}

impl CertManager {
    fn dns_names(&self) -> Vec<String> {
        let (svc, ns) = (&self.service_name, &self.service_namespace);
        vec![
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
            format!("{svc}.{ns}"),
            svc.clone(),
        ]
    }

    fn secret_for(&self, cert: &ServingCert, resource_version: Option<String>) -> Secret {
        let data: BTreeMap<String, ByteString> = [
            (CA_KEY, cert.ca_pem.as_bytes()),
            (CERT_KEY, cert.cert_pem.as_bytes()),
            (KEY_KEY, cert.key_pem.as_bytes()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
        .collect();
        let mut s: Secret = serde_json::from_value(json!({
            "metadata": {
                "name": self.secret_name,
                "namespace": self.secret_namespace,
                "labels": {"app.kubernetes.io/component": self.component, "app.kubernetes.io/part-of": "storageos"},
                "annotations": {NOT_AFTER_ANNOTATION: cert.not_after.to_rfc3339()}
            },
            "type": "Opaque"
        }))
        .unwrap_or_default();
        s.metadata.resource_version = resource_version;
        s.data = Some(data);
        s
    }

    /// Returns the shared certificate, issuing (or re-issuing) it when needed. Replicas racing
    /// to write it converge on the one that wins (optimistic concurrency on the Secret).
    pub async fn ensure(&self) -> Result<ServingCert, Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.secret_namespace);
        let what = format!("Secret {}/{}", self.secret_namespace, self.secret_name);
        let dns = self.dns_names();
        for _ in 0..3 {
            let existing = api.get_opt(&self.secret_name).await.map_err(kube_err(&what))?;
            if let Some(cert) = existing.as_ref().and_then(|s| usable(s, self.validity, Utc::now())) {
                match verify(&cert, &dns[0], Utc::now()) {
                    Ok(()) => return Ok(cert),
                    Err(why) => {
                        tracing::warn!(secret = %what, %why, "the stored webhook certificate cannot be served; issuing a new one")
                    }
                }
            }
            let cert = pki::issue_serving_cert(&dns[0], &dns, self.validity)?;
            let written = match existing {
                None => api.create(&PostParams::default(), &self.secret_for(&cert, None)).await,
                Some(old) => {
                    let rv = old.metadata.resource_version.clone();
                    api.replace(&self.secret_name, &PostParams::default(), &self.secret_for(&cert, rv))
                        .await
                }
            };
            match written {
                Ok(_) => {
                    tracing::info!(secret = %what, not_after = %cert.not_after, "issued webhook certificate");
                    return Ok(cert);
                }
                // Another replica wrote first: use theirs.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(kube_err(&what)(e)),
            }
        }
        let existing = api.get(&self.secret_name).await.map_err(kube_err(&what))?;
        usable(&existing, self.validity, Utc::now())
            .filter(|c| verify(c, &dns[0], Utc::now()).is_ok())
            .ok_or_else(|| Error::NoWebhookConfig(self.config_name()))
    }

    fn config_name(&self) -> String {
        format!("{} {}", self.kind.resource().kind, self.webhook_config)
    }

    /// Ensures the certificate and the caBundle, retrying every `retry` until both work (the
    /// webhook configuration may not exist yet while the install is under way).
    ///
    /// A failure is warned about when it first appears, when it changes and then every
    /// [`REPEAT_WARNING`]; the retries between are logged at debug, so a configuration that is
    /// missing for a long time does not bury the rest of the log.
    pub async fn ensure_until_ready(&self, retry: std::time::Duration) -> ServingCert {
        let mut warned = RepeatedWarning::default();
        loop {
            match self.ensure().await {
                Ok(cert) => match self.inject_ca(&cert.ca_pem).await {
                    Ok(_) => return cert,
                    Err(e) => warned.log(&e, "cannot inject the webhook CA; retrying"),
                },
                Err(e) => warned.log(&e, "cannot ensure the webhook certificate; retrying"),
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Puts `ca` into the caBundle of every webhook of the configuration, keeping the previous CA.
    /// Writes nothing when every webhook already starts with it; says whether it wrote.
    pub async fn inject_ca(&self, ca_pem: &str) -> Result<bool, Error> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &self.kind.resource());
        let what = self.config_name();
        let config = api
            .get_opt(&self.webhook_config)
            .await
            .map_err(kube_err(&what))?
            .ok_or_else(|| Error::NoWebhookConfig(what.clone()))?;
        let webhooks = config.data["webhooks"].as_array().cloned().unwrap_or_default();
        let mut ops = Vec::new();
        for (i, hook) in webhooks.iter().enumerate() {
            let previous = hook["clientConfig"]["caBundle"]
                .as_str()
                .and_then(|b| base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b).ok());
            let previous = previous.as_deref();
            let bundle = bundle_with(previous, ca_pem);
            if previous != Some(bundle.as_bytes()) {
                let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bundle.as_bytes());
                ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": b64}));
            }
        }
        if ops.is_empty() {
            return Ok(false);
        }
        // Guard against the list changing under us between the read and the write.
        let mut guarded =
            vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": config.metadata.resource_version})];
        guarded.extend(ops);
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(guarded))
            .map_err(|e| kube_err(&what)(kube::Error::SerdeError(e)))?;
        api.patch(&self.webhook_config, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .map_err(kube_err(&what))?;
        tracing::info!(config = %self.webhook_config, "injected the webhook CA into caBundle");
        Ok(true)
    }

    /// One refresh of a serving replica: ensures the shared certificate and its CA in the
    /// caBundle, and serves the certificate in `slot` once the apiserver can trust it. Returns
    /// the certificate it switched to, if it did.
    ///
    /// The apiserver picks a new caBundle up a moment after the write, so a certificate from a
    /// new CA is served only from the refresh after the one that injected that CA (the old one
    /// is valid for half its validity still), unless the served one expires within
    /// [`SWITCH_GRACE`].
    pub async fn refresh(&self, slot: &CertSlot, current: &ServingCert) -> Result<Option<ServingCert>, Error> {
        let cert = self.ensure().await?;
        let injected = self.inject_ca(&cert.ca_pem).await?;
        if cert.cert_pem == current.cert_pem {
            return Ok(None);
        }
        if injected && current.not_after - Utc::now() > SWITCH_GRACE {
            tracing::info!(not_after = %cert.not_after, "re-issued webhook certificate: its CA is in the caBundle now; it is served from the next refresh");
            return Ok(None);
        }
        if let Err(e) = slot.replace(&cert.cert_pem, &cert.key_pem) {
            tracing::error!(error = %e, "cannot load the re-issued certificate; keeping the old one");
            return Ok(None);
        }
        tracing::info!(not_after = %cert.not_after, "serving the re-issued webhook certificate");
        Ok(Some(cert))
    }
}

/// How often a failure that has not changed is warned about again.
pub const REPEAT_WARNING: std::time::Duration = std::time::Duration::from_secs(300);

/// Warns about a retried failure when it is new or changed, and again every [`REPEAT_WARNING`].
#[derive(Default)]
struct RepeatedWarning {
    last: Option<(String, std::time::Instant)>,
}

impl RepeatedWarning {
    fn log(&mut self, error: &Error, message: &'static str) {
        if self.should_warn(&format!("{message}: {error}"), std::time::Instant::now()) {
            tracing::warn!(%error, "{message}");
        } else {
            tracing::debug!(%error, "{message}");
        }
    }

    fn should_warn(&mut self, what: &str, now: std::time::Instant) -> bool {
        let due = match &self.last {
            Some((last, at)) => last != what || now.duration_since(*at) >= REPEAT_WARNING,
            None => true,
        };
        if due {
            self.last = Some((what.to_string(), now));
        }
        due
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn secret_with(not_after: DateTime<Utc>) -> Secret {
        let cert = ServingCert {
            ca_pem: "CA".into(),
            cert_pem: "CERT".into(),
            key_pem: "KEY".into(),
            not_after,
        };
        let m = CertManager {
            client: kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap(),
            secret_namespace: "ns".into(),
            secret_name: "storageos-webhook".into(),
            service_namespace: "ns".into(),
            service_name: "storageos-webhook".into(),
            webhook_config: "storageos-mutating-webhook".into(),
            kind: ConfigKind::Mutating,
            component: "storageos-api-manager".into(),
            validity: chrono::Duration::days(365),
        };
        m.secret_for(&cert, None)
    }

    #[tokio::test]
    async fn a_certificate_is_reused_until_half_its_validity_is_left() {
        let now = Utc::now();
        let year = chrono::Duration::days(365);
        assert!(usable(&secret_with(now + chrono::Duration::days(300)), year, now).is_some());
        assert!(
            usable(&secret_with(now + chrono::Duration::days(100)), year, now).is_none(),
            "within the re-issue window"
        );
        let mut incomplete = secret_with(now + year);
        incomplete.data.as_mut().unwrap().remove(KEY_KEY);
        assert!(usable(&incomplete, year, now).is_none());
        let mut unannotated = secret_with(now + year);
        unannotated.metadata.annotations = None;
        assert!(usable(&unannotated, year, now).is_none());
    }

    #[test]
    fn bundle_keeps_the_previous_ca_once() {
        let a = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----";
        let b = "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----";
        assert_eq!(bundle_with(None, a), format!("{a}\n"));
        let ab = bundle_with(Some(bundle_with(None, a).as_bytes()), b);
        assert_eq!(ab, format!("{b}\n{a}\n"));
        // Rotating again drops the oldest; re-injecting the same CA changes nothing.
        let c = "-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----";
        assert_eq!(bundle_with(Some(ab.as_bytes()), c), format!("{c}\n{b}\n"));
        assert_eq!(bundle_with(Some(ab.as_bytes()), b), ab);
    }

    #[test]
    fn a_stored_certificate_that_does_not_load_or_cover_the_service_is_reissued() {
        let now = Utc::now();
        let year = chrono::Duration::days(365);
        let name = "storageos-webhook.ns.svc";
        let good = pki::issue_serving_cert(name, &[name.to_string()], year).unwrap();
        assert_eq!(verify(&good, name, now), Ok(()));
        // A corrupt key (a restore, a manual edit).
        let corrupt = ServingCert {
            key_pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".into(),
            ..good.clone()
        };
        assert!(verify(&corrupt, name, now).is_err());
        // Another certificate's key.
        let other = pki::issue_serving_cert(name, &[name.to_string()], year).unwrap();
        let mismatched = ServingCert {
            key_pem: other.key_pem.clone(),
            ..good.clone()
        };
        assert!(verify(&mismatched, name, now).is_err());
        // Issued for another Service (copied from another namespace).
        assert!(
            verify(&good, "storageos-webhook.other.svc", now).is_err(),
            "wrong SAN accepted"
        );
        // Expired, whatever the annotation says.
        assert!(verify(&good, name, now + chrono::Duration::days(400)).is_err());
        // Not signed by the stored CA.
        let foreign_ca = ServingCert {
            ca_pem: other.ca_pem.clone(),
            ..good
        };
        assert!(verify(&foreign_ca, name, now).is_err());
    }

    #[test]
    fn a_failure_that_does_not_change_is_warned_about_once_per_interval() {
        let mut w = RepeatedWarning::default();
        let t0 = std::time::Instant::now();
        assert!(w.should_warn("config missing", t0));
        assert!(!w.should_warn("config missing", t0 + std::time::Duration::from_secs(10)));
        assert!(w.should_warn("forbidden", t0 + std::time::Duration::from_secs(20)));
        assert!(w.should_warn("config missing", t0 + std::time::Duration::from_secs(30)));
        assert!(!w.should_warn("config missing", t0 + std::time::Duration::from_secs(200)));
        assert!(w.should_warn(
            "config missing",
            t0 + REPEAT_WARNING + std::time::Duration::from_secs(30)
        ));
    }
}
