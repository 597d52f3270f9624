//! The client, from kubectl's connection flags: `--kubeconfig` (else `$KUBECONFIG`, else
//! `~/.kube/config`, else the pod's in-cluster account) and `--context`.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::Connection;

/// Why the cluster cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the kubeconfig {path}: {source}; pass --kubeconfig FILE or set KUBECONFIG")]
    Read {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no usable kubeconfig: {0}; pass --kubeconfig FILE (and --context NAME) or set KUBECONFIG")]
    Config(#[source] kube::config::KubeconfigError),
    #[error("cannot make a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// A client for the cluster the flags name.
pub async fn client(c: &Connection) -> Result<Client, Error> {
    let options = KubeConfigOptions {
        context: c.context.clone(),
        ..Default::default()
    };
    let config = match &c.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|source| Error::Read {
                path: path.display().to_string(),
                source,
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(Error::Config)?
        }
        None => match Config::from_kubeconfig(&options).await {
            Ok(config) => config,
            // No kubeconfig at all: inside a pod, use its account.
            Err(e) => Config::incluster().map_err(|_| Error::Config(e))?,
        },
    };
    Client::try_from(config).map_err(Error::Client)
}
