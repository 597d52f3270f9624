//! What one upgrade reconcile reads: the upgrade's cluster (the one it recorded, or the active
//! one when starting), its image puller, the node pods, the applications it scaled, and the
//! drains and StorageOS state that may hold its start. Reads only; [`super::reconcile`] decides
//! and acts.

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use kube::core::{DeserializeGuard, Selector};
use kube::{Resource, ResourceExt};

use super::apps::{self, LiveApp, Volumes};
use super::nodes::{self, NODE_DAEMONSET, NodeView};
use super::plan::{self, ClusterView, Observed};
use super::pull::{self, PullerView};
use super::read;
use super::{Context, Error};
use crate::crd::PAUSED_BY_ANNOTATION;
use crate::crd::{ScaledApp, StorageOSCluster, StorageOSUpgrade, UpgradePhase};
use crate::render;
use crate::runtime::kube::apply::ObjectKey;
use crate::runtime::kube::conditions::now;

/// `namespace/name` of an upgrade (events, logs, queue).
pub(super) fn key(u: &StorageOSUpgrade) -> String {
    format!("{}/{}", u.namespace().unwrap_or_default(), u.name_any())
}

fn cluster_view(c: &StorageOSCluster) -> ClusterView {
    ClusterView {
        namespace: c.namespace().unwrap_or_default(),
        name: c.name_any(),
        paused_by: c.annotations().get(PAUSED_BY_ANNOTATION).cloned(),
        node_image: c.spec.images.as_ref().and_then(|i| i.node_container.clone()),
        objects_namespace: render::resolve(&c.spec).namespace,
        deleting: c.meta().deletion_timestamp.is_some(),
    }
}

/// `namespace/name` of the cluster recorded in the upgrade's status when that is in another
/// namespace than the upgrade: only a forged status says so, and it is never acted on.
fn recorded_elsewhere(up: &StorageOSUpgrade) -> Option<String> {
    let c = up.status.as_ref()?.cluster.as_ref()?;
    (Some(c.namespace.as_str()) != up.namespace().as_deref()).then(|| format!("{}/{}", c.namespace, c.name))
}

/// The cluster recorded in the upgrade's status, as it is now; None when the record names
/// another namespace than the upgrade's ([`recorded_elsewhere`]).
pub(super) async fn recorded_cluster(up: &StorageOSUpgrade, ctx: &Context) -> Result<Option<StorageOSCluster>, Error> {
    let Some(c) = up.status.as_ref().and_then(|s| s.cluster.as_ref()) else {
        return Ok(None);
    };
    if recorded_elsewhere(up).is_some() {
        return Ok(None);
    }
    Ok(Api::<StorageOSCluster>::namespaced(ctx.client.clone(), &c.namespace)
        .get_opt(&c.name)
        .await?)
}

/// Reads what the decision at `phase` needs, and nothing more.
pub(super) async fn observe(
    up: &StorageOSUpgrade,
    phase: UpgradePhase,
    recorded: &[ScaledApp],
    ctx: &Context,
) -> Result<Observed, Error> {
    use UpgradePhase::*;
    let status = up.status.clone().unwrap_or_default();
    let mut o = Observed {
        force: up.spec.force == Some(true),
        timeout: up.spec.timeout.clone(),
        previous_image: status.previous_image.clone(),
        rolling_back: status.rollback.is_some(),
        in_phase: status.phase_since.as_ref().map(|since| {
            let elapsed = now().0.duration_since(since.0);
            Duration::try_from(elapsed).unwrap_or(Duration::ZERO)
        }),
        recorded_cluster: up
            .status
            .as_ref()
            .and_then(|s| s.cluster.as_ref())
            .map(|c| format!("{}/{}", c.namespace, c.name)),
        other_namespace: recorded_elsewhere(up),
        ..Default::default()
    };
    if o.other_namespace.is_some() {
        return Ok(o);
    }
    match phase {
        Pending | Refused => observe_start(up, &mut o, ctx).await?,
        PullingImage | Pausing | UpgradingNodes | RollingBack => {
            let cluster = recorded_cluster(up, ctx).await?;
            o.cluster = cluster.as_ref().map(cluster_view);
            if phase == UpgradingNodes
                && let Some(c) = &cluster
            {
                o.storageos = read::storageos(c, ctx).await;
            }
        }
        _ => {}
    }
    if matches!(phase, PullingImage | Pausing) {
        o.puller = observe_puller(up, ctx).await?;
    }
    if matches!(phase, Pending | Refused | PullingImage | UpgradingNodes | RollingBack)
        && let Some(c) = &o.cluster
    {
        o.nodes = observe_nodes(&c.objects_namespace, ctx).await?;
    }
    if phase == ScalingDown {
        o.candidates = candidates(ctx).await?;
    }
    if matches!(phase, ScalingDown | ScalingUp) {
        o.apps = observe_apps(recorded, phase == ScalingDown, ctx).await?;
    }
    Ok(o)
}

/// What deciding whether the upgrade may start reads: the active cluster, the upgrades queued
/// before it, and (when it is its turn) blocked drains and StorageOS.
async fn observe_start(up: &StorageOSUpgrade, o: &mut Observed, ctx: &Context) -> Result<(), Error> {
    // Only the cluster in the upgrade's own namespace, and only upgrades there queue:
    // whoever may create an upgrade elsewhere can neither take over nor block it.
    let ns = up.namespace().unwrap_or_default();
    // A cluster whose spec no longer decodes still counts for which one is active; it cannot be
    // upgraded until fixed (its Undecodable event says how).
    let clusters: Vec<DeserializeGuard<StorageOSCluster>> = ctx.trusted.list(&ctx.client).await?;
    let listed = crate::crd::active_cluster(&clusters);
    o.other_namespace = listed
        .filter(|c| c.namespace().as_deref() != Some(ns.as_str()))
        .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()));
    let here = Api::<StorageOSUpgrade>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .items;
    o.blocked_by = plan::first_in_line(&here)
        .filter(|first| first.uid() != up.uid())
        .map(key);
    if o.blocked_by.is_none() && o.other_namespace.is_none() {
        let active = listed.and_then(|c| c.0.as_ref().ok());
        o.cluster = active.map(cluster_view);
        if let Some(c) = active.filter(|c| c.meta().deletion_timestamp.is_none()) {
            let objects = render::resolve(&c.spec).namespace;
            o.drain_blocked = read::blocked_drains(&objects, ctx).await?;
            o.storageos = read::storageos(c, ctx).await;
        }
    }
    Ok(())
}

async fn observe_puller(up: &StorageOSUpgrade, ctx: &Context) -> Result<PullerView, Error> {
    let ns = up.namespace().unwrap_or_default();
    let ds = Api::<DaemonSet>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&pull::daemonset_name(&up.name_any()))
        .await?;
    let pods = match &ds {
        Some(_) => {
            let selector: Selector = pull::selector(&up.name_any()).into_iter().collect();
            Api::<Pod>::namespaced(ctx.client.clone(), &ns)
                .list(&ListParams::default().labels_from(&selector))
                .await?
                .items
        }
        None => Vec::new(),
    };
    Ok(pull::view(ds.as_ref(), &pods))
}

async fn observe_nodes(namespace: &str, ctx: &Context) -> Result<Option<NodeView>, Error> {
    let Some(ds) = Api::<DaemonSet>::namespaced(ctx.client.clone(), namespace)
        .get_opt(NODE_DAEMONSET)
        .await?
    else {
        return Ok(None);
    };
    let selector = ds
        .spec
        .as_ref()
        .and_then(|s| Selector::try_from(s.selector.clone()).ok())
        .filter(|s| !s.selects_all());
    let pods = match selector {
        Some(selector) => {
            Api::<Pod>::namespaced(ctx.client.clone(), namespace)
                .list(&ListParams::default().labels_from(&selector))
                .await?
                .items
        }
        None => Vec::new(),
    };
    Ok(Some(nodes::view(&ds, &pods)))
}

/// Every running Deployment and StatefulSet that uses StorageOS volumes, in all namespaces.
/// Every list goes a page at a time; of the PVs only StorageOS ones are kept, and of the
/// Deployments and StatefulSets only those that qualify (this runs at every ScalingDown poll).
pub(super) async fn candidates(ctx: &Context) -> Result<Vec<ScaledApp>, Error> {
    use crate::runtime::kube::cache::{LIST_PAGE, pick_in_pages};
    use crate::storageos::kube::is_storageos_volume;

    let c = &ctx.client;
    let pvcs: Vec<PersistentVolumeClaim> = pick_in_pages(&Api::all(c.clone()), LIST_PAGE, |p| p).await?;
    let pvs: Vec<PersistentVolume> = pick_in_pages(&Api::all(c.clone()), LIST_PAGE, |p| {
        p.into_iter().filter(is_storageos_volume).collect()
    })
    .await?;
    let classes: Vec<StorageClass> = Api::all(c.clone()).list(&ListParams::default()).await?.items;
    let volumes = Volumes::new(&pvcs, &pvs, &classes);
    let mut found = pick_in_pages(&Api::all(c.clone()), LIST_PAGE, |deployments| {
        apps::qualifying(&deployments, &[], &volumes)
    })
    .await?;
    found.extend(
        pick_in_pages(&Api::all(c.clone()), LIST_PAGE, |statefulsets| {
            apps::qualifying(&[], &statefulsets, &volumes)
        })
        .await?,
    );
    found.sort_by(|a, b| (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name)));
    Ok(found)
}

async fn observe_apps(
    recorded: &[ScaledApp],
    count_pods: bool,
    ctx: &Context,
) -> Result<Vec<(ScaledApp, Option<LiveApp>)>, Error> {
    let mut out = Vec::with_capacity(recorded.len());
    for app in recorded {
        out.push((app.clone(), apps::observe(&ctx.client, app, count_pods).await?));
    }
    Ok(out)
}

pub(super) fn puller_key(up: &StorageOSUpgrade) -> ObjectKey {
    ObjectKey {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        namespace: up.namespace(),
        name: pull::daemonset_name(&up.name_any()),
    }
}
