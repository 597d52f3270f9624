//! An HTTPS server for an axum router, with a certificate that can be swapped while serving.
//!
//! The webhook server must keep answering while its certificate is re-issued, so the TLS
//! config resolves the certificate on every handshake from a shared slot.

use std::future::Future;
use std::sync::{Arc, RwLock};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

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
fn server_config(certs: CertSlot) -> Result<ServerConfig, Error> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(certs));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves `router` over TLS on `listener` until `shutdown` completes. A failed handshake or
/// connection only ends that connection.
pub async fn serve(
    listener: TcpListener,
    certs: CertSlot,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(certs)?));
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            if let Err(e) = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
