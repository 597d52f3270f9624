//! Can the operator reach the etcd StorageOS is configured with? Checked at most once a minute
//! per cluster ([`Recent`]; at once when the address or the TLS Secret changes), read only: the
//! address parses, the TLS Secret holds PEM, its client certificate has not expired,
//! and etcd's `/health` answers healthy on every endpoint. Reported as the condition
//! `KVBackendReachable` (and an event when it turns False), with metrics; it never stops the
//! rest of the pass (StorageOS itself reports what it cannot reach).

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;

use crate::checks::etcd::{self, Tls};
use crate::reasons::{self, Reason};
use crate::render::Resolved;

/// The condition type.
pub const CONDITION: &str = "KVBackendReachable";

/// The longest message the check reports: it goes into the condition and an event, and quotes
/// what etcd (or whoever answers at its address) said.
pub const MESSAGE_LIMIT: usize = 1000;

/// How long one endpoint may take to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// How long an outcome stands for the same address and TLS Secret. A pass comes every few
/// seconds while a cluster settles: an unreachable endpoint would cost each of them the timeout.
const RECHECK: Duration = Duration::from_secs(60);

/// The latest outcome per cluster, with what it was checked against.
#[derive(Default)]
pub struct Recent(std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant, Outcome)>>);

impl Recent {
    /// [`check`], or the outcome of one made for `cluster` less than [`RECHECK`] ago against the
    /// same address and the same version of the TLS Secret.
    pub async fn check(
        &self,
        cluster: &str,
        resolved: &Resolved,
        tls_secret: Option<&Secret>,
        now: DateTime<Utc>,
    ) -> Outcome {
        let version = tls_secret.and_then(|s| s.metadata.resource_version.as_deref());
        let against = format!(
            "{}|{:?}|{}",
            resolved.etcd_endpoints,
            resolved.etcd_tls_secret_ref,
            version.unwrap_or_default()
        );
        let cached = self.0.lock().ok().and_then(|map| {
            map.get(cluster)
                .filter(|(key, at, _)| *key == against && at.elapsed() < RECHECK)
                .map(|(_, _, outcome)| outcome.clone())
        });
        if let Some(outcome) = cached {
            return outcome;
        }
        let outcome = check(resolved, tls_secret, now).await;
        if let Ok(mut map) = self.0.lock() {
            map.insert(
                cluster.to_string(),
                (against, std::time::Instant::now(), outcome.clone()),
            );
        }
        outcome
    }
}

/// What the check found.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub reachable: bool,
    pub reason: Reason,
    pub message: String,
    /// When the client certificate expires, with TLS.
    pub cert_not_after: Option<DateTime<Utc>>,
}

impl Outcome {
    fn refused(reason: Reason, message: String, cert_not_after: Option<DateTime<Utc>>) -> Self {
        Self {
            reachable: false,
            reason,
            message: crate::text::truncated(&message, MESSAGE_LIMIT),
            cert_not_after,
        }
    }
}

/// Checks the kv backend of `resolved`, with `tls_secret` (the etcd TLS Secret, read by the
/// pass) when TLS is configured.
pub async fn check(resolved: &Resolved, tls_secret: Option<&Secret>, now: DateTime<Utc>) -> Outcome {
    let endpoints = match etcd::parse_endpoints(&resolved.etcd_endpoints) {
        Ok(e) => e,
        Err(etcd::Error::NoEndpoints) => {
            return Outcome::refused(
                reasons::KV_BACKEND_NOT_SET,
                "spec.kvBackend.address is empty: set it to the etcd endpoints StorageOS keeps its state in, for example http://storageos-etcd.storageos-etcd:2379".into(),
                None,
            );
        }
        Err(e) => {
            return Outcome::refused(
                reasons::KV_BACKEND_NOT_SET,
                format!("spec.kvBackend.address: {e}"),
                None,
            );
        }
    };
    let secret_name = resolved
        .etcd_tls_secret_ref
        .as_ref()
        .map(|(name, ns)| format!("{ns}/{name}"))
        .unwrap_or_default();
    let tls = match (&resolved.etcd_tls_secret_ref, tls_secret) {
        (Some(_), Some(secret)) => match Tls::from_secret(secret) {
            Ok(tls) => Some(tls),
            Err(e) => return Outcome::refused(reasons::ETCD_TLS_INVALID, format!("Secret {secret_name}: {e}"), None),
        },
        _ => None,
    };
    let not_after = match tls.as_ref().map(Tls::client_not_after).transpose() {
        Ok(at) => at,
        Err(e) => return Outcome::refused(reasons::ETCD_TLS_INVALID, format!("Secret {secret_name}: {e}"), None),
    };
    if let Some(at) = not_after.filter(|at| *at <= now) {
        return Outcome::refused(
            reasons::ETCD_CLIENT_CERT_EXPIRED,
            format!(
                "the etcd client certificate etcd-client.crt of Secret {secret_name} expired at {}: issue a new one from the etcd CA and replace etcd-client.crt and etcd-client.key",
                at.to_rfc3339()
            ),
            not_after,
        );
    }
    for endpoint in &endpoints {
        if let Err(e) = etcd::health(endpoint, TIMEOUT, tls.as_ref()).await {
            let (reason, message) = explain(&e, tls.is_some(), &secret_name);
            return Outcome::refused(reason, message, not_after);
        }
    }
    let valid = not_after
        .map(|at| format!("; the client certificate is valid until {}", at.to_rfc3339()))
        .unwrap_or_default();
    Outcome {
        reachable: true,
        reason: reasons::ETCD_HEALTHY,
        message: crate::text::truncated(
            &format!("etcd answers healthy at {}{valid}", endpoints.join(", ")),
            MESSAGE_LIMIT,
        ),
        cert_not_after: not_after,
    }
}

/// The reason and the message (what failed, and what to fix) of a failed health check.
fn explain(e: &etcd::Error, tls: bool, secret: &str) -> (Reason, String) {
    let text = e.to_string();
    if is_tls_failure(&text) {
        let fix = if tls {
            format!(
                "put the CA that signed etcd's serving certificate in etcd-client-ca.crt of Secret {secret}, use an address whose host that certificate names, and a client certificate etcd accepts"
            )
        } else {
            "etcd serves TLS: set spec.tlsEtcdSecretRefName to a Secret with etcd-client-ca.crt, etcd-client.crt and etcd-client.key".to_string()
        };
        return (
            reasons::ETCD_TLS_INVALID,
            format!("TLS with etcd failed: {text}; {fix}"),
        );
    }
    (
        reasons::ETCD_UNREACHABLE,
        format!(
            "{text}; check spec.kvBackend.address and that etcd runs and is reachable from the operator's namespace"
        ),
    )
}

/// Whether an error text is a TLS failure (rustls' words for a refused certificate or handshake).
fn is_tls_failure(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    [
        "certificate",
        "handshake",
        "tls",
        "unknownissuer",
        "notvalidforname",
        "alert",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::ByteString;
    use serde_json::json;

    use super::*;
    use crate::crd::StorageOSCluster;

    fn resolved(spec: serde_json::Value) -> Resolved {
        let c: StorageOSCluster = serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "s", "namespace": "ops"}, "spec": spec
        }))
        .unwrap();
        crate::render::resolve(&c.spec)
    }

    /// A self-signed certificate valid from `from` to `to` (Unix seconds), and its key.
    fn cert(from: i64, to: i64) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec!["etcd-client".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + time::Duration::seconds(from);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + time::Duration::seconds(to);
        let key = rcgen::KeyPair::generate().unwrap();
        let c = params.self_signed(&key).unwrap();
        (c.pem(), key.serialize_pem())
    }

    fn tls_secret(cert: &str, key: &str) -> Secret {
        let data = [
            ("etcd-client-ca.crt", cert),
            ("etcd-client.crt", cert),
            ("etcd-client.key", key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect();
        Secret {
            data: Some(data),
            ..Secret::default()
        }
    }

    #[tokio::test]
    async fn an_empty_or_malformed_address_says_what_to_set() {
        let now = Utc::now();
        let empty = check(
            &resolved(json!({"secretRefName": "s", "secretRefNamespace": "ops"})),
            None,
            now,
        )
        .await;
        assert_eq!(empty.reason, reasons::KV_BACKEND_NOT_SET);
        assert!(
            !empty.reachable && empty.message.contains("spec.kvBackend.address is empty"),
            "{empty:?}"
        );
        let bad =
            resolved(json!({"secretRefName": "s", "secretRefNamespace": "ops", "kvBackend": {"address": "ftp://e:1"}}));
        let bad = check(&bad, None, now).await;
        assert_eq!(bad.reason, reasons::KV_BACKEND_NOT_SET);
        assert!(bad.message.contains("\"ftp://e:1\" is not an etcd endpoint"), "{bad:?}");
    }

    #[tokio::test]
    async fn an_expired_client_certificate_is_named_before_any_call() {
        let now = Utc::now();
        let (c, k) = cert(now.timestamp() - 7200, now.timestamp() - 3600);
        // Port 1 on loopback: a call would fail as unreachable, not as expired.
        let r = resolved(json!({"secretRefName": "s", "secretRefNamespace": "ops",
            "kvBackend": {"address": "https://127.0.0.1:1"}, "tlsEtcdSecretRefName": "etcd"}));
        let out = check(&r, Some(&tls_secret(&c, &k)), now).await;
        assert_eq!(out.reason, reasons::ETCD_CLIENT_CERT_EXPIRED, "{out:?}");
        assert!(out.message.contains("Secret ops/etcd expired at"), "{}", out.message);
        assert!(out.cert_not_after.is_some_and(|at| at < now));
    }

    #[tokio::test]
    async fn a_secret_without_pem_or_keys_is_a_tls_problem() {
        let now = Utc::now();
        let r = resolved(json!({"secretRefName": "s", "secretRefNamespace": "ops",
            "kvBackend": {"address": "https://127.0.0.1:1"}, "tlsEtcdSecretRefName": "etcd"}));
        let out = check(&r, Some(&tls_secret("not pem", "not pem")), now).await;
        assert_eq!(out.reason, reasons::ETCD_TLS_INVALID, "{out:?}");
        assert!(out.message.contains("etcd-client.crt"), "{}", out.message);
        let out = check(&r, Some(&Secret::default()), now).await;
        assert_eq!(out.reason, reasons::ETCD_TLS_INVALID, "{out:?}");
        assert!(out.message.contains("has no key"), "{}", out.message);
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_names_the_endpoint() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let r = resolved(json!({"secretRefName": "s", "secretRefNamespace": "ops",
            "kvBackend": {"address": format!("127.0.0.1:{port}")}}));
        let out = check(&r, None, Utc::now()).await;
        assert_eq!(out.reason, reasons::ETCD_UNREACHABLE, "{out:?}");
        assert!(
            out.message
                .contains(&format!("http://127.0.0.1:{port}: health check failed")),
            "{}",
            out.message
        );
    }

    /// A server on loopback that answers its first request with `head` and then `body_len`
    /// bytes of body (a client that stops reading ends it); returns its URL and whether it was
    /// asked.
    async fn answer(head: String, body_len: usize) -> (String, tokio::task::JoinHandle<bool>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let Ok((mut s, _)) = listener.accept().await else {
                return false;
            };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(head.as_bytes()).await;
            let chunk = vec![b'x'; 64 * 1024];
            let mut left = body_len;
            while left > 0 {
                let n = left.min(chunk.len());
                if s.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                left -= n;
            }
            true
        });
        (url, task)
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        let (elsewhere, asked_elsewhere) = answer(
            "HTTP/1.1 200 OK\r\ncontent-length: 17\r\n\r\n{\"health\":\"true\"}".into(),
            0,
        )
        .await;
        let (url, asked) = answer(
            format!(
                "HTTP/1.1 302 Found\r\nlocation: {elsewhere}/health\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            ),
            0,
        )
        .await;
        let r = resolved(json!({"secretRefName": "s", "secretRefNamespace": "ops", "kvBackend": {"address": url}}));
        let out = check(&r, None, Utc::now()).await;
        assert!(asked.await.unwrap());
        assert!(!out.reachable, "{out:?}");
        assert!(out.message.contains("HTTP 302"), "{}", out.message);
        let followed = tokio::time::timeout(Duration::from_millis(300), asked_elsewhere).await;
        assert!(followed.is_err(), "the probe followed the redirect");
    }

    #[tokio::test]
    async fn a_large_body_leaves_a_short_message() {
        let size = 10 << 20;
        let (url, _) = answer(
            format!("HTTP/1.1 500 Internal Server Error\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n"),
            size,
        )
        .await;
        let r = resolved(json!({"secretRefName": "s", "secretRefNamespace": "ops", "kvBackend": {"address": url}}));
        let out = check(&r, None, Utc::now()).await;
        assert_eq!(out.reason, reasons::ETCD_UNREACHABLE, "{out:?}");
        assert!(out.message.len() < 1024, "{} bytes", out.message.len());
        assert!(
            out.message.contains("HTTP 500") && out.message.contains("xxx"),
            "{}",
            out.message
        );
    }

    #[test]
    fn rustls_refusals_are_tls_failures() {
        assert!(is_tls_failure("invalid peer certificate: UnknownIssuer"));
        assert!(is_tls_failure("received fatal alert: BadCertificate"));
        assert!(!is_tls_failure("tcp connect error: Connection refused (os error 111)"));
    }
}
