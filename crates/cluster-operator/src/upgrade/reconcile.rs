//! One reconcile of a StorageOSUpgrade: read it fresh, observe → decide ([`plan::next`]) → take
//! that one step (record or act) and requeue at once, or wait. Deletion runs [`finalize`].

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::apps;
use super::nodes::{NODE_CONTAINER, NODE_DAEMONSET};
use super::observe::{candidates, key, observe, puller_key, recorded_cluster};
use super::plan::{self, Act, Observed, Step};
use super::preview;
use super::pull;
use super::status;
use super::{Context, Error, FINALIZER, POLL, patch_params};
use crate::crd::PAUSED_BY_ANNOTATION;
use crate::crd::{StorageOSCluster, StorageOSUpgrade, StorageOSUpgradeStatus, UpgradeCluster, UpgradePhase};
use crate::reasons::{self, NAMESPACE_NOT_ALLOWED, Reason};
use crate::render::labels::ACTED_MARK;
use crate::runtime::kube::conditions::{self, now};
use crate::runtime::kube::finalizer;

/// How often an upgrade that waits for another one checks again (watch events come first).
const BLOCKED_RECHECK: Duration = Duration::from_secs(30);
/// How often an upgrade that may not start yet (volumes syncing, a drain blocked) looks again.
const HOLD_RECHECK: Duration = Duration::from_secs(5);

/// Reconciles one upgrade, in a trusted namespace: observe → decide ([`plan::next`]) → show
/// the decision ([`report`]) or take that one step, and requeue at once.
pub async fn reconcile(cached: Arc<StorageOSUpgrade>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some((up, api)) = current(&cached, &ctx).await? else {
        return Ok(Action::await_change());
    };
    if up.meta().deletion_timestamp.is_some() {
        return finalize(&up, &api, &ctx).await;
    }
    let up = match finalizer::add_marked(&api, &up, FINALIZER, ACTED_MARK, &patch_params()).await? {
        Some(written) => written,
        None => up,
    };
    let pass = Pass::new(&up, api, &ctx);
    let recorded = pass.previous.scaled_apps.clone().unwrap_or_default();
    let observed = observe(&up, pass.phase, &recorded, &ctx).await?;
    let step = plan::next(&up.name_any(), &pass.image, pass.phase, &recorded, &observed);
    if up.spec.dry_run == Some(true) && matches!(pass.phase, UpgradePhase::Pending | UpgradePhase::Refused) {
        return pass.dry_run(&step, &observed).await;
    }
    if let Some(report) = report(&step, &pass.previous, pass.generation, &pass.now) {
        return pass.show(report).await;
    }
    if before_step(&ctx, &pass.api, &up, &describe(&step)).await? {
        pass.take(step, &observed).await?;
    }
    // One step per reconcile, then back into the queue at once: another upgrade's reconcile
    // (one saying it must wait) is not held up for a whole upgrade.
    Ok(Action::requeue(Duration::ZERO))
}

/// An upgrade in a namespace the operator does not trust, shown `refusal` ([`not_allowed`]).
pub async fn untrusted(cached: Arc<StorageOSUpgrade>, ctx: Arc<Context>, refusal: String) -> Result<Action, Error> {
    let Some((up, api)) = current(&cached, &ctx).await? else {
        return Ok(Action::await_change());
    };
    not_allowed(&up, &api, &ctx, refusal).await
}

/// The upgrade as it is now, and its API; None when there is nothing to do. Completed and
/// RolledBack are final: nothing to read, nothing to write (unless it is being deleted).
async fn current(
    cached: &StorageOSUpgrade,
    ctx: &Context,
) -> Result<Option<(StorageOSUpgrade, Api<StorageOSUpgrade>)>, Error> {
    if cached.meta().deletion_timestamp.is_none()
        && matches!(
            plan::phase_of(cached),
            UpgradePhase::Completed | UpgradePhase::RolledBack
        )
    {
        return Ok(None);
    }
    let api: Api<StorageOSUpgrade> = Api::namespaced(ctx.client.clone(), &cached.namespace().unwrap_or_default());
    // The cache can lag behind this controller's own status writes, and a stale phase would
    // repeat a finished one (scale an application down again): act on the upgrade as it is now.
    Ok(api.get_opt(&cached.name_any()).await?.map(|up| (up, api)))
}

/// How a step that changes nothing but the upgrade's status is shown ([`report`]).
#[derive(Debug, PartialEq)]
pub(crate) struct Report {
    /// The status to write.
    pub status: StorageOSUpgradeStatus,
    /// The event to send, once: when the status first says so.
    pub event: Option<(EventType, Reason, String)>,
    /// What to log, at which level.
    pub log: Option<(tracing::Level, String)>,
    /// What the pass returns: a problem the user must fix is a reconcile error.
    pub then: Result<Action, plan::Problem>,
}

impl Report {
    /// A report without an event.
    fn quiet(
        status: StorageOSUpgradeStatus,
        log: Option<(tracing::Level, String)>,
        then: Result<Action, plan::Problem>,
    ) -> Self {
        let event = None;
        Self {
            status,
            event,
            log,
            then,
        }
    }

    /// A report that warns (and logs) only when `news`: the status says so for the first time.
    fn warning(
        status: StorageOSUpgradeStatus,
        news: bool,
        (reason, message): (Reason, String),
        log: Option<(tracing::Level, String)>,
        then: Result<Action, plan::Problem>,
    ) -> Self {
        let log = log.filter(|_| news);
        let event = news.then_some((EventType::Warning, reason, message));
        Self {
            status,
            event,
            log,
            then,
        }
    }
}

/// How `step` is shown, when it takes nothing (pure); None for a step to take ([`describe`]).
pub(crate) fn report(
    step: &Step,
    previous: &StorageOSUpgradeStatus,
    generation: Option<i64>,
    now: &Time,
) -> Option<Report> {
    use tracing::Level;
    let report = match step {
        Step::Idle => Report::quiet(previous.clone(), None, Ok(Action::await_change())),
        Step::Wait(message) => {
            let status = status::waiting(previous, message, generation, now);
            Report::quiet(status, Some((Level::DEBUG, message.clone())), Ok(Action::requeue(POLL)))
        }
        Step::Blocked(first) => {
            let (status, message, news) = status::blocked(previous, first, generation, now);
            let then = Ok(Action::requeue(BLOCKED_RECHECK));
            Report::warning(status, news, (reasons::FAILED_CREATION, message), None, then)
        }
        Step::Problem(problem) => {
            let message = problem.to_string();
            let (status, news) = status::degraded(previous, problem.reason(), &message, generation, now);
            Report::warning(status, news, (problem.reason(), message), None, Err(problem.clone()))
        }
        // Nothing is touched; StorageOS is read again after a while (no watch says when a
        // volume finished syncing).
        Step::Hold(hold) => {
            let (reason, message) = (hold.reason(), hold.to_string());
            let (status, news) = status::held(previous, reason, &message, generation, now);
            let log = Some((Level::INFO, format!("waiting to start: {message}")));
            Report::warning(status, news, (reason, message), log, Ok(Action::requeue(HOLD_RECHECK)))
        }
        // Nothing was touched; a change of the spec (spec.force) brings it back here.
        Step::Refuse(refusal) => {
            let (reason, message) = (refusal.reason(), refusal.to_string());
            let (status, news) = status::refused(previous, reason, &message, generation, now);
            let log = Some((Level::WARN, format!("refused: {message}")));
            Report::warning(status, news, (reason, message), log, Ok(Action::await_change()))
        }
        Step::Advance(_) | Step::RollBack(_) | Step::Record(_) | Step::Act(_) => return None,
    };
    Some(report)
}

/// What taking `step` is, as logged before it is taken.
pub(crate) fn describe(step: &Step) -> String {
    match step {
        Step::Advance(to) => format!("entering phase {to:?}"),
        Step::RollBack(cause) => format!("rolling back: {cause}"),
        Step::Record(apps) => {
            let names: Vec<String> = apps.iter().map(apps::describe).collect();
            format!("recording {}", names.join(", "))
        }
        Step::Act(act) => act.to_string(),
        other => format!("{other:?}"),
    }
}

/// The status on entering phase `to` from `phase`: entering PullingImage from Pending or
/// Refused records the cluster and what a rollback restores, the image the nodes run (pure).
pub(crate) fn advanced(
    previous: &StorageOSUpgradeStatus,
    phase: UpgradePhase,
    to: UpgradePhase,
    observed: &Observed,
    image: &str,
    generation: Option<i64>,
    now: &Time,
) -> StorageOSUpgradeStatus {
    let started = matches!(phase, UpgradePhase::Pending | UpgradePhase::Refused)
        .then(|| {
            observed.cluster.as_ref().map(|c| UpgradeCluster {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
            })
        })
        .flatten();
    let starting = started.is_some();
    let mut next = status::advanced(previous, to, started, image, generation, now);
    if starting {
        next.previous_image = observed.nodes.as_ref().and_then(|n| n.template_image.clone());
    }
    next
}

/// The events on entering phase `to` with status `next` (pure).
pub(crate) fn entering_events(
    previous: &StorageOSUpgradeStatus,
    next: &StorageOSUpgradeStatus,
    to: UpgradePhase,
    image: &str,
) -> Vec<(EventType, Reason, String)> {
    let cluster_name = next.cluster.as_ref().map(|c| c.name.clone()).unwrap_or_default();
    let mut events: Vec<(EventType, Reason, String)> = status::events_on_entering(to, &cluster_name, image)
        .into_iter()
        .map(|(reason, note)| (EventType::Normal, reason, note))
        .collect();
    if to == UpgradePhase::RolledBack {
        let cause = next.rollback.as_ref().map(|r| r.cause.clone()).unwrap_or_default();
        let note = format!(
            "rolled back to {}: {cause}; delete this upgrade to leave maintenance",
            previous.previous_image.clone().unwrap_or_default()
        );
        events.push((EventType::Warning, reasons::ROLLED_BACK, note));
    }
    events
}

/// One pass over an upgrade as it is now: what showing or taking its step reads.
struct Pass<'a> {
    up: &'a StorageOSUpgrade,
    api: Api<StorageOSUpgrade>,
    ctx: &'a Context,
    phase: UpgradePhase,
    image: String,
    previous: StorageOSUpgradeStatus,
    generation: Option<i64>,
    now: Time,
}

impl<'a> Pass<'a> {
    fn new(up: &'a StorageOSUpgrade, api: Api<StorageOSUpgrade>, ctx: &'a Context) -> Self {
        Self {
            up,
            api,
            ctx,
            phase: plan::phase_of(up),
            image: up.spec.new_image.clone(),
            previous: up.status.clone().unwrap_or_default(),
            generation: up.meta().generation,
            now: now(),
        }
    }

    async fn event(&self, (type_, reason, note): (EventType, Reason, String)) {
        self.ctx.kit.event(self.up, type_, reason, note).await;
    }

    /// Only the preview: the same decision, nothing touched.
    async fn dry_run(&self, step: &Step, observed: &Observed) -> Result<Action, Error> {
        let preview = preview::build(step, &self.image, observed, candidates(self.ctx).await?);
        let message = preview::summary(&preview);
        let (next, news) = status::dry_run(&self.previous, preview, self.generation, &self.now);
        write_status(&self.api, self.up, &self.previous, next).await?;
        if news {
            self.event((EventType::Normal, reasons::DRY_RUN, message)).await;
        }
        Ok(Action::requeue(HOLD_RECHECK))
    }

    /// Writes the report's status, then logs and sends its event.
    async fn show(&self, report: Report) -> Result<Action, Error> {
        write_status(&self.api, self.up, &self.previous, report.status).await?;
        match report.log {
            Some((tracing::Level::DEBUG, m)) => tracing::debug!(upgrade = %key(self.up), "{m}"),
            Some((tracing::Level::WARN, m)) => tracing::warn!(upgrade = %key(self.up), "{m}"),
            Some((_, m)) => tracing::info!(upgrade = %key(self.up), "{m}"),
            None => {}
        }
        if let Some(event) = report.event {
            self.event(event).await;
        }
        report.then.map_err(Error::Problem)
    }

    /// Takes `step` (one [`report`] does not show).
    async fn take(&self, step: Step, observed: &Observed) -> Result<(), Error> {
        match step {
            Step::Advance(to) => {
                let next = advanced(
                    &self.previous,
                    self.phase,
                    to,
                    observed,
                    &self.image,
                    self.generation,
                    &self.now,
                );
                let next = write_status(&self.api, self.up, &self.previous, next).await?;
                for event in entering_events(&self.previous, &next, to, &self.image) {
                    self.event(event).await;
                }
            }
            Step::RollBack(cause) => {
                let back_to = self.previous.previous_image.clone().unwrap_or_default();
                let next = status::rolling_back(&self.previous, &cause, &back_to, self.generation, &self.now);
                write_status(&self.api, self.up, &self.previous, next).await?;
                tracing::warn!(upgrade = %key(self.up), "rolling back to {back_to}: {cause}");
                let note = format!("rolling back to {back_to}: {cause}");
                self.event((EventType::Warning, reasons::ROLLING_BACK, note)).await;
            }
            Step::Record(apps) => {
                write_status(
                    &self.api,
                    self.up,
                    &self.previous,
                    status::recorded(&self.previous, &apps),
                )
                .await?;
            }
            Step::Act(act) => execute(self.up, observed, &act, self.ctx).await?,
            Step::Idle | Step::Wait(_) | Step::Blocked(_) | Step::Problem(_) | Step::Refuse(_) | Step::Hold(_) => {}
        }
        Ok(())
    }
}

/// What `up` would do if it started now, read as its dry run reads it (`storageos-operator
/// plan -f upgrade.yaml`): the same observations and decision, nothing written.
pub async fn preview(up: &StorageOSUpgrade, ctx: &Context) -> Result<crate::crd::UpgradePreview, Error> {
    let image = up.spec.new_image.clone();
    let observed = observe(up, UpgradePhase::Pending, &[], ctx).await?;
    let step = plan::next(&up.name_any(), &image, UpgradePhase::Pending, &[], &observed);
    Ok(preview::build(&step, &image, &observed, candidates(ctx).await?))
}

/// An upgrade in a namespace the operator does not trust: Ready=False with reason
/// `NamespaceNotAllowed` and one Warning event, nothing read or changed. When it is deleted, a
/// finalizer it carries (from a time its namespace was trusted) is released once its pause and
/// puller are undone, without acting on its status, which nothing vouches for.
async fn not_allowed(
    up: &StorageOSUpgrade,
    api: &Api<StorageOSUpgrade>,
    ctx: &Context,
    message: String,
) -> Result<Action, Error> {
    let namespace = up.namespace().unwrap_or_default();
    if up.meta().deletion_timestamp.is_some() {
        if finalizer::has(up, FINALIZER) {
            // Left mid-flight when its namespace stopped being watched: what it did to the
            // cluster beside it is undone (the pause annotation, so the cluster is reconciled
            // again once watched, and its puller), never what its status claims to have scaled.
            let clusters = Api::<StorageOSCluster>::namespaced(ctx.client.clone(), &namespace)
                .list_metadata(&kube::api::ListParams::default())
                .await?;
            for cluster in &clusters.items {
                unpause_if_paused_by(ctx, up, cluster).await?;
            }
            ctx.applier.delete_ours(&puller_key(up)).await?;
            ctx.applier.forget(&puller_key(up));
            finalizer::remove(api, up, FINALIZER, &patch_params()).await?;
        }
        return Ok(Action::await_change());
    }
    let previous = up.status.clone().unwrap_or_default();
    let mut next = previous.clone();
    let mut conds = next.conditions.take().unwrap_or_default();
    let news = conditions::set_not_ready(&mut conds, NAMESPACE_NOT_ALLOWED, &message, up.meta().generation);
    next.conditions = Some(conds);
    write_status(api, up, &previous, next).await?;
    if news {
        ctx.kit
            .event(up, EventType::Warning, NAMESPACE_NOT_ALLOWED, message)
            .await;
    }
    Ok(Action::await_change())
}

/// Logs the step about to be taken, after the configured step delay (demos and tests). Returns
/// false when the upgrade changed (or was deleted) during the delay: the step, decided on what
/// is now stale, is not taken, and the next one is decided afresh.
async fn before_step(
    ctx: &Context,
    api: &Api<StorageOSUpgrade>,
    up: &StorageOSUpgrade,
    step: &str,
) -> Result<bool, Error> {
    if !ctx.step_delay.is_zero() {
        tokio::time::sleep(ctx.step_delay).await;
        let now = api.get_metadata_opt(&up.name_any()).await?;
        if now.is_none_or(|m| m.metadata.resource_version != up.metadata.resource_version) {
            return Ok(false);
        }
    }
    tracing::info!(upgrade = %key(up), "{step}");
    Ok(true)
}

/// Writes `next` when it differs from `previous`; returns it.
async fn write_status(
    api: &Api<StorageOSUpgrade>,
    up: &StorageOSUpgrade,
    previous: &StorageOSUpgradeStatus,
    next: StorageOSUpgradeStatus,
) -> Result<StorageOSUpgradeStatus, Error> {
    // Only over the status this step was decided on: a writer acting on a stale view (an
    // operator that lost its lease mid-step) gets a conflict instead of moving the phase.
    crate::runtime::kube::status::write_if_changed(
        api,
        up,
        (previous, &next),
        crate::cluster::ownership::FIELD_MANAGER,
    )
    .await?;
    Ok(next)
}

/// Sets (`Some`) or removes (`None`) the pause annotation on the cluster. This annotation is
/// the maintenance signal: the cluster reconciler skips a cluster that carries it, and the
/// api-manager suspends fencing and node delete while any cluster carries it. The StorageOS v2
/// API has no maintenance endpoint (only the legacy v1 API had one), so none is called.
/// Only metadata is patched; the user's `spec.pause` is never written.
async fn set_paused_by(
    ctx: &Context,
    cluster: &UpgradeCluster,
    upgrade: Option<&str>,
    resource_version: Option<String>,
) -> Result<(), Error> {
    let mut patch = json!({"metadata": {"annotations": {PAUSED_BY_ANNOTATION: upgrade}}});
    if let Some(rv) = resource_version {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    Api::<StorageOSCluster>::namespaced(ctx.client.clone(), &cluster.namespace)
        .patch(&cluster.name, &patch_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Removes the pause annotation from `cluster` when it names `up` (and nothing otherwise).
async fn unpause_if_paused_by<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    up: &StorageOSUpgrade,
    cluster: &K,
) -> Result<(), Error> {
    if cluster.annotations().get(PAUSED_BY_ANNOTATION) != Some(&up.name_any()) {
        return Ok(());
    }
    let target = UpgradeCluster {
        namespace: cluster.namespace().unwrap_or_default(),
        name: cluster.name_any(),
    };
    tracing::info!(upgrade = %key(up), cluster = %cluster.name_any(), "un-pausing the cluster");
    set_paused_by(ctx, &target, None, cluster.resource_version()).await
}

/// Takes one action.
async fn execute(up: &StorageOSUpgrade, o: &Observed, act: &Act, ctx: &Context) -> Result<(), Error> {
    let client = &ctx.client;
    let cluster = up.status.as_ref().and_then(|s| s.cluster.clone()).unwrap_or_default();
    match act {
        Act::ApplyPuller => {
            let template = o.nodes.as_ref().map(|n| n.template.clone()).unwrap_or_default();
            let desired = pull::build(up, &template);
            let value = serde_json::to_value(&desired).map_err(|_| {
                crate::runtime::kube::apply::Error::from(crate::runtime::kube::object::Malformed("a DaemonSet"))
            })?;
            let owner = up.controller_owner_ref(&());
            let ns = up.namespace().unwrap_or_default();
            ctx.applier
                .apply(&value, owner.as_ref().map(|o| (o, ns.as_str())))
                .await?;
        }
        Act::DeletePuller => {
            ctx.applier.delete_ours(&puller_key(up)).await?;
        }
        Act::Pause => set_paused_by(ctx, &cluster, Some(&up.name_any()), None).await?,
        Act::ScaleDown(app) => apps::scale_down(client, app).await?,
        Act::ScaleUp(app) => apps::restore(client, app).await?,
        Act::SetClusterImage(image) => {
            // The one write to a user's spec: the image the user asked for (or, rolling back,
            // the one the nodes ran before), so the cluster reconciler keeps the nodes on it
            // once un-paused.
            let patch = json!({"spec": {"images": {"nodeContainer": image}}});
            Api::<StorageOSCluster>::namespaced(client.clone(), &cluster.namespace)
                .patch(&cluster.name, &patch_params(), &Patch::Merge(&patch))
                .await?;
        }
        Act::SetNodeImage(image) => {
            let ns = o.nodes.as_ref().map(|n| n.namespace.clone()).unwrap_or_default();
            let patch =
                json!({"spec": {"template": {"spec": {"containers": [{"name": NODE_CONTAINER, "image": image}]}}}});
            Api::<DaemonSet>::namespaced(client.clone(), &ns)
                .patch(NODE_DAEMONSET, &patch_params(), &Patch::Strategic(&patch))
                .await?;
        }
        Act::RestartNodePods(pods) => {
            let ns = o.nodes.as_ref().map(|n| n.namespace.clone()).unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            for pod in pods {
                match api.delete(pod, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(())
}

/// Deleting an upgrade: restore every application it still has scaled down (unless it
/// completed, when they are restored already and may have been changed since), un-pause the
/// cluster if this upgrade paused it, remove the puller, then release the finalizer. All of it
/// is read from the API, so it works after an operator restart.
async fn finalize(up: &StorageOSUpgrade, api: &Api<StorageOSUpgrade>, ctx: &Context) -> Result<Action, Error> {
    if !finalizer::has(up, FINALIZER) {
        return Ok(Action::await_change());
    }
    let phase = plan::phase_of(up);
    let status = up.status.clone().unwrap_or_default();
    // Once Completed or RolledBack they were restored already, and may have been changed since.
    if !matches!(phase, UpgradePhase::Completed | UpgradePhase::RolledBack) {
        for app in status.scaled_apps.iter().flatten() {
            let live = apps::observe(&ctx.client, app, false).await?;
            if plan::needs_restore(live.as_ref()) {
                let app = plan::restored(app, live.as_ref());
                tracing::info!(upgrade = %key(up), app = %apps::describe(&app), replicas = app.replicas, "restoring");
                apps::restore(&ctx.client, &app).await?;
            }
        }
    }
    // Only an upgrade that got as far as pausing can have set the annotation.
    if phase >= UpgradePhase::Pausing
        && let Some(cluster) = recorded_cluster(up, ctx).await?
    {
        unpause_if_paused_by(ctx, up, &cluster).await?;
    }
    ctx.applier.delete_ours(&puller_key(up)).await?;
    ctx.applier.forget(&puller_key(up));
    finalizer::remove(api, up, FINALIZER, &patch_params()).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
