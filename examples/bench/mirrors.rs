//! The api-manager's StorageOS mirrors (`volumes.api.storageos.com`, `nodes.api.storageos.com`):
//! deleting them all (before a fresh api-manager), and the busy loops that make it rewrite them
//! and resync volume labels while fencing is measured.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use futures::{StreamExt, stream};

use crate::measure::epoch_now;
use crate::plane::Plane;

/// Every mirror deleted: the volume mirrors with one delete-collection request per namespace
/// (four at a time, each tried three times), the node mirrors with one for all. `kubectl delete
/// --all` deletes object by object, about 3 a second on a loaded 5,000-node plane, so 10,000
/// mirrors took a quarter of an hour; it deletes only the volume mirrors whose namespace's
/// requests all failed.
pub async fn delete_all(plane: &Plane) {
    let namespaces = plane
        .kc(&[
            "get",
            "volumes.api.storageos.com",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}{\"\\n\"}{end}",
        ])
        .await
        .unwrap_or_default();
    let mut namespaces: Vec<String> = namespaces.lines().filter(|l| !l.is_empty()).map(String::from).collect();
    namespaces.sort();
    namespaces.dedup();
    stream::iter(namespaces)
        .for_each_concurrent(4, |ns| async move {
            let path = format!("/apis/api.storageos.com/v1/namespaces/{ns}/volumes");
            for _ in 0..3 {
                if plane.kc(&["delete", "--raw", &path]).await.is_ok() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            eprintln!(
                "bench: could not delete the volume mirrors of namespace {ns} in one request; deleting them one by one"
            );
        })
        .await;
    // Node mirrors are cluster-scoped: one request for all 5,000 outlasts the apiserver's 60 s
    // request timeout on a loaded plane (~4,600 deleted in three timed-out tries), but what it
    // deleted stays deleted; what is left after five goes by name, 250 a request, four at a time.
    for _ in 0..5 {
        if plane
            .kc(&["delete", "--raw", "/apis/api.storageos.com/v1/nodes"])
            .await
            .is_ok()
        {
            break;
        }
    }
    let left = plane
        .kc(&["get", "nodes.api.storageos.com", "-o", "name"])
        .await
        .unwrap_or_default();
    let left: Vec<String> = left.lines().filter(|l| !l.is_empty()).map(String::from).collect();
    stream::iter(left.chunks(250).map(<[String]>::to_vec))
        .for_each_concurrent(4, |names| async move {
            let mut args = vec!["delete", "--wait=false"];
            args.extend(names.iter().map(String::as_str));
            let _ = plane.kc(&args).await;
        })
        .await;
    let _ = plane
        .kc(&["delete", "volumes.api.storageos.com", "--all", "-A", "--wait=false"])
        .await;
}

/// Mirrors left (of both kinds).
pub async fn count(plane: &Plane, kind: &str) -> usize {
    plane
        .kc(&["get", kind, "-A", "--no-headers"])
        .await
        .map(|s| s.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

/// Busy loop (b) of fencing while busy: every volume mirror deleted every 5 s, so the mirror
/// rewrites them all; one line a round in `log`. Runs until dropped.
pub async fn mirror_rounds(plane: Plane, log: &Path) -> Result<()> {
    let mut log = std::fs::File::create(log)?;
    for i in 1.. {
        let _ = plane
            .kc(&["delete", "volumes.api.storageos.com", "--all", "-A", "--wait=false"])
            .await;
        writeln!(log, "mirror {i} {}", epoch_now())?;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    Ok(())
}

/// Busy loop (c): every workload PVC relabelled, round after round, so the PVC label sync
/// writes every volume's labels to StorageOS. Runs until dropped.
pub async fn label_rounds(plane: Plane, log: &Path) -> Result<()> {
    let mut log = std::fs::File::create(log)?;
    for i in 1.. {
        let label = format!("bench.storageos.com/busy=round-{i}");
        let _ = plane
            .kc(&[
                "label",
                "pvc",
                "-A",
                "-l",
                crate::load::WORKLOAD_LABEL,
                &label,
                "--overwrite",
            ])
            .await;
        writeln!(log, "labels {i} {}", epoch_now())?;
    }
    Ok(())
}
