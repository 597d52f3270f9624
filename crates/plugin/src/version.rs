//! `kubectl storageos version`: the plugin's version, the Kubernetes version, the operator's
//! image (its Deployment in `-n`) and the StorageOS images and node versions in the cluster.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::crd::{StorageOSCluster, StorageOSNode};

/// Why the versions could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the Kubernetes version: {0}; check --kubeconfig/--context")]
    Kubernetes(#[source] kube::Error),
}

/// `kubectl storageos version`.
pub async fn run(client: &Client, namespace: &str) -> Result<(), Error> {
    println!("kubectl-storageos: {}", env!("CARGO_PKG_VERSION"));
    let k8s = client.apiserver_version().await.map_err(Error::Kubernetes)?;
    println!("kubernetes: {}", k8s.git_version);
    let operator = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(storageos_cluster_operator::install::NAME)
        .await
        .ok()
        .flatten()
        .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone());
    println!(
        "operator: {}",
        operator.unwrap_or_else(|| format!("not found in namespace {namespace} (-n)"))
    );
    let clusters = super::list_or_none::<StorageOSCluster>(client).await;
    if clusters.is_empty() {
        println!("storageos: no StorageOSCluster");
    }
    for c in clusters {
        let image = c
            .status
            .and_then(|s| s.images?.node_container)
            .unwrap_or_else(|| "(not reported yet)".into());
        println!(
            "storageos: {image} (StorageOSCluster {}/{})",
            c.metadata.namespace.unwrap_or_default(),
            c.metadata.name.unwrap_or_default()
        );
    }
    let nodes = super::list_or_none::<StorageOSNode>(client).await;
    for n in nodes {
        let version = n.status.as_ref().map(|s| s.version.clone()).unwrap_or_default();
        println!("storageos node {}: {version}", n.name_any());
    }
    Ok(())
}
