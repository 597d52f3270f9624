//! Writing a StorageOSCluster's status: Ready=False for a pass that stopped; for a pass that
//! applied everything, [`update_status`]: observe (nodes, node pods, StorageOS nodes, the kv
//! backend, the Kubernetes version), the pure `status::compute`, then one write (events,
//! metrics, the status when it changed).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::context::Context;
use super::error::{Error, Step};
use super::node_cache::{CachedNode, ListedNode, ListedNodePod};
use super::ownership::selector;
use super::prepare::{Refusal, Then};
use super::status::{self as cluster_status, ClusterObservation, StatusEvent, phase};
use super::{select, settings_push};
use crate::crd::{StorageOSCluster, StorageOSClusterStatus};
use crate::reasons::{self, Reason};
use crate::render::{self, Inputs, Plan};
use crate::runtime::kube::conditions::now;
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
    status::write_if_changed(
        api,
        cluster,
        (previous, &status),
        crate::cluster::ownership::FIELD_MANAGER,
    )
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
    let status = status::set_not_ready(
        (api, crate::cluster::ownership::FIELD_MANAGER),
        &ctx.kit,
        cluster,
        &previous,
        status,
        reasons,
        message,
    )
    .await
    .step("write the status")?;
    let namespace = cluster.namespace().unwrap_or_default();
    ctx.cluster_metrics.observe(&namespace, &cluster.name_any(), &status);
    Ok(())
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

/// Observes and writes the status of a cluster whose plan is applied: read, compute (pure),
/// write.
pub async fn update_status(
    cluster: &StorageOSCluster,
    api: &Api<StorageOSCluster>,
    ctx: &Context,
    inputs: &Inputs,
    plan: &Plan,
) -> Result<StorageOSClusterStatus, Error> {
    let observation = observe(cluster, ctx, inputs, plan).await?;
    let (status, events) = cluster_status::compute(&observation);
    write(cluster, api, ctx, &observation, &status, events).await?;
    Ok(status)
}

/// Reads everything the status of an applied cluster is computed from.
async fn observe(
    cluster: &StorageOSCluster,
    ctx: &Context,
    inputs: &Inputs,
    plan: &Plan,
) -> Result<ClusterObservation, Error> {
    let caches = ready_caches(ctx).await;
    let nodes = nodes(ctx, caches.as_ref()).await?;
    let (selected, ineligible) = eligible_selected(&nodes, plan);
    let pods_ready_on = pods_ready_on(ctx, caches.as_ref(), plan).await?;
    let api_nodes = match settings_push::api_client(ctx, inputs, plan) {
        Ok(client) => client
            .list_node_health()
            .await
            .map_err(settings_push::ClientError::from),
        Err(e) => Err(e),
    };
    let kv = ctx
        .kv_checks
        .check(
            &cluster.uid().unwrap_or_default(),
            &plan.resolved,
            inputs.etcd_tls_secret.as_ref(),
            chrono::Utc::now(),
        )
        .await;
    Ok(ClusterObservation {
        selected,
        ineligible,
        pods_ready_on,
        api_nodes,
        previous: cluster.status.clone().unwrap_or_default(),
        generation: cluster.meta().generation,
        images: plan.images.to_container_images(),
        replaced_images: render::replaced_message(&plan.replaced_go_defaults),
        kv,
        kubernetes_version: ctx.config.kubernetes_version.clone(),
        now: now(),
    })
}

/// Publishes the events, records the metrics and writes the status (when it changed).
async fn write(
    cluster: &StorageOSCluster,
    api: &Api<StorageOSCluster>,
    ctx: &Context,
    observation: &ClusterObservation,
    status: &StorageOSClusterStatus,
    events: Vec<StatusEvent>,
) -> Result<(), Error> {
    let (namespace, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    let metrics = &ctx.cluster_metrics;
    metrics.observe_ineligible(&namespace, &name, observation.ineligible.len());
    let kv = &observation.kv;
    let expiry = kv.cert_not_after.map(|at| at.timestamp());
    metrics.observe_kv_backend(&namespace, &name, kv.reachable, expiry);
    for event in events {
        ctx.event(cluster, event.type_, event.reason, event.message).await;
    }
    write_status(ctx, api, cluster, &observation.previous, status.clone()).await
}

/// Every Node, from the cache, shared (views of what status reads: `node_cache`); else listed
/// as such, a page at a time: at 5,000 nodes one unpaged list of the node pods was a ~50 MB
/// body read whole, and the operator's peak memory (docs/benchmarks.md).
async fn nodes(ctx: &Context, caches: Option<&super::NodeCaches>) -> Result<Vec<Arc<CachedNode>>, Error> {
    Ok(match caches {
        Some(c) => c.nodes.state(),
        // Each in an `Arc`, as the cache holds them.
        None => cache::pick_in_pages(&Api::<ListedNode>::all(ctx.client.clone()), cache::LIST_PAGE, |page| {
            page.into_iter().map(|l| Arc::new(l.view)).collect()
        })
        .await
        .step("list the Nodes")?,
    })
}

/// The nodes `plan` selects that StorageOS can run on, and those it cannot, with why.
fn eligible_selected(nodes: &[Arc<CachedNode>], plan: &Plan) -> (Vec<String>, BTreeMap<String, String>) {
    let chosen = select::selected_nodes(nodes, Some(&plan.resolved.node_selector_terms), &plan.tolerations);
    let ineligible: BTreeMap<String, String> = nodes
        .iter()
        .filter_map(|n| Some((n.name.as_str(), n.ineligible()?)))
        .filter(|(name, _)| chosen.iter().any(|c| c == name))
        .map(|(name, why)| (name.to_string(), why))
        .collect();
    let selected = chosen.into_iter().filter(|n| !ineligible.contains_key(n)).collect();
    (selected, ineligible)
}

/// The nodes whose StorageOS node pod is Ready: from the cache, else listed a page at a time.
async fn pods_ready_on(
    ctx: &Context,
    caches: Option<&super::NodeCaches>,
    plan: &Plan,
) -> Result<BTreeSet<String>, Error> {
    let (target_ns, pod_labels) = (plan.resolved.namespace.as_str(), &plan.node_pod_labels);
    if let Some(c) = caches {
        let pods = c.node_pods.state();
        return Ok(cluster_status::pod_ready_nodes(pods.iter().map(AsRef::as_ref).filter(
            |p| p.namespace == target_ns && pod_labels.iter().all(|(k, v)| p.labels.get(k) == Some(v.as_str())),
        )));
    }
    let pods = Api::<ListedNodePod>::namespaced(ctx.client.clone(), target_ns);
    let selected = ListParams::default().labels(&selector(pod_labels));
    let listed = cache::pick_selected_in_pages(&pods, selected, cache::LIST_PAGE, |page| {
        page.into_iter().map(|l| l.view).collect()
    })
    .await
    .step("list the StorageOS node pods")?;
    Ok(cluster_status::pod_ready_nodes(listed.iter()))
}
