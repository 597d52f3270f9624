//! `storageos-operator plan -f upgrade.yaml` (and `kubectl storageos plan`): what a
//! StorageOSUpgrade would do if it were created now, read as its dry run (`spec.dryRun`) reads
//! it, with this process's credentials. Nothing is written.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube::{Client, ResourceExt};
use prometheus_client::registry::Registry;
use serde::Deserialize;

use super::{Context, reconcile};
use crate::cluster::api_clients::ApiClients;
use crate::crd::{StorageOSUpgrade, UpgradePreview};
use crate::runtime::kube::metrics::ReconcileMetrics;

/// Why the upgrade's plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} holds a StorageOSUpgrade that does not parse: {source}; check it with kubectl apply --dry-run=server -f {path}"
    )]
    Parse {
        path: String,
        #[source]
        source: serde_yaml::Error,
    },
    #[error(
        "cannot read what the upgrade would touch: {0}; check the kubeconfig's access (the operator's rules suffice)"
    )]
    Observe(#[from] super::Error),
    #[error("cannot print the plan: {0}")]
    Print(#[source] serde_json::Error),
}

/// The StorageOSUpgrade in `file`, if it holds one (else it is a StorageOSCluster's plan).
pub fn upgrade_in(file: &Path) -> Result<Option<StorageOSUpgrade>, Error> {
    let path = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|source| Error::Read {
        path: path.clone(),
        source,
    })?;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let Ok(value) = serde_yaml::Value::deserialize(doc) else {
            continue;
        };
        if value.get("kind").and_then(serde_yaml::Value::as_str) == Some("StorageOSUpgrade") {
            let up = serde_yaml::from_value(value).map_err(|source| Error::Parse { path, source })?;
            return Ok(Some(up));
        }
    }
    Ok(None)
}

/// The preview of creating `up` (in its namespace, else `namespace`), reading StorageOS at
/// `storageos_endpoint` when given (else the cluster's Service, which only routes in-cluster).
pub async fn preview(
    client: &Client,
    mut up: StorageOSUpgrade,
    namespace: &str,
    storageos_endpoint: Option<String>,
) -> Result<UpgradePreview, Error> {
    if up.namespace().is_none() {
        up.metadata.namespace = Some(namespace.to_string());
    }
    let metrics = ReconcileMetrics::register(&mut Registry::default());
    let clients = Arc::new(ApiClients::new(
        (Duration::from_secs(10), Duration::from_secs(20)),
        None,
    ));
    let ctx = Context::new(client.clone(), metrics).with_storageos(clients, storageos_endpoint);
    Ok(reconcile::preview(&up, &ctx).await?)
}

/// Prints the preview of creating `up` ([`preview`]) as a table, or JSON.
pub async fn print(
    client: &Client,
    up: StorageOSUpgrade,
    namespace: &str,
    storageos_endpoint: Option<String>,
    json: bool,
) -> Result<(), Error> {
    let p = preview(client, up.clone(), namespace, storageos_endpoint).await?;
    print!("{}", render(&up, &p, json)?);
    Ok(())
}

/// The preview as a table (or JSON).
pub fn render(up: &StorageOSUpgrade, p: &UpgradePreview, json: bool) -> Result<String, Error> {
    if json {
        return serde_json::to_string_pretty(p).map(|s| s + "\n").map_err(Error::Print);
    }
    let mut out = format!(
        "StorageOSUpgrade {}/{}: {} -> {}\n",
        up.namespace().unwrap_or_default(),
        up.name_any(),
        p.from_image.as_deref().unwrap_or("(no node DaemonSet)"),
        p.image
    );
    match &p.blocker {
        None => out.push_str("it would start now\n"),
        Some(b) => out.push_str(&format!("it would not start yet: {b}\n")),
    }
    out.push_str(&format!(
        "pulls {} on {} node(s), then restarts their StorageOS pods: {}\n",
        p.image,
        p.nodes.len(),
        p.nodes.join(", ")
    ));
    if p.apps.is_empty() {
        out.push_str("scales no application to 0\n");
    } else {
        out.push_str(&format!(
            "scales {} application(s) to 0, restored afterwards:\n",
            p.apps.len()
        ));
        for a in &p.apps {
            out.push_str(&format!(
                "  {} {}/{} ({} replicas)\n",
                a.kind, a.namespace, a.name, a.replicas
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::crd::ScaledApp;

    #[test]
    fn an_upgrade_file_is_told_from_a_cluster_file() {
        let dir = tempfile::tempdir().unwrap();
        let up = dir.path().join("up.yaml");
        std::fs::write(
            &up,
            "apiVersion: storageos.com/v1\nkind: StorageOSUpgrade\nmetadata: {name: u}\nspec: {newImage: storageos/node:v2.5.0}\n",
        )
        .unwrap();
        assert_eq!(
            upgrade_in(&up).unwrap().unwrap().spec.new_image,
            "storageos/node:v2.5.0"
        );
        let cluster = dir.path().join("c.yaml");
        std::fs::write(
            &cluster,
            "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: c}\n",
        )
        .unwrap();
        assert!(upgrade_in(&cluster).unwrap().is_none());
        let bad = dir.path().join("bad.yaml");
        std::fs::write(
            &bad,
            "apiVersion: storageos.com/v1\nkind: StorageOSUpgrade\nspec: {newImage: 3}\n",
        )
        .unwrap();
        assert!(upgrade_in(&bad).unwrap_err().to_string().contains("does not parse"));
    }

    #[test]
    fn the_table_names_the_blocker_the_nodes_and_the_apps() {
        let up: StorageOSUpgrade = serde_yaml::from_str(
            "apiVersion: storageos.com/v1\nkind: StorageOSUpgrade\nmetadata: {name: u, namespace: s}\nspec: {newImage: storageos/node:v2.5.0}\n",
        )
        .unwrap();
        let p = UpgradePreview {
            would_start: false,
            blocker: Some("volume default/pvc-1 is syncing".into()),
            from_image: Some("storageos/node:v2.4.2".into()),
            image: "storageos/node:v2.5.0".into(),
            apps: vec![ScaledApp {
                kind: "StatefulSet".into(),
                namespace: "db".into(),
                name: "pg".into(),
                replicas: 3,
            }],
            nodes: vec!["a".into(), "b".into()],
        };
        let t = render(&up, &p, false).unwrap();
        assert!(t.contains("s/u: storageos/node:v2.4.2 -> storageos/node:v2.5.0"), "{t}");
        assert!(
            t.contains("would not start yet: volume default/pvc-1 is syncing"),
            "{t}"
        );
        assert!(t.contains("on 2 node(s)") && t.contains("a, b"), "{t}");
        assert!(t.contains("StatefulSet db/pg (3 replicas)"), "{t}");
        assert!(render(&up, &p, true).unwrap().contains("\"wouldStart\": false"));
    }
}
