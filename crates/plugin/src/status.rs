//! `kubectl storageos status`: one screen on the operator (pods, leader), each
//! StorageOSCluster (phase, conditions), its api-manager and node pods, the StorageOS nodes and
//! the volumes that are not healthy (from the `api.storageos.com` mirrors), fencing in the last
//! hour, and everything that is not Ready with its message. `bundle` stores the same text as
//! `summary.txt`.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::cluster::ownership::selector;
use crate::crd::{StorageOSCluster, StorageOSNode, StorageOSUpgrade, StorageOSVolume};
use crate::reasons;
use crate::render::labels;

#[derive(Debug, clap::Args)]
#[command(
    about = "One screen on the operator, the cluster, StorageOS nodes and volumes",
    long_about = "One screen on StorageOS: the operator's pods and which one leads; each \
    StorageOSCluster's phase and conditions; its api-manager (and leader) and node pods; the \
    StorageOS nodes and the volumes that are not healthy, with their PVCs and where their master is (from \
    nodes.api.storageos.com and volumes.api.storageos.com); pods fenced in the last hour; and \
    everything that is not Ready, with its message. Reads only."
)]
pub struct StatusArgs {}

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {what}: {source}; check --kubeconfig/--context and that you may read it")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
}

fn read(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Read { what, source }
}

/// `kubectl storageos status`.
pub async fn run(client: &Client, namespace: &str, _args: &StatusArgs) -> Result<(), Error> {
    print!("{}", summary(client, namespace).await?);
    Ok(())
}

/// What `status` prints.
pub async fn summary(client: &Client, namespace: &str) -> Result<String, Error> {
    let mut out = String::new();
    let mut problems: Vec<String> = Vec::new();

    // The operator.
    let op_selector = selector(&storageos_cluster_operator::install::selector());
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&op_selector))
        .await
        .map_err(read(format!("the operator pods in {namespace}")))?
        .items;
    let leader = holder(client, namespace, crate::rbac::operator::LEASE).await;
    out.push_str(&format!(
        "Operator (namespace {namespace}, leader: {})\n",
        leader.as_deref().unwrap_or("none")
    ));
    out.push_str(&indent(&pod_table(&pods, &mut problems)));

    // The clusters.
    let clusters = super::list_all::<StorageOSCluster>(client)
        .await
        .map_err(read("the StorageOSClusters"))?;
    if clusters.is_empty() {
        out.push_str("\nNo StorageOSCluster. Install one with `kubectl storageos install`.\n");
    }
    for c in &clusters {
        let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
        out.push_str(&format!(
            "\nStorageOSCluster {ns}/{name}: {}\n",
            super::install::cluster_line(c)
        ));
        for cond in c.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default() {
            out.push_str(&format!(
                "  {}={} {}: {}\n",
                cond.type_, cond.status, cond.reason, cond.message
            ));
            if cond.type_ == "Ready" && cond.status == "False" {
                problems.push(format!("StorageOSCluster {ns}/{name}: {}", cond.message));
            }
        }
        let operands = c.spec.namespace.clone().unwrap_or_else(|| "kube-system".into());
        let am_leader = holder(client, &operands, crate::rbac::components::API_MANAGER_LEASE).await;
        for (what, kind, component) in [
            ("api-manager", None, "storageos-api-manager"),
            ("node pods", Some("daemonset"), "storageos-daemonset"),
        ] {
            let sel = selector(&labels::pod(&name, kind, component));
            let pods = Api::<Pod>::namespaced(client.clone(), &operands)
                .list(&ListParams::default().labels(&sel))
                .await
                .map_err(read(format!("the {what} in {operands}")))?
                .items;
            let lead = if kind.is_none() {
                format!(", leader: {}", am_leader.as_deref().unwrap_or("none"))
            } else {
                String::new()
            };
            out.push_str(&format!("  {what} (namespace {operands}{lead})\n"));
            out.push_str(&indent(&indent(&pod_table(&pods, &mut problems))));
        }
    }

    // Upgrades in progress.
    let upgrades = super::list_or_none::<StorageOSUpgrade>(client).await;
    for u in &upgrades {
        let status = u.status.clone().unwrap_or_default();
        out.push_str(&format!(
            "\nStorageOSUpgrade {}/{} to {}: phase {}\n",
            u.namespace().unwrap_or_default(),
            u.name_any(),
            u.spec.new_image,
            status
                .phase
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "(none yet)".into())
        ));
    }

    // StorageOS's view.
    let nodes = super::list_or_none::<StorageOSNode>(client).await;
    out.push_str(&format!("\nStorageOS nodes ({})\n", nodes.len()));
    let rows: Vec<[String; 6]> = nodes
        .iter()
        .map(|n| {
            let s = n.status.clone().unwrap_or_default();
            if s.health != "online" {
                problems.push(format!("StorageOS node {} is {}", n.name_any(), s.health));
            }
            let cap = s.capacity.clone().unwrap_or_default();
            [
                n.name_any(),
                s.health.clone(),
                s.health_since.clone().unwrap_or_default(),
                format!("{} free of {}", cap.free, cap.total),
                drain_column(&s),
                s.unprotected_count.map_or_else(|| "?".into(), |c| c.to_string()),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str(&indent(&columns(
            &["NAME", "HEALTH", "SINCE", "CAPACITY", "DRAIN", "UNPROTECTED"],
            &rows,
        )));
    }
    let volumes = super::list_or_none::<StorageOSVolume>(client).await;
    let unhealthy: Vec<[String; 5]> = volumes
        .iter()
        .filter_map(|v| {
            let s = v.status.clone()?;
            (s.health != "healthy").then(|| {
                let ns = v.namespace().unwrap_or_default();
                [
                    format!("{ns}/{}", s.pvc),
                    v.name_any(),
                    s.health,
                    format!("{} ({})", s.master.node, s.master.health),
                    s.replicas_ready,
                ]
            })
        })
        .collect();
    let unprotected = volumes
        .iter()
        .filter(|v| v.status.as_ref().is_some_and(|s| s.unprotected))
        .count();
    out.push_str(&format!(
        "\nVolumes: {} in all, {} not healthy, {unprotected} unprotected (0 replicas: offline with their node, and no drain waits for them)\n",
        volumes.len(),
        unhealthy.len()
    ));
    if !unhealthy.is_empty() {
        out.push_str(&indent(&columns(
            &["PVC", "VOLUME", "HEALTH", "MASTER", "REPLICAS"],
            &unhealthy,
        )));
    }

    // Fencing in the last hour.
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    let fenced: Vec<String> = Api::<Event>::all(client.clone())
        .list(&ListParams::default().fields(&format!("reason={}", reasons::FENCED)))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.last_timestamp.as_ref().is_none_or(|t| after(t, hour_ago)))
        .map(|e| {
            format!(
                "{}/{}: {}",
                e.involved_object.namespace.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect();
    out.push_str(&format!("\nFencing in the last hour: {}\n", fenced.len()));
    for f in fenced {
        out.push_str(&format!("  {f}\n"));
    }

    out.push_str(&format!("\nNot ready: {}\n", problems.len()));
    for p in problems {
        out.push_str(&format!("  {p}\n"));
    }
    Ok(out)
}

/// What a node mirror says of draining the node: `safe`, `waits (N volumes)`, or `?` before
/// the api-manager has read every volume.
fn drain_column(s: &crate::crd::NodeMirrorStatus) -> String {
    match s.safe_to_drain {
        None => "?".into(),
        Some(true) => "safe".into(),
        Some(false) => format!("waits ({} volumes)", s.drain_blocked_count.unwrap_or(0)),
    }
}

/// Whether `t` is at or after `since`.
fn after(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time, since: chrono::DateTime<chrono::Utc>) -> bool {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| chrono::DateTime::parse_from_rfc3339(v.as_str()?).ok())
        .is_none_or(|t| t >= since)
}

/// Who holds the Lease (None when there is none, or it cannot be read).
async fn holder(client: &Client, namespace: &str, name: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

/// Pods as NAME, PHASE, READY, NODE, RESTARTS; a pod not Ready goes to `problems`.
fn pod_table(pods: &[Pod], problems: &mut Vec<String>) -> String {
    if pods.is_empty() {
        return "(no pods)\n".into();
    }
    let rows: Vec<[String; 5]> = pods
        .iter()
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            let statuses = status.container_statuses.unwrap_or_default();
            let ready = statuses.iter().filter(|c| c.ready).count();
            let restarts: i32 = statuses.iter().map(|c| c.restart_count).sum();
            let pod_ready = status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Ready");
            if pod_ready.as_ref().is_none_or(|c| c.status != "True") {
                problems.push(format!(
                    "pod {}/{}: {}",
                    p.namespace().unwrap_or_default(),
                    p.name_any(),
                    pod_ready.and_then(|c| c.message).unwrap_or_else(|| "not Ready".into())
                ));
            }
            [
                p.name_any(),
                status.phase.unwrap_or_default(),
                format!("{ready}/{}", statuses.len()),
                p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
                restarts.to_string(),
            ]
        })
        .collect();
    columns(&["NAME", "PHASE", "READY", "NODE", "RESTARTS"], &rows)
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
pub fn columns<const N: usize>(head: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_the_last_is_not_padded() {
        let out = columns(
            &["A", "BB", "C"],
            &[
                ["xxx".into(), "y".into(), "z".into()],
                ["1".into(), "2".into(), "3".into()],
            ],
        );
        assert_eq!(out, "A    BB  C\nxxx  y   z\n1    2   3\n");
    }
}
