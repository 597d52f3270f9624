//! One reconcile of a StorageOSCluster: observe → build → apply → status.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::context::Context;
use super::error::{Error, Step};
use super::ownership::FINALIZER;
use super::status::{PAUSED, phase};
use super::{finalize, prepare, rollout, settings_push, status_write};
use crate::crd::{PAUSED_BY_ANNOTATION, StorageOSCluster, active_cluster, same_cluster};
use crate::reasons::{self, NAMESPACE_NOT_ALLOWED, Reason};
use crate::render::labels::ACTED_MARK;
use crate::runtime::kube::conditions::{self, now};
use crate::runtime::kube::controller::ReconcileError;
use crate::runtime::kube::finalizer;
use crate::runtime::kube::status;

/// Reconciles one cluster, in a trusted namespace. A failure is also shown on the cluster
/// (Ready=False with the apiserver's message, which names the verb and resource of a forbidden
/// request), never only in the log; the reconcile is then retried with backoff.
pub async fn reconcile(cluster: Arc<StorageOSCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    reported(&cluster, &ctx, reconcile_steps(&cluster, &ctx).await).await
}

/// A cluster in a namespace the operator does not trust, shown `refusal`. Nothing is rendered or
/// read for it. Deleted while it carries the finalizer of a time its namespace was watched, it
/// was the operator's: what the operator made for it (found by its labels, cluster-scoped RBAC
/// and webhooks included) is deleted as for any cluster, so nothing is orphaned; without the
/// finalizer there is nothing to do.
pub async fn untrusted(cluster: Arc<StorageOSCluster>, ctx: Arc<Context>, refusal: String) -> Result<Action, Error> {
    let result = if cluster.metadata.deletion_timestamp.is_some() {
        finalize::finalize(&cluster, true, &ctx).await
    } else {
        not_allowed(&cluster, &ctx, refusal).await
    };
    reported(&cluster, &ctx, result).await
}

/// `result`, its failure first put on the cluster's status.
async fn reported(cluster: &StorageOSCluster, ctx: &Context, result: Result<Action, Error>) -> Result<Action, Error> {
    match &result {
        // The apply step reports its own failures, naming each object; an object that just
        // went away (404) is retried, not reported. One that lost to a newer version of the
        // cluster (409) failed nothing: the runner decides again on the newer object.
        Err(Error::ApplyFailed { .. }) | Ok(_) => {}
        Err(e) if e.lost_to_a_newer_version() => {}
        Err(e @ Error::Kube { .. }) if e.api_code() == Some(404) => {}
        Err(e) => report(cluster, ctx, e).await,
    }
    result
}

/// The condition reason for a failed reconcile step.
fn failure_reason(e: &Error) -> Reason {
    if e.api_code() == Some(403) {
        return reasons::FORBIDDEN;
    }
    match e {
        Error::Apply(_) | Error::ApplyFailed { .. } => reasons::APPLY_FAILED,
        Error::Kube { .. } => reasons::KUBERNETES_ERROR,
        Error::StorageOS { .. } => reasons::STORAGEOS_ERROR,
    }
}

/// Puts a reconcile failure on the cluster's status (best effort: if even that is refused, the
/// log and the reconcile error metric are all that is left).
async fn report(cluster: &StorageOSCluster, ctx: &Context, e: &Error) {
    let api: Api<StorageOSCluster> = Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    // Read back: the failed step may have been preceded by status writes of this reconcile.
    let current = match api.get_opt(&cluster.name_any()).await {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(read) => {
            tracing::warn!(cluster = %cluster.name_any(), error = %read, "cannot read the cluster to report a failure");
            return;
        }
    };
    let message = format!("reconcile failed: {e}");
    if let Err(write) = status_write::not_ready(&current, &api, ctx, failure_reason(e), message).await {
        tracing::warn!(cluster = %cluster.name_any(), error = %write, "cannot report a failure on the cluster status");
    }
}

async fn reconcile_steps(cluster: &StorageOSCluster, ctx: &Context) -> Result<Action, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<StorageOSCluster> = Api::namespaced(ctx.client.clone(), &ns);
    // Only a cluster in a trusted namespace can be (or hold back) the active one, and only those
    // are read: clusters elsewhere never cost a pass anything.
    // Their metadata is all that decides (a cluster whose spec no longer decodes still counts).
    let trusted: Vec<PartialObjectMeta<StorageOSCluster>> = ctx
        .trusted
        .list(&ctx.client)
        .await
        .step("list the StorageOSClusters in the watched namespaces")?;
    let is_active = active_cluster(&trusted).is_some_and(|a| same_cluster(a, cluster));

    if cluster.metadata.deletion_timestamp.is_some() {
        // A cluster on its way out is not one to alert about.
        ctx.cluster_metrics.forget(&ns, &cluster.name_any());
        return finalize::finalize(cluster, is_active, ctx).await;
    }
    if finalizer::add_marked(&api, cluster, FINALIZER, ACTED_MARK, &PatchParams::default())
        .await
        .step("add the finalizer")?
        .is_some()
    {
        // The patch triggers the next reconcile.
        return Ok(Action::await_change());
    }
    if !is_active {
        return pending(cluster, &api, ctx).await;
    }
    if let Some((reason, message)) = paused(cluster) {
        tracing::info!(cluster = %cluster.name_any(), %reason, "paused; not reconciling");
        let previous = cluster.status.clone().unwrap_or_default();
        let mut status = previous.clone();
        let conds = status.conditions.get_or_insert_with(Vec::new);
        conditions::set(conds, PAUSED, true, reason, message, cluster.meta().generation, &now());
        status_write::write_status(ctx, &api, cluster, &previous, status).await?;
        return Ok(Action::await_change());
    }
    deploy(cluster, &api, ctx).await
}

/// Why `cluster` is paused (condition reason and message), or None when it is not.
pub fn paused(cluster: &StorageOSCluster) -> Option<(Reason, String)> {
    if cluster.spec.pause == Some(true) {
        return Some((
            reasons::SPEC_PAUSE,
            "spec.pause is true: changes are not applied and deleted objects are not recreated until it is false"
                .into(),
        ));
    }
    let upgrade = cluster.annotations().get(PAUSED_BY_ANNOTATION)?;
    Some((
        reasons::UPGRADE_IN_PROGRESS,
        format!(
            "StorageOSUpgrade {upgrade} is upgrading the cluster; reconciling resumes when it completes or is deleted"
        ),
    ))
}

/// Marks a cluster in a namespace the operator does not trust: Ready=False with reason
/// `NamespaceNotAllowed` and one Warning event; nothing else is done for it.
async fn not_allowed(cluster: &StorageOSCluster, ctx: &Context, message: String) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let api: Api<StorageOSCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    ctx.cluster_metrics.forget(&namespace, &cluster.name_any());
    let previous = cluster.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    status.phase = Some(phase::PENDING.into());
    let reasons = (NAMESPACE_NOT_ALLOWED, NAMESPACE_NOT_ALLOWED);
    status::set_not_ready(
        (&api, crate::cluster::ownership::FIELD_MANAGER),
        &ctx.kit,
        cluster,
        &previous,
        status,
        reasons,
        message,
    )
    .await
    .step("write the status")?;
    Ok(Action::await_change())
}

/// Marks a cluster that is not the active one, once, and checks back for a takeover.
async fn pending(cluster: &StorageOSCluster, api: &Api<StorageOSCluster>, ctx: &Context) -> Result<Action, Error> {
    // A duplicate waiting its turn runs nothing: no readiness series (the alert would fire).
    let previous = cluster.status.clone().unwrap_or_default();
    if previous.phase.as_deref() != Some(phase::PENDING) {
        ctx.event(
            cluster,
            EventType::Warning,
            reasons::FAILED_CREATION,
            "can't create more than one storageos cluster".into(),
        )
        .await;
    }
    let mut status = previous.clone();
    status.phase = Some(phase::PENDING.into());
    let mut conds = status.conditions.take().unwrap_or_default();
    let now = now();
    let msg = "another StorageOSCluster is active; this one waits until it is deleted";
    conditions::set(
        &mut conds,
        "Ready",
        false,
        reasons::DUPLICATE_CLUSTER,
        msg,
        cluster.meta().generation,
        &now,
    );
    status.conditions = Some(conds);
    status_write::write_status(ctx, api, cluster, &previous, status).await?;
    ctx.cluster_metrics
        .forget(&cluster.namespace().unwrap_or_default(), &cluster.name_any());
    Ok(Action::requeue(Duration::from_secs(5)))
}

/// Applies everything the cluster wants, prunes what it no longer wants, updates status:
/// prepare (observe → plan) → roll out (apply → prune → Go leftovers) → status → push. A
/// refusal on the way (a namespace, a missing Secret, an invalid spec, an object not applied)
/// is written once, as Ready=False, and changes nothing else.
async fn deploy(cluster: &StorageOSCluster, api: &Api<StorageOSCluster>, ctx: &Context) -> Result<Action, Error> {
    let (inputs, plan) = match prepare::prepare(cluster, ctx).await? {
        Ok(prepared) => prepared,
        Err(refusal) => return status_write::refuse(cluster, api, ctx, refusal).await,
    };
    if let Err(refusal) = rollout::roll_out(cluster, ctx, &plan).await? {
        return status_write::refuse(cluster, api, ctx, refusal).await;
    }
    let status = status_write::update_status(cluster, api, ctx, &inputs, &plan).await?;
    if status.phase.as_deref() != Some(phase::RUNNING) {
        return Ok(Action::requeue(Duration::from_secs(10)));
    }
    settings_push::push(ctx, &inputs, &plan).await?;
    Ok(Action::requeue(Duration::from_secs(60)))
}
