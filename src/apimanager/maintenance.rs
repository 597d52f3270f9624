//! Maintenance mode: while a `StorageOSUpgrade` runs, fencing and node delete must not act.
//!
//! The StorageOS v2 API has no maintenance endpoint (docs/api-manager.md), so the signal
//! lives in Kubernetes: the upgrade controller annotates the StorageOSCluster it pauses with
//! `storageos.com/paused-by-upgrade=<upgrade>`. Any cluster carrying it means "in maintenance".
//! The check is a fresh list each time (rare, only before a destructive action), and a failed
//! read counts as "cannot tell", which callers must treat as "do nothing".

use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::cluster::PAUSED_BY_ANNOTATION;
use crate::crd::StorageOSCluster;

/// Whether a StorageOS upgrade is in progress, and which one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Maintenance {
    /// No cluster is paused by an upgrade.
    Off,
    /// An upgrade holds a cluster in maintenance: `<upgrade> (StorageOSCluster <ns>/<name>)`.
    On { upgrade: String },
}

/// The maintenance state named by `clusters` (pure, for tests).
pub fn from_clusters(clusters: &[StorageOSCluster]) -> Maintenance {
    clusters
        .iter()
        .find_map(|c| {
            c.annotations()
                .get(PAUSED_BY_ANNOTATION)
                .filter(|v| !v.is_empty())
                .map(|upgrade| Maintenance::On {
                    upgrade: format!(
                        "{upgrade} (StorageOSCluster {}/{})",
                        c.namespace().unwrap_or_default(),
                        c.name_any()
                    ),
                })
        })
        .unwrap_or(Maintenance::Off)
}

/// Reads the maintenance state from the API. An error means the state is unknown: callers about
/// to do something destructive must skip it and retry later. Any 404 means no cluster, so no
/// upgrade: where the StorageOSCluster CRD is not installed the apiserver answers the plain-text
/// `404 page not found`, which is not a `Status` with reason NotFound.
pub async fn current(client: &Client) -> Result<Maintenance, kube::Error> {
    match Api::<StorageOSCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(clusters) => Ok(from_clusters(&clusters.items)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Maintenance::Off),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::identity::tests::answer_once;

    #[tokio::test]
    async fn s6_a_plain_text_404_without_the_crd_means_no_upgrade() {
        let (url, head) = answer_once(
            "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 18\r\nconnection: close\r\n\r\n404 page not found",
        )
        .await;
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        assert_eq!(current(&client).await.unwrap(), Maintenance::Off);
        assert!(head.await.unwrap().contains("/apis/storageos.com/v1/storageosclusters"));
        // Any other failure is still "cannot tell".
        let (url, _) = answer_once(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy",
        )
        .await;
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        assert!(current(&client).await.is_err());
    }

    fn cluster(yaml: &str) -> StorageOSCluster {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn only_the_upgrade_annotation_means_maintenance() {
        let plain = cluster(
            "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: a, namespace: storageos}\nspec: {secretRefName: s, secretRefNamespace: s}\n",
        );
        let paused_by_user = cluster(
            "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: b, namespace: storageos}\nspec: {secretRefName: s, secretRefNamespace: s, pause: true}\n",
        );
        assert_eq!(from_clusters(&[plain.clone(), paused_by_user]), Maintenance::Off);
        let upgrading = cluster(
            "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: c, namespace: storageos, annotations: {storageos.com/paused-by-upgrade: up1}}\nspec: {secretRefName: s, secretRefNamespace: s}\n",
        );
        assert_eq!(
            from_clusters(&[plain, upgrading]),
            Maintenance::On {
                upgrade: "up1 (StorageOSCluster storageos/c)".into()
            }
        );
    }
}
