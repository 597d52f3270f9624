//! Serving the operator's validating webhook ([`crate::cluster::admission`]) on every replica.
//!
//! The serving certificate comes from one of two places:
//! - files in `--webhook-cert-dir` (`tls.crt`, `tls.key`), when both are there: OLM's
//!   `webhookdefinitions` mount them at controller-runtime's default directory and keep the
//!   ValidatingWebhookConfiguration's `caBundle` themselves. They are re-read each refresh.
//! - otherwise a Secret shared by the replicas, issued and rotated by
//!   [`CertManager`], which also keeps the `caBundle` of the install's
//!   ValidatingWebhookConfiguration (deploy/operator.yaml, the Helm chart).
//!
//! The webhook is `failurePolicy: Ignore`: while no certificate is ready the server is simply
//! not up yet, and creates go through.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cluster::admission;
use crate::runtime::kube::webhook_certs::{CertManager, ConfigKind};
use crate::runtime::process::https::{self, CertSlot};
use crate::runtime::process::signal;

use crate::install::{WEBHOOK_CONFIG as CONFIG, WEBHOOK_SECRET as SECRET, WEBHOOK_SERVICE as SERVICE};
/// Where OLM (and controller-runtime) put a webhook's serving certificate.
pub const OLM_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// How often the certificate is checked for re-issue (or the files re-read).
const REFRESH: Duration = Duration::from_secs(60 * 60);
/// How often a failed first certificate is retried.
const RETRY: Duration = Duration::from_secs(10);

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address cannot be bound.
    #[error(
        "cannot listen on {addr} for the webhook: {source}; pass a free --webhook-addr, or an empty one to serve no webhook"
    )]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The certificate files are there but do not load.
    #[error("the webhook certificate in {dir} does not load: {why}; check the mounted tls.crt and tls.key")]
    Files { dir: String, why: String },
}

/// The files of a mounted certificate, when both are there.
fn mounted(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    (cert.is_file() && key.is_file()).then_some((cert, key))
}

fn read_pair(cert: &Path, key: &Path) -> Result<(String, String), String> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    Ok((read(cert)?, read(key)?))
}

/// Where the webhook listens and where its certificate comes from.
pub struct Settings {
    pub addr: String,
    pub cert_dir: PathBuf,
    /// The operator's namespace: the Service and the Secret live there.
    pub namespace: String,
    /// The watched namespaces: the kinds are admitted only there.
    pub trusted: crate::runtime::kube::trusted::TrustedNamespaces,
}

/// Binds the webhook address (at start, so a taken port stops the process with a clear error).
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, Error> {
    crate::runtime::process::addr::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })
}

/// Gets a certificate and serves on `listener` until shutdown.
pub async fn serve(client: kube::Client, listener: tokio::net::TcpListener, settings: Settings) -> Result<(), Error> {
    let router = admission::router(client.clone(), settings.trusted.clone());
    if let Some((cert, key)) = mounted(&settings.cert_dir) {
        let dir = settings.cert_dir.display().to_string();
        let files = |why: String| Error::Files { dir: dir.clone(), why };
        let (cert_pem, key_pem) = read_pair(&cert, &key).map_err(files)?;
        let slot = CertSlot::new(&cert_pem, &key_pem).map_err(|e| files(e.to_string()))?;
        tracing::info!(addr = %settings.addr, dir = %dir, "serving the StorageOSCluster webhook with the mounted certificate");
        let reload = {
            let slot = slot.clone();
            async move {
                let mut served = cert_pem;
                loop {
                    tokio::time::sleep(REFRESH).await;
                    match read_pair(&cert, &key) {
                        Ok((c, k)) if c != served => match slot.replace(&c, &k) {
                            Ok(()) => served = c,
                            Err(e) => {
                                tracing::warn!(error = %e, "the renewed webhook certificate does not load; keeping the old one")
                            }
                        },
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "cannot re-read the webhook certificate"),
                    }
                }
            }
        };
        return run(listener, slot, router, reload).await;
    }
    let manager = CertManager {
        client,
        secret_namespace: settings.namespace.clone(),
        secret_name: SECRET.into(),
        service_namespace: settings.namespace.clone(),
        service_name: SERVICE.into(),
        webhook_config: CONFIG.into(),
        kind: ConfigKind::Validating,
        component: crate::install::NAME.into(),
        validity: chrono::Duration::days(365),
    };
    let cert = tokio::select! {
        cert = manager.ensure_until_ready(RETRY) => cert,
        () = signal::shutdown() => return Ok(()),
    };
    let slot = CertSlot::new(&cert.cert_pem, &cert.key_pem).map_err(|e| Error::Files {
        dir: format!("Secret {}/{SECRET}", settings.namespace),
        why: e.to_string(),
    })?;
    tracing::info!(addr = %settings.addr, "serving the StorageOSCluster webhook");
    let rotate = {
        let slot = slot.clone();
        async move {
            let mut current = cert;
            loop {
                tokio::time::sleep(REFRESH).await;
                match manager.refresh(&slot, &current).await {
                    Ok(Some(new)) => current = new,
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "webhook certificate refresh failed; will retry"),
                }
            }
        }
    };
    run(listener, slot, router, rotate).await
}

/// Serves until shutdown, keeping the certificate fresh alongside.
async fn run(
    listener: tokio::net::TcpListener,
    slot: CertSlot,
    router: axum::Router,
    keep_fresh: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let server = https::serve_for(
        listener,
        slot,
        None,
        router,
        signal::shutdown(),
        https::Limits::default(),
    );
    tokio::select! {
        served = server => {
            if let Err(e) = served {
                tracing::error!(error = %e, "the webhook server stopped");
            }
        }
        () = keep_fresh => {}
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn mounted_certificates_need_both_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(mounted(dir.path()).is_none());
        std::fs::write(dir.path().join("tls.crt"), "x").unwrap();
        assert!(mounted(dir.path()).is_none(), "a key is needed too");
        std::fs::write(dir.path().join("tls.key"), "y").unwrap();
        assert!(mounted(dir.path()).is_some());
    }
}
