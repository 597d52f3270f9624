//! Which certificates of the client CA are admitted: a CA such as the cluster's own signs every
//! kubelet's and every approved client CSR's certificate too, so the chain alone would let a
//! compromised node call the webhooks. With names given, the certificate must also carry one of
//! them as its subject common name or a DNS name.

use std::sync::{Arc, RwLock};

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// `inner` (the chain to the CA), then a name of `names`.
#[derive(Debug)]
pub struct NamedClients {
    pub inner: Arc<dyn ClientCertVerifier>,
    pub names: Vec<String>,
}

/// The subject common names and DNS names of a DER certificate.
pub fn names_of(der: &[u8]) -> Result<Vec<String>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_string());
            }
        }
    }
    Ok(names)
}

impl ClientCertVerifier for NamedClients {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        let presented = names_of(end_entity.as_ref())
            .map_err(|_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
        if presented.iter().any(|n| self.names.contains(n)) {
            return Ok(verified);
        }
        tracing::warn!(presented = ?presented, allowed = ?self.names, "refused a webhook client certificate of the client CA with a name not allowed");
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::ApplicationVerificationFailure,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The client verifier in use, replaceable while the server runs (a new client CA takes effect
/// at the next handshake). It names no CA in its handshake hints: a client sends its
/// certificate all the same.
#[derive(Debug)]
pub struct Current {
    inner: RwLock<(Arc<dyn ClientCertVerifier>, rustls::RootCertStore)>,
}

impl Current {
    pub fn new(verifier: Arc<dyn ClientCertVerifier>, roots: rustls::RootCertStore) -> Self {
        Self {
            inner: RwLock::new((verifier, roots)),
        }
    }

    /// What `read` takes of the pair now (a poisoned lock still holds the last one written).
    fn read<T>(&self, read: impl FnOnce(&(Arc<dyn ClientCertVerifier>, rustls::RootCertStore)) -> T) -> T {
        read(&self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The verifier now.
    fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        self.read(|(verifier, _)| verifier.clone())
    }

    /// The CAs now.
    pub fn roots(&self) -> rustls::RootCertStore {
        self.read(|(_, roots)| roots.clone())
    }

    pub fn replace(&self, verifier: Arc<dyn ClientCertVerifier>, roots: rustls::RootCertStore) {
        *self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner) = (verifier, roots);
    }
}

impl ClientCertVerifier for Current {
    fn offer_client_auth(&self) -> bool {
        self.verifier().offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.verifier().client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verifier().verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}
