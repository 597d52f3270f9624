//! Writing a StorageOSCluster's status: Ready=False for a pass that stopped, and the status a
//! pass that applied everything observes (selected nodes, ready node pods, StorageOS nodes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::node_cache::{CachedNode, ListedNode, ListedNodePod};
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::context::Context;
use super::error::{Error, Step};
use super::ownership::selector;
use super::prepare::{Refusal, Then};
use super::status::{self as cluster_status, PAUSED, phase};
use super::{adopt, kv_backend, select, settings_push};
use crate::crd::{StorageOSCluster, StorageOSClusterStatus};
use crate::reasons::{self, Reason};
use crate::render::{self, Inputs, Plan};
use crate::runtime::kube::conditions::{self, now};
use crate::runtime::kube::{cache, status};

/// Puts a refusal on the status (Ready=False, one Warning event), then returns what it says.
pub async fn refuse(
    cluster: &StorageOSCluster,
    api: &Api<StorageOSCluster>,
    ctx: &Context,
    refusal: Refusal,
) -> Result<Action, Error> {
    if let Then::Retry(action) = refusal.then {
        tracing::info!(cluster = %cluster.name_any(), message = %refusal.message, "trying again shortly");
        return Ok(action);
    }
    not_ready(cluster, api, ctx, refusal.reason, refusal.message).await?;
    match refusal.then {
        Then::Wait(action) | Then::Retry(action) => Ok(action),
        Then::Fail(e) => Err(e),
    }
}

pub async fn write_status(
    ctx: &Context,
    api: &Api<StorageOSCluster>,
    cluster: &StorageOSCluster,
    previous: &StorageOSClusterStatus,
    status: StorageOSClusterStatus,
) -> Result<(), Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    ctx.cluster_metrics.observe(&namespace, &cluster.name_any(), &status);
    status::write_if_changed(api, cluster, previous, &status)
        .await
        .step("write the status")?;
    Ok(())
}

/// Sets Ready=False with `reason`, emits a Warning event the first time, and writes status.
pub async fn not_ready(
    cluster: &StorageOSCluster,
    api: &Api<StorageOSCluster>,
    ctx: &Context,
    reason: Reason,
    message: String,
) -> Result<(), Error> {
    let previous = cluster.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    if status.phase.is_none() {
        status.phase = Some(phase::CREATING.into());
    }
    let reasons = (reason, reasons::FAILED_CREATION);
    let status = status::set_not_ready(api, &ctx.kit, cluster, &previous, status, reasons, message)
        .await
        .step("write the status")?;
    let namespace = cluster.namespace().unwrap_or_default();
    ctx.cluster_metrics.observe(&namespace, &cluster.name_any(), &status);
    Ok(())
}

impl status::WithConditions for StorageOSClusterStatus {
    fn conditions_mut(&mut self) -> &mut Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>> {
        &mut self.conditions
    }
}

/// The controller's Node and node pod caches once both have listed everything; None when the
/// controller does not run them (a reconcile called on its own) or they are not filled within
/// a minute: status then lists from the apiserver.
async fn ready_caches(ctx: &Context) -> Option<super::NodeCaches> {
    let caches = ctx.caches.get()?;
    let ready = async { tokio::join!(caches.nodes.wait_until_ready(), caches.node_pods.wait_until_ready()) };
    tokio::time::timeout(Duration::from_secs(60), ready)
        .await
        .ok()
        .map(|_| caches.clone())
}

/// Observes and writes the status of a cluster whose plan is applied.
pub async fn update_status(
    cluster: &StorageOSCluster,
    api: &Api<StorageOSCluster>,
    ctx: &Context,
    inputs: &Inputs,
    plan: &Plan,
) -> Result<StorageOSClusterStatus, Error> {
    let target_ns = plan.resolved.namespace.clone();
    let caches = ready_caches(ctx).await;
    // From the caches, shared (views of what status reads: `node_cache`); else listed as such,
    // a page at a time: at 5,000 nodes one unpaged list of the node pods was a ~50 MB body read
    // whole, and the operator's peak memory (docs/benchmarks.md).
    let nodes: Vec<Arc<CachedNode>> = match &caches {
        Some(c) => c.nodes.state(),
        // Each in an `Arc`, as the cache holds them.
        None => cache::pick_in_pages(&Api::<ListedNode>::all(ctx.client.clone()), cache::LIST_PAGE, |page| {
            page.into_iter().map(|l| Arc::new(l.view)).collect()
        })
        .await
        .step("list the Nodes")?,
    };
    let chosen = select::selected_nodes(&nodes, Some(&plan.resolved.node_selector_terms), &plan.tolerations);
    // A node StorageOS cannot run on is named and left out of the count, never waited for.
    let ineligible: BTreeMap<&str, String> = nodes
        .iter()
        .filter_map(|n| Some((n.name.as_str(), n.ineligible()?)))
        .filter(|(name, _)| chosen.iter().any(|c| c == name))
        .collect();
    let selected: Vec<String> = chosen
        .into_iter()
        .filter(|n| !ineligible.contains_key(n.as_str()))
        .collect();
    let pod_labels = &plan.node_pod_labels;
    let pods_ready_on = match &caches {
        Some(c) => cluster_status::pod_ready_nodes(c.node_pods.state().iter().map(AsRef::as_ref).filter(|p| {
            p.namespace == target_ns.as_str() && pod_labels.iter().all(|(k, v)| p.labels.get(k) == Some(v.as_str()))
        })),
        None => {
            let pods = Api::<ListedNodePod>::namespaced(ctx.client.clone(), &target_ns);
            let selected = ListParams::default().labels(&selector(pod_labels));
            cluster_status::pod_ready_nodes(
                cache::pick_selected_in_pages(&pods, selected, cache::LIST_PAGE, |page| {
                    page.into_iter().map(|l| l.view).collect()
                })
                .await
                .step("list the StorageOS node pods")?
                .iter(),
            )
        }
    };
    let api_nodes = match settings_push::api_client(ctx, inputs, plan) {
        Ok(client) => client
            .list_node_health()
            .await
            .map_err(settings_push::ClientError::from),
        Err(e) => Err(e),
    };
    let previous = cluster.status.clone().unwrap_or_default();
    let now = now();
    let images = plan.images.to_container_images();
    let mut status = cluster_status::compute(&cluster_status::ClusterObservation {
        selected: &selected,
        pods_ready_on,
        api_nodes: api_nodes.as_deref(),
        previous: Some(&previous),
        generation: cluster.meta().generation,
        images,
        now: &now,
    });
    let news = adopt::note_replaced_images(
        status.conditions.get_or_insert_with(Vec::new),
        render::replaced_message(&plan.replaced_go_defaults),
        cluster.meta().generation,
        &now,
    );
    if let Some(message) = news {
        ctx.event(cluster, EventType::Normal, reasons::GO_DEFAULT_IMAGES_REPLACED, message)
            .await;
    }
    // Only a cluster that was paused carries the condition; it now says it is not.
    let conds = status.conditions.get_or_insert_with(Vec::new);
    if conds.iter().any(|c| c.type_ == PAUSED) {
        let generation = cluster.meta().generation;
        conditions::set(
            conds,
            PAUSED,
            false,
            reasons::RESUMED,
            "the cluster is reconciled again",
            generation,
            &now,
        );
    }
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let had_ineligible = conds.iter().any(|c| c.type_ == NODES_ELIGIBLE && c.status == "False");
    ctx.cluster_metrics.observe_ineligible(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        ineligible.len(),
    );
    let generation = cluster.meta().generation;
    if ineligible.is_empty() {
        let message = "StorageOS can run on every selected node";
        conditions::set(
            conds,
            NODES_ELIGIBLE,
            true,
            reasons::ALL_NODES_ELIGIBLE,
            message,
            generation,
            &now,
        );
    } else {
        let shown: Vec<String> = ineligible
            .iter()
            .take(10)
            .map(|(n, why)| format!("{n} ({why})"))
            .collect();
        let more = ineligible.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let message = format!(
            "StorageOS cannot run on {}{more}: they are not counted; keep StorageOS off them with spec.nodeSelectorTerms (kubernetes.io/arch In [amd64], kubernetes.io/os In [linux])",
            shown.join(", ")
        );
        conditions::set(
            conds,
            NODES_ELIGIBLE,
            false,
            reasons::NODES_INELIGIBLE,
            &message,
            generation,
            &now,
        );
        if !had_ineligible || previous_message(&previous, NODES_ELIGIBLE) != Some(message.as_str()) {
            ctx.event(cluster, EventType::Warning, reasons::NODES_INELIGIBLE, message)
                .await;
        }
    }
    // The kv backend (checked at most once a minute), shown beside Ready (it does not change it).
    let kv = ctx
        .kv_checks
        .check(
            &cluster.uid().unwrap_or_default(),
            &plan.resolved,
            inputs.etcd_tls_secret.as_ref(),
            chrono::Utc::now(),
        )
        .await;
    let was_reachable = conditions::find(previous.conditions.as_deref(), kv_backend::CONDITION)
        .map(|c| (c.status == "True", c.reason.clone()));
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let generation = cluster.meta().generation;
    conditions::set(
        conds,
        kv_backend::CONDITION,
        kv.reachable,
        kv.reason,
        &kv.message,
        generation,
        &now,
    );
    let namespace = cluster.namespace().unwrap_or_default();
    let expiry = kv.cert_not_after.map(|at| at.timestamp());
    ctx.cluster_metrics
        .observe_kv_backend(&namespace, &cluster.name_any(), kv.reachable, expiry);
    if !kv.reachable && was_reachable != Some((false, kv.reason.to_string())) {
        ctx.event(cluster, EventType::Warning, kv.reason, kv.message.clone())
            .await;
    }
    // The Kubernetes the operator connected to (an older one than supported stops it at start).
    if let Some(v) = &ctx.config.kubernetes_version {
        let (major, minor) = crate::checks::TESTED_KUBERNETES;
        let newer = (v.major, v.minor) > (major, minor);
        let (reason, message) = if newer {
            (
                reasons::KUBERNETES_NEWER_THAN_TESTED,
                format!(
                    "Kubernetes {v} is newer than the newest tested, {major}.{minor}: expect it to work, and report anything that does not"
                ),
            )
        } else {
            (
                reasons::KUBERNETES_TESTED,
                format!("Kubernetes {v} is within the tested range"),
            )
        };
        let news = newer && previous_message(&previous, KUBERNETES_SUPPORTED) != Some(message.as_str());
        let conds = status.conditions.get_or_insert_with(Vec::new);
        conditions::set(
            conds,
            KUBERNETES_SUPPORTED,
            true,
            reason,
            &message,
            cluster.meta().generation,
            &now,
        );
        if news {
            ctx.event(cluster, EventType::Warning, reason, message).await;
        }
    }
    if status.ready != previous.ready {
        let ready = status.ready.clone().unwrap_or_default();
        let all = status.phase.as_deref() == Some(phase::RUNNING);
        let note = if all {
            format!("{ready} StorageOS nodes are functional. Cluster healthy")
        } else {
            format!("{ready} StorageOS nodes are functional")
        };
        let type_ = if fewer_functional(previous.ready.as_deref(), &ready) {
            EventType::Warning
        } else {
            EventType::Normal
        };
        ctx.event(cluster, type_, reasons::CHANGED_STATUS, note).await;
    }
    write_status(ctx, api, cluster, &previous, status.clone()).await?;
    Ok(status)
}

/// Whether the `ready/desired` count went down: nodes stopped being functional. A cluster coming
/// up (0/3, 1/3, …) or growing is no cause for a Warning.
fn fewer_functional(before: Option<&str>, now: &str) -> bool {
    let count = |s: &str| s.split('/').next().and_then(|n| n.trim().parse::<u32>().ok());
    match (before.and_then(count), count(now)) {
        (Some(b), Some(n)) => n < b,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The condition that says whether StorageOS can run on every selected node.
pub const NODES_ELIGIBLE: &str = "NodesEligible";

/// The condition type saying whether the cluster runs a Kubernetes this release was tested on.
pub const KUBERNETES_SUPPORTED: &str = "KubernetesSupported";

/// The message of condition `type_` in `status`.
fn previous_message<'a>(status: &'a StorageOSClusterStatus, type_: &str) -> Option<&'a str> {
    conditions::find(status.conditions.as_deref(), type_).map(|c| c.message.as_str())
}

#[cfg(test)]
mod tests {
    use super::fewer_functional;

    #[test]
    fn only_a_falling_count_of_functional_nodes_is_a_warning() {
        assert!(!fewer_functional(None, "0/3"), "a new cluster");
        assert!(!fewer_functional(Some("0/3"), "1/3"), "coming up");
        assert!(!fewer_functional(Some("2/3"), "3/3"));
        assert!(!fewer_functional(Some("3/3"), "3/4"), "a node added");
        assert!(fewer_functional(Some("3/3"), "2/3"), "a node lost");
        assert!(fewer_functional(Some("3/3"), ""), "no count any more");
    }
}
