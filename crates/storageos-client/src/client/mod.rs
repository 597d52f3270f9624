//! The StorageOS v2 REST client: login, re-login on 401, typed errors, metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

mod routes;

use super::auth::{Credentials, LoginBody, TokenCell, token_from_header};
use super::error::Error;
use super::metrics::ApiMetrics;
use super::models::{ErrorBody, UserSession};

/// The API port of StorageOS, used when the endpoint names none.
pub const DEFAULT_PORT: u16 = 5705;
/// Per-request timeout of the Go clients.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Login timeout of the Go clients.
pub const DEFAULT_LOGIN_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest response body read by default (64 MiB: a volume list of a large cluster fits
/// many times over).
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;
/// How long an idle connection is kept for the next request. hyper grows a connection's read
/// buffer to ~400 KiB while reading a large answer (a node or volume list of a big cluster) and
/// never shrinks it; reqwest cannot cap it. The api-manager reads StorageOS every few seconds
/// (5 s by default), so with reqwest's 90 s each of its connections kept such a buffer for the
/// life of the process; closed after 2 s, they hold it only while a poll runs, at the cost of
/// one new connection per poll (docs/benchmarks.md).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// The most of an error answer's message kept (in bytes): it ends up in conditions and events.
pub const ERROR_BODY_LIMIT: usize = 1024;

/// How to reach and authenticate to StorageOS.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host`, `host:port` or `http(s)://host[:port]`; the scheme defaults to `http`, the port to
    /// 5705, as the api-manager's `-api-endpoint` does.
    pub endpoint: String,
    pub credentials: Credentials,
    /// Timeout of each API request (default 10 s).
    pub request_timeout: Duration,
    /// Timeout of login and refresh (default 20 s).
    pub login_timeout: Duration,
    /// Sent on every request, so StorageOS logs name the caller.
    pub user_agent: String,
    /// Responses longer than this are refused (default [`MAX_RESPONSE_BYTES`]).
    pub max_response_bytes: usize,
    /// PEM CA certificates an `https://` endpoint is verified against, besides the system's.
    pub ca_pem: Option<Vec<u8>>,
}

impl Config {
    /// A config with the default timeouts.
    pub fn new(endpoint: impl Into<String>, username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            credentials: Credentials {
                username: username.into(),
                password: password.into(),
            },
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            login_timeout: DEFAULT_LOGIN_TIMEOUT,
            user_agent: super::DEFAULT_USER_AGENT.to_string(),
            max_response_bytes: MAX_RESPONSE_BYTES,
            ca_pem: None,
        }
    }

    /// Trusts the CA certificates in `pem` for an `https://` endpoint (the StorageOS API's
    /// own CA), so the credentials need not travel in plain HTTP.
    pub fn with_ca_pem(mut self, pem: Vec<u8>) -> Self {
        self.ca_pem = Some(pem);
        self
    }

    /// Sets the User-Agent (the api-manager names itself).
    pub fn with_user_agent(mut self, user_agent: String) -> Self {
        self.user_agent = user_agent;
        self
    }

    /// Sets both timeouts (tests use short ones).
    pub fn with_timeouts(mut self, request: Duration, login: Duration) -> Self {
        self.request_timeout = request;
        self.login_timeout = login;
        self
    }
}

/// Turns an endpoint into the API base URL `<scheme>://<host>:<port>/v2/`.
pub fn base_url(endpoint: &str) -> Result<Url, Error> {
    let invalid = |reason: String| Error::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        reason,
    };
    let trimmed = endpoint.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        return Err(invalid("it is empty".into()));
    }
    let with_scheme = if trimmed.contains("://") {
        trimmed.to_string()
    } else {
        format!("http://{trimmed}")
    };
    let mut url = Url::parse(&with_scheme).map_err(|e| invalid(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!("scheme {:?} is not http or https", url.scheme())));
    }
    if url.host_str().is_none() {
        return Err(invalid("it names no host".into()));
    }
    // `Url` hides a scheme's default port (`http://h:80`), so look at what was written.
    let authority = with_scheme
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(rest))
        .unwrap_or_default();
    let explicit_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !explicit_port {
        url.set_port(Some(DEFAULT_PORT))
            .map_err(|()| invalid("cannot set the port".into()))?;
    }
    let path = url.path().trim_end_matches('/').to_string();
    let path = if path.ends_with("/v2") {
        format!("{path}/")
    } else {
        format!("{path}/v2/")
    };
    url.set_path(&path);
    Ok(url)
}

/// How the HTTP client is built.
#[derive(Debug, Clone)]
struct Transport {
    connect_timeout: Duration,
    user_agent: String,
    ca_pem: Option<Vec<u8>>,
}

impl Transport {
    fn client(&self) -> Result<reqwest::Client, Error> {
        // No redirects: a 307/308 would re-send the login body, password included, to wherever
        // it points. No proxy from *_PROXY: the credentials go to the endpoint and nowhere else.
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .user_agent(self.user_agent.clone())
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if let Some(pem) = &self.ca_pem {
            for cert in reqwest::Certificate::from_pem_bundle(pem).map_err(Error::Build)? {
                http = http.add_root_certificate(cert);
            }
        }
        http.build().map_err(Error::Build)
    }
}

/// A response that passed the status check.
struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

/// A StorageOS API client. Cheap to clone; clones share the token and metrics.
///
/// The first call logs in; a 401 triggers one re-login and one retry of the same request (same
/// `version`, since a rejected request changed nothing). Every write takes the `version` the
/// caller read; a 412 ([`Error::StaleVersion`]) means re-read and retry.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    /// What `http` was built from, for [`Client::with_own_connections`].
    transport: Transport,
    base: Url,
    credentials: Credentials,
    /// Shared with the clients made by [`Client::with_own_connections`].
    token: Arc<TokenCell>,
    /// Serialises logins so that many concurrent 401s cause one login (shared like the token).
    login_lock: Arc<tokio::sync::Mutex<()>>,
    request_timeout: Duration,
    login_timeout: Duration,
    max_response_bytes: usize,
    metrics: Option<ApiMetrics>,
}

impl Client {
    /// A client without metrics.
    pub fn new(config: Config) -> Result<Self, Error> {
        Self::build(config, None)
    }

    /// A client whose transport metrics are registered in `registry`.
    pub fn with_metrics(config: Config, registry: &mut prometheus_client::registry::Registry) -> Result<Self, Error> {
        let metrics = ApiMetrics::register(registry);
        Self::build(config, Some(metrics))
    }

    /// A client that records into metrics the caller already registered (to share them between
    /// clients).
    pub fn with_shared_metrics(config: Config, metrics: ApiMetrics) -> Result<Self, Error> {
        Self::build(config, Some(metrics))
    }

    fn build(config: Config, metrics: Option<ApiMetrics>) -> Result<Self, Error> {
        let base = base_url(&config.endpoint)?;
        let transport = Transport {
            connect_timeout: config.request_timeout,
            user_agent: config.user_agent,
            ca_pem: config.ca_pem,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                http: transport.client()?,
                transport,
                base,
                credentials: config.credentials,
                token: Arc::default(),
                login_lock: Arc::default(),
                request_timeout: config.request_timeout,
                login_timeout: config.login_timeout,
                max_response_bytes: config.max_response_bytes,
                metrics,
            }),
        })
    }

    /// A client that shares this one's token, logins and metrics but not its connections: its
    /// requests are made and driven by the Tokio runtime that awaits them, so a worker on a
    /// runtime of its own (the api-manager's fencer) never waits on a busy runtime's I/O.
    /// Make it on the runtime that will use it.
    pub fn with_own_connections(&self) -> Result<Self, Error> {
        let inner = &self.inner;
        Ok(Self {
            inner: Arc::new(Inner {
                http: inner.transport.client()?,
                transport: inner.transport.clone(),
                base: inner.base.clone(),
                credentials: inner.credentials.clone(),
                token: inner.token.clone(),
                login_lock: inner.login_lock.clone(),
                request_timeout: inner.request_timeout,
                login_timeout: inner.login_timeout,
                max_response_bytes: inner.max_response_bytes,
                metrics: inner.metrics.clone(),
            }),
        })
    }

    /// The API base URL, e.g. `http://storageos:5705/v2/`.
    pub fn base_url(&self) -> &Url {
        &self.inner.base
    }

    /// Whether the client holds a token (it may have expired).
    pub fn has_token(&self) -> bool {
        self.inner.token.get().is_some()
    }

    /// Logs in and keeps the token from the `Authorization` response header.
    pub async fn login(&self) -> Result<UserSession, Error> {
        let _guard = self.inner.login_lock.lock().await;
        self.login_locked().await
    }

    async fn login_locked(&self) -> Result<UserSession, Error> {
        let creds = &self.inner.credentials;
        let body = serde_json::to_vec(&LoginBody {
            username: &creds.username,
            password: &creds.password,
        })
        .map_err(|e| Error::Decode {
            method: "POST".into(),
            path: "/v2/auth/login".into(),
            message: e.to_string(),
        })?;
        let answer = self
            .raw(
                Method::POST,
                &["auth", "login"],
                &[],
                Some(body),
                None,
                self.inner.login_timeout,
            )
            .await?;
        let token = answer
            .headers
            .get(reqwest::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(token_from_header)
            .ok_or(Error::NoToken)?;
        self.inner.token.set(Some(token));
        tracing::debug!(username = %creds.username, "logged in to StorageOS");
        decode_or_default(&answer, "POST", "/v2/auth/login")
    }

    /// Exchanges the current token for a new one (`POST /auth/refresh`). Fails with
    /// [`Error::Unauthorized`] once the token has expired; call [`Client::login`] then.
    pub async fn refresh(&self) -> Result<UserSession, Error> {
        let _guard = self.inner.login_lock.lock().await;
        let token = self.inner.token.get();
        let answer = self
            .raw(
                Method::POST,
                &["auth", "refresh"],
                &[],
                None,
                token.as_deref(),
                self.inner.login_timeout,
            )
            .await?;
        if let Some(t) = answer
            .headers
            .get(reqwest::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(token_from_header)
        {
            self.inner.token.set(Some(t));
        }
        decode_or_default(&answer, "POST", "/v2/auth/refresh")
    }

    /// Logs in again unless another task already replaced `failed` meanwhile.
    async fn relogin_after(&self, failed: Option<&str>) -> Result<(), Error> {
        let _guard = self.inner.login_lock.lock().await;
        let current = self.inner.token.get();
        if current.is_some() && current.as_deref() != failed {
            return Ok(());
        }
        self.login_locked().await.map(|_| ())
    }

    /// Sends an authenticated request: logs in first if needed, re-logs in once on 401.
    async fn call(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Answer, Error> {
        if self.inner.token.get().is_none() {
            self.relogin_after(None).await?;
        }
        let token = self.inner.token.get();
        let first = self
            .raw(
                method.clone(),
                segments,
                query,
                body.clone(),
                token.as_deref(),
                self.inner.request_timeout,
            )
            .await;
        match first {
            Err(Error::Unauthorized { .. }) => {
                tracing::debug!(path = %display_path(segments), "StorageOS answered 401; logging in again");
                self.relogin_after(token.as_deref()).await?;
                let token = self.inner.token.get();
                self.raw(
                    method,
                    segments,
                    query,
                    body,
                    token.as_deref(),
                    self.inner.request_timeout,
                )
                .await
            }
            other => other,
        }
    }

    /// One HTTP exchange, in its trace span (method and route template only); maps every
    /// status >= 400 to a typed error.
    async fn raw(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<Answer, Error> {
        let path = display_path(segments);
        let mut url = self.inner.base.clone();
        url.path_segments_mut()
            .map_err(|()| Error::InvalidEndpoint {
                endpoint: self.inner.base.to_string(),
                reason: "it cannot carry a path".into(),
            })?
            .pop_if_empty()
            .extend(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut req = self
            .inner
            .http
            .request(method.clone(), url)
            .timeout(timeout)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(t) = token {
            req = req.header(reqwest::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(b) = body {
            req = req.header(reqwest::header::CONTENT_TYPE, "application/json").body(b);
        }
        let span = crate::spans::storageos_request(method.as_str(), &route_template(segments));
        let result = self.send(req, &method, path, timeout).instrument(span.clone()).await;
        let (status, failure) = match &result {
            Ok(a) => (Some(a.status.as_u16()), None),
            Err(e) => (e.status(), Some(error_type(e))),
        };
        crate::spans::storageos_answer(&span, status, failure.as_deref());
        result
    }

    /// Sends `req` and reads the answer, recording the transport metrics.
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        method: &Method,
        path: String,
        timeout: Duration,
    ) -> Result<Answer, Error> {
        let started = Instant::now();
        let in_flight = self.inner.metrics.as_ref().map(|m| {
            m.in_flight.inc();
            InFlight(m)
        });
        let limit = self.inner.max_response_bytes;
        let result = async {
            let mut resp = req.send().await?;
            let status = resp.status();
            let headers = resp.headers().clone();
            // Read at most `max_response_bytes`: a broken or hostile endpoint cannot make the
            // process buffer without bound. Sized once from Content-Length when it is given:
            // growing by doubling, a 2 MB node list passed through 1, 2 and 4 MB copies.
            let expected = resp
                .content_length()
                .map_or(0, |n| usize::try_from(n).unwrap_or(limit).min(limit));
            let mut body = Vec::with_capacity(expected);
            while let Some(chunk) = resp.chunk().await? {
                if body.len() + chunk.len() > limit {
                    return Ok((status, headers, None));
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, reqwest::Error>((status, headers, Some(body)))
        }
        .await;
        drop(in_flight);
        let (status, headers, body) = result.map_err(|e| {
            if e.is_timeout() {
                Error::Timeout {
                    method: method.to_string(),
                    path: path.clone(),
                    timeout,
                }
            } else {
                Error::Transport {
                    method: method.to_string(),
                    path: path.clone(),
                    source: e,
                }
            }
        })?;
        if let Some(m) = &self.inner.metrics {
            m.observe(method, status.as_u16(), started.elapsed().as_secs_f64());
        }
        let Some(body) = body else {
            return Err(Error::TooLarge {
                method: method.to_string(),
                path,
                limit,
            });
        };
        if status.as_u16() >= 400 {
            let message = serde_json::from_slice::<ErrorBody>(&body)
                .ok()
                .map(|b| b.error)
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
            // It goes into errors, conditions, events and logs: a few lines, not megabytes.
            let message = crate::text::truncated(&message, ERROR_BODY_LIMIT);
            return Err(Error::from_status(status.as_u16(), method.as_str(), &path, message));
        }
        Ok(Answer { status, headers, body })
    }

    async fn get_json<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T, Error> {
        let answer = self.call(Method::GET, segments, &[], None).await?;
        decode(&answer, "GET", &display_path(segments))
    }

    async fn list<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<Vec<T>, Error> {
        let answer = self.call(Method::GET, segments, &[], None).await?;
        let list: Option<Vec<T>> = decode(&answer, "GET", &display_path(segments))?;
        Ok(list.unwrap_or_default())
    }

    async fn write<B: Serialize>(&self, method: Method, segments: &[&str], body: &B) -> Result<Answer, Error> {
        let bytes = serde_json::to_vec(body).map_err(|e| Error::Decode {
            method: method.to_string(),
            path: display_path(segments),
            message: e.to_string(),
        })?;
        self.call(method, segments, &[], Some(bytes)).await
    }

    async fn put_json<B: Serialize, T: DeserializeOwned>(&self, segments: &[&str], body: &B) -> Result<T, Error> {
        let answer = self.write(Method::PUT, segments, body).await?;
        decode(&answer, "PUT", &display_path(segments))
    }

    async fn delete(&self, segments: &[&str], version: &str) -> Result<(), Error> {
        self.call(Method::DELETE, segments, &[("version", version)], None)
            .await
            .map(|_| ())
    }
}

/// Decrements the in-flight gauge however the request ends (including cancellation).
struct InFlight<'a>(&'a ApiMetrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}

/// Path segments that are route literals; any other segment is an ID.
const ROUTE_LITERALS: [&str; 12] = [
    "auth",
    "login",
    "refresh",
    "cluster",
    "namespaces",
    "nodes",
    "volumes",
    "compute-only",
    "replicas",
    "failure-mode",
    "nfs",
    "mount-endpoint",
];

/// The route of `segments` with every ID replaced by `{id}` (`/namespaces/{id}/volumes`): a
/// segment right after a collection name, or one that is no known literal, is an ID.
fn route_template(segments: &[&str]) -> String {
    let mut route = String::new();
    let mut after_collection = false;
    for s in segments {
        let literal = !after_collection && ROUTE_LITERALS.contains(s);
        route.push('/');
        route.push_str(if literal { s } else { "{id}" });
        after_collection = literal && matches!(*s, "namespaces" | "nodes" | "volumes");
    }
    route
}

/// The `error.type` of a failed request: its status code, or what kind of failure it was.
fn error_type(e: &Error) -> String {
    match (e.status(), e) {
        (Some(code), _) => code.to_string(),
        (None, Error::Timeout { .. }) => "timeout".into(),
        (None, Error::Transport { .. }) => "transport".into(),
        (None, Error::TooLarge { .. }) => "too_large".into(),
        (None, Error::Decode { .. }) => "decode".into(),
        (None, Error::NoToken) => "no_token".into(),
        (None, _) => "other".into(),
    }
}

fn display_path(segments: &[&str]) -> String {
    format!("/v2/{}", segments.join("/"))
}

fn decode<T: DeserializeOwned>(answer: &Answer, method: &str, path: &str) -> Result<T, Error> {
    serde_json::from_slice(&answer.body).map_err(|e| Error::Decode {
        method: method.into(),
        path: path.into(),
        message: format!("status {}: {e}", answer.status.as_u16()),
    })
}

fn decode_or_default<T: DeserializeOwned + Default>(answer: &Answer, method: &str, path: &str) -> Result<T, Error> {
    if answer.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    decode(answer, method, path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_get_scheme_port_and_base_path() {
        assert_eq!(base_url("storageos").unwrap().as_str(), "http://storageos:5705/v2/");
        assert_eq!(
            base_url("https://sos.example:1234/").unwrap().as_str(),
            "https://sos.example:1234/v2/"
        );
        assert_eq!(
            base_url("http://127.0.0.1:80/v2").unwrap().as_str(),
            "http://127.0.0.1/v2/"
        );
        assert!(base_url("").is_err());
        assert!(base_url("ftp://x").is_err());
    }

    #[test]
    fn route_templates_hide_every_id() {
        assert_eq!(
            route_template(&["namespaces", "ns-uuid", "volumes"]),
            "/namespaces/{id}/volumes"
        );
        assert_eq!(
            route_template(&["namespaces", "a", "volumes", "b", "nfs", "mount-endpoint"]),
            "/namespaces/{id}/volumes/{id}/nfs/mount-endpoint"
        );
        assert_eq!(route_template(&["nodes", "nodes"]), "/nodes/{id}");
        assert_eq!(
            route_template(&["nodes", "n1", "compute-only"]),
            "/nodes/{id}/compute-only"
        );
        assert_eq!(route_template(&["auth", "login"]), "/auth/login");
        assert_eq!(route_template(&["cluster"]), "/cluster");
        assert_eq!(route_template(&["something-new", "x"]), "/{id}/{id}");
    }
}
