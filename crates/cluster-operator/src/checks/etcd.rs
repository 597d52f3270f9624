//! Is an etcd usable by StorageOS? The plugin's preflight writes: a put, a get and a delete of
//! one key under a private prefix (`/storageos-preflight/`), through etcd's v3 HTTP/JSON gateway,
//! on every endpoint ([`check`]). The plugin runs outside the cluster, so an endpoint must be
//! reachable from where it runs (a Service DNS name is not: use `kubectl port-forward`, or
//! `--skip-etcd-endpoints-validation`). The operator keeps checking, read-only: etcd's
//! `/health` on every endpoint ([`health`]) and the client certificate's expiry
//! ([`Tls::client_not_after`]).

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

/// Keys of the etcd client TLS Secret (`spec.tlsEtcdSecretRefName`), as the node pods mount it.
pub const TLS_KEYS: [&str; 3] = ["etcd-client-ca.crt", "etcd-client.crt", "etcd-client.key"];

/// The client TLS material of an etcd: the CA that signed its serving certificate, and the
/// client certificate and key, PEM.
#[derive(Clone)]
pub struct Tls {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl Tls {
    /// From the etcd TLS Secret, which must hold [`TLS_KEYS`].
    pub fn from_secret(secret: &k8s_openapi::api::core::v1::Secret) -> Result<Self, Error> {
        let mut data = crate::render::secrets::contents(secret);
        let mut take = |key: &'static str| {
            data.remove(key).ok_or_else(|| Error::TlsSecret {
                name: secret.metadata.name.clone().unwrap_or_default(),
                key,
            })
        };
        Ok(Self {
            ca: take(TLS_KEYS[0])?,
            cert: take(TLS_KEYS[1])?,
            key: take(TLS_KEYS[2])?,
        })
    }
}

impl Tls {
    /// When the client certificate (the first of `etcd-client.crt`) expires.
    pub fn client_not_after(&self) -> Result<chrono::DateTime<chrono::Utc>, Error> {
        let bad = |message: String| Error::TlsPem {
            what: "etcd-client.crt",
            message,
        };
        let (_, pem) = x509_parser::pem::parse_x509_pem(&self.cert).map_err(|e| bad(e.to_string()))?;
        let cert = pem.parse_x509().map_err(|e| bad(e.to_string()))?;
        let seconds = cert.validity().not_after.timestamp();
        chrono::DateTime::from_timestamp(seconds, 0).ok_or_else(|| bad(format!("expiry {seconds} out of range")))
    }
}

/// Prefix of the key the check writes and removes.
pub const PREFIX: &str = "/storageos-preflight/";

/// The most of an etcd answer that is read: a `/health` or v3 gateway answer is a few hundred
/// bytes, and an endless body must not fill the operator's memory.
pub const MAX_BODY: usize = 64 * 1024;

/// The most of an answer quoted in an error: it ends up in a condition message.
const QUOTED: usize = 256;

/// Why an endpoint is not usable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0:?} is not an etcd endpoint: expected http(s)://HOST:PORT, for example http://10.0.0.5:2379")]
    Endpoint(String),
    #[error("no etcd endpoints given")]
    NoEndpoints,
    #[error("cannot make an HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error(
        "the etcd TLS Secret {name} has no key {key:?}; it needs etcd-client-ca.crt, etcd-client.crt and etcd-client.key"
    )]
    TlsSecret { name: String, key: &'static str },
    #[error("the etcd TLS Secret's {what} is not usable PEM: {message}")]
    TlsPem { what: &'static str, message: String },
    #[error("{endpoint}: {step} failed: {message}")]
    Step {
        endpoint: String,
        step: &'static str,
        message: String,
    },
}

/// Splits a comma-separated endpoint list (as `kvBackend.address` takes it) and checks each is
/// `http(s)://HOST:PORT`; `HOST:PORT` means `http://HOST:PORT`.
pub fn parse_endpoints(list: &str) -> Result<Vec<String>, Error> {
    let endpoints: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let url = if e.contains("://") {
                e.to_string()
            } else {
                format!("http://{e}")
            };
            let parsed = reqwest::Url::parse(&url).map_err(|_| Error::Endpoint(e.to_string()))?;
            let ok = matches!(parsed.scheme(), "http" | "https")
                && parsed.host_str().is_some()
                && parsed.port().is_some()
                && matches!(parsed.path(), "" | "/");
            if ok {
                Ok(url.trim_end_matches('/').to_string())
            } else {
                Err(Error::Endpoint(e.to_string()))
            }
        })
        .collect::<Result<_, _>>()?;
    if endpoints.is_empty() {
        return Err(Error::NoEndpoints);
    }
    Ok(endpoints)
}

/// A put, get and delete of a fresh key on `endpoint`; returns how long the three took.
/// With `tls`, etcd's certificate must be signed by its CA and the client presents its
/// certificate.
pub async fn check(endpoint: &str, timeout: Duration, tls: Option<&Tls>) -> Result<Duration, Error> {
    let http = http_client(timeout, tls)?;
    let key = format!("{PREFIX}{:016x}", rand::random::<u64>());
    let value = format!("written by kubectl storageos preflight at {}", chrono::Utc::now());
    let started = Instant::now();
    let call = |step: &'static str, path: &'static str, body: Value| {
        let http = http.clone();
        async move {
            let url = format!("{endpoint}{path}");
            let fail = |message: String| Error::Step {
                endpoint: endpoint.to_string(),
                step,
                message,
            };
            let resp = http
                .post(&url)
                .json(&body)
                .send()
                .await
                .map_err(|e| fail(without_url(&e)))?;
            let status = resp.status();
            let text = read_capped(resp).await.map_err(|e| fail(without_url(&e)))?;
            if !status.is_success() {
                return Err(fail(format!("HTTP {status}: {}", quoted(&text))));
            }
            serde_json::from_str::<Value>(&text)
                .map_err(|e| fail(format!("not an etcd answer ({e}): {}", quoted(&text))))
        }
    };
    call(
        "put",
        "/v3/kv/put",
        json!({"key": B64.encode(&key), "value": B64.encode(&value)}),
    )
    .await?;
    let got = call("get", "/v3/kv/range", json!({"key": B64.encode(&key)})).await?;
    let read = got["kvs"][0]["value"]
        .as_str()
        .and_then(|v| B64.decode(v).ok())
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    if read.as_deref() != Some(value.as_str()) {
        return Err(Error::Step {
            endpoint: endpoint.to_string(),
            step: "get",
            message: format!("read back {read:?}, not the value just written"),
        });
    }
    let deleted = call("delete", "/v3/kv/deleterange", json!({"key": B64.encode(&key)})).await?;
    if deleted["deleted"].as_str() != Some("1") && deleted["deleted"].as_i64() != Some(1) {
        return Err(Error::Step {
            endpoint: endpoint.to_string(),
            step: "delete",
            message: format!("the key was not deleted: {deleted}"),
        });
    }
    Ok(started.elapsed())
}

/// An HTTP client for etcd: with `tls`, etcd's certificate must be signed by its CA and the
/// client presents its certificate. No redirects and no proxy from `*_PROXY`: whoever answers
/// at the address (or its DNS) must not send the probe elsewhere, such as a cloud metadata
/// endpoint whose answer would be quoted into the cluster's status.
fn http_client(timeout: Duration, tls: Option<&Tls>) -> Result<reqwest::Client, Error> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(tls) = tls {
        let pem = |what, e: reqwest::Error| Error::TlsPem {
            what,
            message: without_url(&e),
        };
        let ca = reqwest::Certificate::from_pem_bundle(&tls.ca).map_err(|e| pem("etcd-client-ca.crt", e))?;
        let identity = reqwest::Identity::from_pem(&[tls.cert.as_slice(), b"\n", tls.key.as_slice()].concat())
            .map_err(|e| pem("etcd-client.crt/etcd-client.key", e))?;
        builder = builder.tls_certs_only(ca).identity(identity);
    }
    builder.build().map_err(Error::Client)
}

/// etcd's own health check (`GET /health`, which answers `{"health":"true"}` while the member
/// has a leader and its store works): read-only, so the operator can ask it on every pass.
pub async fn health(endpoint: &str, timeout: Duration, tls: Option<&Tls>) -> Result<(), Error> {
    let http = http_client(timeout, tls)?;
    let fail = |message: String| Error::Step {
        endpoint: endpoint.to_string(),
        step: "health check",
        message,
    };
    let resp = http
        .get(format!("{endpoint}/health"))
        .send()
        .await
        .map_err(|e| fail(without_url(&e)))?;
    let status = resp.status();
    let text = read_capped(resp).await.map_err(|e| fail(without_url(&e)))?;
    let healthy = serde_json::from_str::<Value>(&text)
        .ok()
        .is_some_and(|v| v["health"].as_str() == Some("true"));
    if status.is_success() && healthy {
        Ok(())
    } else {
        Err(fail(format!("HTTP {status}: {}", quoted(&text))))
    }
}

/// At most [`MAX_BODY`] bytes of an answer, as text; the rest is never read.
async fn read_capped(mut resp: reqwest::Response) -> Result<String, reqwest::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = MAX_BODY.saturating_sub(bytes.len());
        bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if bytes.len() >= MAX_BODY {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// An answer as an error quotes it: trimmed and short.
fn quoted(text: &str) -> String {
    crate::text::truncated(text.trim(), QUOTED)
}

/// A reqwest error as its causes (the caller names the endpoint): `tcp connect error: Connection
/// refused (os error 111)` rather than `error sending request for url (...)`.
fn without_url(e: &reqwest::Error) -> String {
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        causes.push(s.to_string());
        source = s.source();
    }
    match causes.last() {
        Some(last) => last.clone(),
        None => e.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_lists_as_kv_backend_takes_them() {
        assert_eq!(
            parse_endpoints("http://10.0.0.1:2379, 10.0.0.2:2379").unwrap(),
            ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(
            parse_endpoints("https://etcd.example:2379/").unwrap(),
            ["https://etcd.example:2379"]
        );
        for bad in ["etcd", "ftp://a:1", "http://a", "http://a:1/v3"] {
            assert!(parse_endpoints(bad).is_err(), "{bad} accepted");
        }
        assert!(matches!(parse_endpoints(" , "), Err(Error::NoEndpoints)));
    }

    #[tokio::test]
    async fn no_more_than_max_body_of_an_answer_is_read() {
        let huge = axum::http::Response::new(vec![b'x'; 10 << 20]);
        let text = read_capped(reqwest::Response::from(huge)).await.unwrap();
        assert_eq!(text.len(), MAX_BODY);
        assert!(quoted(&text).len() <= QUOTED);
    }
}
