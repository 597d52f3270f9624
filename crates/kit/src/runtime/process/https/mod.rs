//! An HTTPS server for an axum router, with a certificate that can be swapped while serving.
//!
//! The webhook server must keep answering while its certificate is re-issued, so the TLS
//! config resolves the certificate on every handshake from a shared slot.
//!
//! It must also keep answering while someone holds connections open on purpose: every admission
//! waits for it, and a webhook that does not answer is skipped (its mutation is lost). So
//! connections are limited ([`Limits`]): a TLS handshake and each request's headers must arrive
//! within a deadline, an idle connection is closed, and at most so many are served at once.

pub mod client_ca;
pub mod client_names;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

/// How long and how many connections the server serves.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The TLS handshake must finish within this.
    pub handshake: Duration,
    /// Each request's headers must arrive within this (HTTP/1), and a new connection that
    /// sends nothing for this long is closed.
    pub headers: Duration,
    /// A connection that served requests and then sends nothing for this long is closed. Longer
    /// than the apiserver's own idle timeout (90 s), so that the client, not the server, closes
    /// an idle connection: a request racing the server's close would fail.
    pub idle: Duration,
    /// A connection is closed after this long, whatever it does (the client reconnects).
    pub lifetime: Duration,
    /// Connections served at once; further ones wait in the listen backlog.
    pub connections: usize,
    /// A request, from its headers to its answer, body read included, must finish within this;
    /// otherwise it is answered 408 and its connection closed, so a body sent a byte at a time
    /// holds a slot no longer than this.
    pub request: Duration,
    /// The largest request body; a larger one is answered 413.
    pub body: usize,
    /// Bytes of request bodies held at once over all connections; a request whose next bytes do
    /// not fit is answered 503 at once. A body sent slowly holds only what it sent.
    pub in_flight_bytes: usize,
    /// Concurrent streams per HTTP/2 connection.
    pub streams: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake: Duration::from_secs(10),
            headers: Duration::from_secs(10),
            idle: Duration::from_secs(120),
            lifetime: Duration::from_secs(300),
            connections: 1024,
            request: Duration::from_secs(10),
            body: 2 << 20,
            in_flight_bytes: 8 << 20,
            streams: 8,
        }
    }
}

/// Why the server could not start or a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The certificate or key PEM does not parse.
    #[error("invalid certificate or key PEM: {0}")]
    Pem(String),
    /// rustls rejected the key or configuration.
    #[error("TLS configuration error: {0}")]
    Tls(#[from] rustls::Error),
}

/// The serving certificate, replaceable at any time; new handshakes use the newest one.
#[derive(Debug, Clone)]
pub struct CertSlot(Arc<RwLock<Arc<CertifiedKey>>>);

impl CertSlot {
    /// A slot holding the given PEM certificate chain and private key.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        Ok(Self(Arc::new(RwLock::new(Arc::new(certified_key(cert_pem, key_pem)?)))))
    }

    /// Replaces the certificate; connections already open keep theirs.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<(), Error> {
        let key = Arc::new(certified_key(cert_pem, key_pem)?);
        match self.0.write() {
            Ok(mut guard) => *guard = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
        Ok(())
    }

    fn current(&self) -> Arc<CertifiedKey> {
        match self.0.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, Error> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Pem(format!("certificate: {e}")))?;
    if chain.is_empty() {
        return Err(Error::Pem("certificate: no CERTIFICATE block found".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| Error::Pem(format!("key: {e}")))?;
    Ok(CertifiedKey::from_der(chain, key, &provider())?)
}

/// TLS 1.2 and 1.3 only (rustls never speaks older versions), HTTP/1.1 and HTTP/2.
/// The CAs whose client certificates the server requires: only a client presenting one it
/// signed completes the handshake (the apiserver does, when its admission configuration names
/// a kubeconfig with a client certificate for the webhook).
/// With names, only certificates of those CAs that carry one of them ([`client_names`]).
/// [`ClientAuth::reload`] replaces the CAs of a running server (a clone shares them).
#[derive(Clone)]
pub struct ClientAuth {
    names: Vec<String>,
    current: Arc<client_names::Current>,
}

/// The CA certificates in `pem` (one or more PEM blocks).
fn roots_of(pem: &[u8]) -> Result<rustls::RootCertStore, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| Error::Pem(format!("client CA: {e}")))?;
        roots.add(cert)?;
    }
    if roots.is_empty() {
        return Err(Error::Pem("client CA: no CERTIFICATE block found".into()));
    }
    Ok(roots)
}

/// The verifier of `roots`, with `names` ([`client_names::NamedClients`]) when there are any.
fn verifier(
    roots: rustls::RootCertStore,
    names: &[String],
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, Error> {
    let chain = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| Error::Pem(format!("client CA: {e}")))?;
    if names.is_empty() {
        return Ok(chain);
    }
    Ok(Arc::new(client_names::NamedClients {
        inner: chain,
        names: names.to_vec(),
    }))
}

impl ClientAuth {
    /// Admits only client certificates whose subject common name or a DNS name is one of
    /// `names` (none: any certificate of the CAs).
    pub fn with_names(self, names: Vec<String>) -> Result<Self, Error> {
        let roots = self.current.roots();
        let current = Arc::new(client_names::Current::new(verifier(roots.clone(), &names)?, roots));
        Ok(Self { names, current })
    }

    /// The CA certificates in `pem` (one or more PEM blocks).
    pub fn from_pem(pem: &[u8]) -> Result<Self, Error> {
        let roots = roots_of(pem)?;
        let current = Arc::new(client_names::Current::new(verifier(roots.clone(), &[])?, roots));
        Ok(Self {
            names: Vec::new(),
            current,
        })
    }

    /// Replaces the CAs with those in `pem`, for every server using this (or a clone): the next
    /// handshake is checked against them. On an error the CAs in use stay.
    pub fn reload(&self, pem: &[u8]) -> Result<(), Error> {
        let roots = roots_of(pem)?;
        self.current.replace(verifier(roots.clone(), &self.names)?, roots);
        Ok(())
    }
}

fn server_config(certs: CertSlot, clients: Option<&ClientAuth>) -> Result<ServerConfig, Error> {
    let builder = ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(clients) => builder.with_client_cert_verifier(clients.current.clone()),
    };
    let mut config = builder.with_cert_resolver(Arc::new(certs));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A connection whose reads fail once nothing has arrived for `first` (before anything was
/// read) or `idle` (afterwards): hyper's own header timeout only starts with the first byte of
/// a request, so a client that never sends one would hold its slot until the connection's
/// lifetime ends.
struct IdleTimeout<S> {
    inner: S,
    first: Duration,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
    waiting: bool,
    has_read: bool,
}

impl<S> IdleTimeout<S> {
    fn new(inner: S, first: Duration, idle: Duration) -> Self {
        Self {
            inner,
            first,
            idle,
            deadline: Box::pin(tokio::time::sleep(first)),
            waiting: false,
            has_read: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleTimeout<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.waiting = false;
                this.has_read = true;
                Poll::Ready(r)
            }
            Poll::Pending => {
                if !this.waiting {
                    this.waiting = true;
                    let wait = if this.has_read { this.idle } else { this.first };
                    let at = tokio::time::Instant::now() + wait;
                    this.deadline.as_mut().reset(at);
                }
                match this.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::ErrorKind::TimedOut.into())),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// `router` behind [`Limits::request`] (a deadline over the whole request, reading the body
/// included), [`Limits::body`] and [`Limits::in_flight_bytes`]: the body is read here, each
/// chunk only if the shared byte budget has room for it, and handed to the router whole.
fn bounded(
    router: Router,
    budget: Arc<Semaphore>,
    limits: Limits,
) -> impl tower::Service<
    axum::http::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send,
> + Clone {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use tower::ServiceExt;

    let answer = |status: StatusCode, text: &'static str| {
        let mut r = (status, text).into_response();
        r.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        r
    };
    tower::service_fn(move |request: axum::http::Request<hyper::body::Incoming>| {
        let (router, budget) = (router.clone(), budget.clone());
        async move {
            let handled = async {
                let (parts, body) = request.into_parts();
                let (bytes, _held) = match read_body(body, &budget, limits.body).await {
                    Ok(read) => read,
                    Err(BodyRefused::TooLarge) => {
                        return answer(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large");
                    }
                    Err(BodyRefused::Busy) => {
                        return answer(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "too many request bytes in flight; retry",
                        );
                    }
                    Err(BodyRefused::Broken) => return answer(StatusCode::BAD_REQUEST, "the request body broke off"),
                };
                let request = axum::http::Request::from_parts(parts, axum::body::Body::from(bytes));
                match router.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            };
            Ok(tokio::time::timeout(limits.request, handled)
                .await
                .unwrap_or_else(|_| answer(StatusCode::REQUEST_TIMEOUT, "the request took too long")))
        }
    })
}

/// Why a request body was not read.
enum BodyRefused {
    TooLarge,
    Busy,
    Broken,
}

/// Reads `body` whole, up to `max` bytes, taking a permit of `budget` for every byte; the
/// permits are released when the returned holder is dropped (after the answer).
async fn read_body(
    mut body: hyper::body::Incoming,
    budget: &Arc<Semaphore>,
    max: usize,
) -> Result<(axum::body::Bytes, Option<tokio::sync::OwnedSemaphorePermit>), BodyRefused> {
    use http_body_util::BodyExt;

    let mut out = Vec::new();
    let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyRefused::Broken)?;
        let Ok(data) = frame.into_data() else { continue };
        if out.len() + data.len() > max {
            return Err(BodyRefused::TooLarge);
        }
        let n = u32::try_from(data.len()).map_err(|_| BodyRefused::TooLarge)?;
        let permit = budget
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| BodyRefused::Busy)?;
        match held.as_mut() {
            Some(h) => h.merge(permit),
            None => held = Some(permit),
        }
        out.extend_from_slice(&data);
    }
    Ok((axum::body::Bytes::from(out), held))
}

/// Serves `router` over TLS on `listener` until `shutdown` completes, with the default
/// [`Limits`]. A failed handshake or connection only ends that connection.
pub async fn serve(
    listener: TcpListener,
    certs: CertSlot,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    serve_with(listener, certs, router, shutdown, Limits::default()).await
}

/// [`serve`] with the given limits.
pub async fn serve_with(
    listener: TcpListener,
    certs: CertSlot,
    router: Router,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) -> Result<(), Error> {
    serve_for(listener, certs, None, router, shutdown, limits).await
}

/// [`serve_with`] that, with `clients`, serves only clients presenting a certificate one of
/// its CAs signed.
pub async fn serve_for(
    listener: TcpListener,
    certs: CertSlot,
    clients: Option<ClientAuth>,
    router: Router,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) -> Result<(), Error> {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(certs, clients.as_ref())?));
    let handshake = limits.handshake;
    let secure = move |tcp: tokio::net::TcpStream, peer: std::net::SocketAddr| {
        let acceptor = acceptor.clone();
        async move {
            match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => Some(tls),
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    None
                }
            }
        }
    };
    accept_loop(listener, router, shutdown, limits, secure).await;
    Ok(())
}

/// Serves `router` over plain HTTP on `listener` until `shutdown` completes, with `limits` (no
/// handshake): the metrics and health server.
pub async fn serve_plain_with(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) {
    let plain = |tcp: tokio::net::TcpStream, _peer: std::net::SocketAddr| async move { Some(tcp) };
    accept_loop(listener, router, shutdown, limits, plain).await;
}

/// Accepts connections on `listener`, at most `limits.connections` at once, turns each into a
/// stream with `open` (a TLS handshake, or nothing), and serves `router` on it within `limits`.
async fn accept_loop<IO, Fut>(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
    open: impl Fn(tokio::net::TcpStream, std::net::SocketAddr) -> Fut + Clone + Send + 'static,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Fut: Future<Output = Option<IO>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.connections.max(1)));
    let budget = Arc::new(Semaphore::new(limits.in_flight_bytes.max(1)));
    // Dropped when the loop ends (shutdown, or the task aborted): every open connection then
    // finishes its requests and closes, so clients (the apiserver keeps connections open) dial
    // again and reach a replica that still serves.
    let (_serving, stopped) = tokio::sync::watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => return,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return, // never closed
            },
        };
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    continue;
                }
            },
        };
        let open = open.clone();
        let service = TowerToHyperService::new(bounded(router.clone(), budget.clone(), limits));
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Some(stream) = open(tcp, peer).await else { return };
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.headers);
            builder
                .http2()
                .timer(TokioTimer::new())
                .max_concurrent_streams(limits.streams);
            let io = TokioIo::new(IdleTimeout::new(stream, limits.headers, limits.idle));
            let serving = builder.serve_connection(io, service);
            tokio::pin!(serving);
            let ended = tokio::select! {
                ended = serving.as_mut() => ended,
                _ = stopped.changed() => {
                    serving.as_mut().graceful_shutdown();
                    tokio::time::timeout(limits.headers, serving).await.unwrap_or(Ok(()))
                }
                () = tokio::time::sleep(limits.lifetime) => {
                    // Finish the requests under way, take no new ones; a client that does not
                    // let go is dropped after one more header deadline.
                    serving.as_mut().graceful_shutdown();
                    tokio::time::timeout(limits.headers, serving).await.unwrap_or(Ok(()))
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests;
