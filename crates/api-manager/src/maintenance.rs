//! Maintenance mode: while a `StorageOSUpgrade` runs, fencing and node delete must not act.
//!
//! The StorageOS v2 API has no maintenance endpoint (docs/api-manager.md), so the signal
//! lives in Kubernetes: the upgrade controller annotates the StorageOSCluster it pauses with
//! `storageos.com/paused-by-upgrade=<upgrade>`. The annotation counts only when it is on the
//! api-manager's own cluster (`--storageos-cluster`, which the operator renders; every cluster
//! when unset, as with a Go-rendered api-manager) and names a StorageOSUpgrade that exists in
//! that cluster's namespace in a phase that holds it (Pausing to ScalingUp: a finished upgrade
//! holds nothing, even before it is deleted). A forged or
//! left-over annotation therefore never switches fencing off; it is logged with its cluster.
//! The check is a fresh read each time (rare, only before a destructive action), and a failed
//! read counts as "cannot tell", which callers must treat as "do nothing".

use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};

use crate::crd::PAUSED_BY_ANNOTATION;
use crate::crd::{StorageOSCluster, StorageOSUpgrade, UpgradePhase};

/// Whether a StorageOS upgrade is in progress, and which one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Maintenance {
    /// No cluster is paused by an upgrade.
    Off,
    /// An upgrade holds a cluster in maintenance: `<upgrade> (StorageOSCluster <ns>/<name>)`.
    On { upgrade: String },
}

/// Whether an upgrade at `phase` holds its cluster in maintenance: from pausing it until its
/// applications are scaled up again. A finished upgrade (`Completed`, `RolledBack`, `Failed`)
/// holds nothing, whether or not anyone deletes it: fencing resumes and the drain guards it
/// placed go.
pub fn holds(phase: UpgradePhase) -> bool {
    phase.holds_cluster()
}

/// The upgrade a cluster's pause annotation names, if it carries a non-empty one.
fn paused_by<K: Resource>(c: &K) -> Option<&String> {
    c.annotations().get(PAUSED_BY_ANNOTATION).filter(|v| !v.is_empty())
}

/// The maintenance state named by `clusters`, given the `upgrades` their annotations name
/// (pure, for tests): an annotation counts only if the upgrade it names is in `upgrades`, in the
/// cluster's namespace, in a phase that [`holds`] the cluster.
pub fn from_clusters<K: Resource>(clusters: &[K], upgrades: &[StorageOSUpgrade]) -> Maintenance {
    clusters
        .iter()
        .find_map(|c| {
            let upgrade = paused_by(c)?;
            let ns = c.namespace().unwrap_or_default();
            let live = upgrades
                .iter()
                .find(|u| u.namespace().as_deref() == Some(ns.as_str()) && &u.name_any() == upgrade);
            let phase = live.map(|u| u.status.as_ref().and_then(|s| s.phase).unwrap_or_default());
            if let Some(phase) = phase.filter(|p| !holds(*p)) {
                // Finished and not deleted yet (or not started): nothing is held.
                tracing::debug!(cluster = %format!("{ns}/{}", c.name_any()), %upgrade, ?phase, "the upgrade named by the pause annotation holds nothing");
                return None;
            }
            if live.is_none() {
                tracing::warn!(
                    cluster = %format!("{ns}/{}", c.name_any()),
                    upgrade = %upgrade,
                    "ignoring the pause annotation: it names no StorageOSUpgrade in the cluster's namespace that is under way"
                );
                return None;
            }
            Some(Maintenance::On {
                upgrade: format!("{upgrade} (StorageOSCluster {ns}/{})", c.name_any()),
            })
        })
        .unwrap_or(Maintenance::Off)
}

/// Parses `--storageos-cluster`: `namespace/name`.
pub fn parse_cluster(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(format!(
            "{s:?} is not namespace/name of a StorageOSCluster (for example kube-system/storageos)"
        )),
    }
}

/// Reads the maintenance state from the API: the cluster `own` (namespace, name), or every
/// cluster when None, and the upgrades their annotations name. An error means the state is
/// unknown: callers about to do something destructive must skip it and retry later. Any 404 on
/// the clusters means no cluster, so no upgrade: where the StorageOSCluster CRD is not installed
/// the apiserver answers the plain-text `404 page not found`, which is not a `Status` with
/// reason NotFound.
pub async fn current(client: &Client, own: Option<&(String, String)>) -> Result<Maintenance, kube::Error> {
    // Metadata only: a cluster whose spec no longer decodes still says whether it is paused.
    let clusters = match own {
        Some((ns, name)) => Api::<StorageOSCluster>::namespaced(client.clone(), ns)
            .get_metadata_opt(name)
            .await
            .map(|c| c.into_iter().collect::<Vec<_>>()),
        None => Api::<StorageOSCluster>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map(|l| l.items),
    };
    let clusters = match clusters {
        Ok(c) => c,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Maintenance::Off),
        Err(e) => return Err(e),
    };
    let mut upgrades = Vec::new();
    for c in &clusters {
        let Some(upgrade) = paused_by(c) else { continue };
        let ns = c.namespace().unwrap_or_default();
        match Api::<StorageOSUpgrade>::namespaced(client.clone(), &ns)
            .get_opt(upgrade)
            .await
        {
            Ok(Some(u)) => upgrades.push(u),
            Ok(None) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(from_clusters(&clusters, &upgrades))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use operator_kit::testing::answer_once;

    #[tokio::test]
    async fn s6_a_plain_text_404_without_the_crd_means_no_upgrade() {
        let (url, head) = answer_once(
            "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 18\r\nconnection: close\r\n\r\n404 page not found",
        )
        .await;
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        assert_eq!(current(&client, None).await.unwrap(), Maintenance::Off);
        assert!(head.await.unwrap().contains("/apis/storageos.com/v1/storageosclusters"));
        // Any other failure is still "cannot tell".
        let (url, _) = answer_once(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy",
        )
        .await;
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        assert!(current(&client, None).await.is_err());
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
        assert_eq!(from_clusters(&[plain.clone(), paused_by_user], &[]), Maintenance::Off);
        let upgrading = cluster(
            "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: c, namespace: storageos, annotations: {storageos.com/paused-by-upgrade: up1}}\nspec: {secretRefName: s, secretRefNamespace: s}\n",
        );
        assert_eq!(
            from_clusters(&[plain, upgrading], &[upgrade("storageos", "up1", "ScalingDown")]),
            Maintenance::On {
                upgrade: "up1 (StorageOSCluster storageos/c)".into()
            }
        );
    }

    fn upgrade(ns: &str, name: &str, phase: &str) -> StorageOSUpgrade {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"newImage": "storageos/node:v2"},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn a_pause_annotation_without_an_upgrade_under_way_in_its_namespace_is_ignored() {
        let annotated = cluster(
            "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: forged, namespace: tenant, annotations: {storageos.com/paused-by-upgrade: up1}}\nspec: {secretRefName: s, secretRefNamespace: s}\n",
        );
        let clusters = std::slice::from_ref(&annotated);
        // No such upgrade (a forged annotation, or one whose finalizer was stripped).
        assert_eq!(from_clusters(clusters, &[]), Maintenance::Off);
        // An upgrade of that name in another namespace.
        assert_eq!(
            from_clusters(clusters, &[upgrade("storageos", "up1", "ScalingDown")]),
            Maintenance::Off
        );
        // One that has not paused anything yet, or finished (failed, completed, rolled back,
        // refused): a finished upgrade left in place holds nothing.
        for phase in [
            "Pending",
            "PullingImage",
            "Failed",
            "Completed",
            "RolledBack",
            "Refused",
        ] {
            assert_eq!(
                from_clusters(clusters, &[upgrade("tenant", "up1", phase)]),
                Maintenance::Off,
                "{phase}"
            );
        }
        for phase in ["Pausing", "ScalingDown", "UpgradingNodes", "RollingBack", "ScalingUp"] {
            assert!(
                matches!(
                    from_clusters(clusters, &[upgrade("tenant", "up1", phase)]),
                    Maintenance::On { .. }
                ),
                "{phase}"
            );
        }
        assert_eq!(
            parse_cluster("kube-system/storageos").unwrap(),
            ("kube-system".into(), "storageos".into())
        );
        for bad in ["", "storageos", "/x", "x/", "a/b/c"] {
            assert!(parse_cluster(bad).is_err(), "{bad}");
        }
    }
}
