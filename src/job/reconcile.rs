//! One reconcile of a Job: observe (DaemonSet, pods, new log lines) → build the DaemonSet →
//! apply → status.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::daemonset::{self, JOB_LABEL};
use super::logs::{self, LogCursor};
use super::status::{self, PodView};
use super::{Context, Error, JobKey, POLL};
use crate::crd::{Job, JobStatus};
use crate::reasons::{self, NAMESPACE_NOT_ALLOWED, Reason};
use crate::render::labels::ACTED_MARK;
use crate::runtime::kube::conditions::{self, now};
use crate::runtime::kube::controller::is_controlled_by;
use crate::runtime::kube::finalizer;

/// Note of the event sent once when a Job completes (the Go operator's; reason `JobCompleted`).
pub const COMPLETED_NOTE: &str = "Job Completed. Safe to delete.";
/// Logs read at the same time, so a Job on many nodes is checked quickly but gently.
const PARALLEL_LOG_READS: usize = 8;

/// Reconciles one Job.
pub async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action, Error> {
    if job.meta().deletion_timestamp.is_some() {
        // The garbage collector removes the DaemonSet and its pods.
        return Ok(Action::await_change());
    }
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let key: JobKey = (ns.clone(), name.clone());
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);

    // Observe the DaemonSet before applying: a foreign one must not be taken over.
    let daemonsets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &ns);
    let ds_name = daemonset::daemonset_name(&name);
    let live = daemonsets.get_opt(&ds_name).await?;

    if !ctx.trusted.allows(&ns) {
        // Creating a Job runs an image on every node with a host directory mounted: only in a
        // namespace the operator trusts. A DaemonSet made while the namespace was trusted goes.
        if let Some(live) = live.as_ref().filter(|l| is_controlled_by(*l, job.meta().uid.as_ref())) {
            tracing::warn!(job = %name, daemonset = %ds_name, "removing the DaemonSet of a Job in a namespace that is not trusted");
            delete_daemonset(&daemonsets, live).await?;
        }
        let msg = ctx.trusted.refusal("Job", &ns);
        not_ready(&job, &jobs, &ctx, NAMESPACE_NOT_ALLOWED, msg).await?;
        return Ok(Action::await_change());
    }

    let Some(mount) = ctx.host_paths.mount(&job.spec.host_path) else {
        // Admission allows the default list; the operator's own list may be narrower. A
        // DaemonSet made under a wider list is removed: it mounts what is no longer allowed.
        if let Some(live) = live.as_ref().filter(|l| is_controlled_by(*l, job.meta().uid.as_ref())) {
            tracing::warn!(job = %name, daemonset = %ds_name, "removing the DaemonSet of a Job whose hostPath is not allowed");
            delete_daemonset(&daemonsets, live).await?;
        }
        let msg = ctx.host_paths.refusal(&job.spec.host_path);
        not_ready(&job, &jobs, &ctx, reasons::HOST_PATH_NOT_ALLOWED, msg).await?;
        return Ok(Action::await_change());
    };

    if mount.sub_path.is_some() && refused_before(&job) {
        // A kubelet found this path resolving outside the allowed directory: never again
        // until the Job changes.
        if let Some(live) = live.as_ref().filter(|l| is_controlled_by(*l, job.meta().uid.as_ref())) {
            delete_daemonset(&daemonsets, live).await?;
        }
        return Ok(Action::await_change());
    }

    let desired = match daemonset::build_mounting(&job, &mount) {
        Ok(ds) => ds,
        Err(e @ Error::InvalidLabelSelector(_)) => {
            not_ready(&job, &jobs, &ctx, reasons::INVALID_SPEC, e.to_string()).await?;
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e),
    };

    if let Some(live) = &live {
        if !is_controlled_by(live, job.meta().uid.as_ref()) {
            let msg = format!(
                "DaemonSet {ns}/{ds_name} exists and is not controlled by this Job; delete it or give the Job another name"
            );
            not_ready(&job, &jobs, &ctx, reasons::DAEMON_SET_CONFLICT, msg).await?;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
        if !daemonset::has_own_selector(live, &name) {
            // Made with the shared selector of the Go operator; selectors are immutable.
            tracing::info!(job = %name, daemonset = %ds_name, "replacing a DaemonSet with the old shared selector");
            delete_daemonset(&daemonsets, live).await?;
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }

    // Marked before its DaemonSet exists: should the namespace stop being watched, the operator
    // still sees this Job (and removes the DaemonSet) though it no longer watches there.
    if finalizer::mark(&jobs, &job, ACTED_MARK, &PatchParams::default())
        .await?
        .is_some()
    {
        return Ok(Action::await_change());
    }

    let value = serde_json::to_value(&desired).map_err(|_| {
        crate::runtime::kube::apply::Error::from(crate::runtime::kube::object::Malformed("a DaemonSet"))
    })?;
    let owner = job.controller_owner_ref(&());
    if let Err(e) = ctx
        .applier
        .apply(&value, owner.as_ref().map(|o| (o, ns.as_str())))
        .await
    {
        not_ready(
            &job,
            &jobs,
            &ctx,
            reasons::APPLY_FAILED,
            format!("cannot apply {ds_name}: {e}"),
        )
        .await?;
        return Err(e.into());
    }

    let uid = job.meta().uid.clone().unwrap_or_default();
    if job.status.as_ref().and_then(|s| s.completed) == Some(true) || ctx.is_marked_completed(&uid) {
        // Done: logs are never read again.
        ctx.mark_completed(&key, uid);
        return Ok(Action::await_change());
    }

    // The DaemonSet's count is only meaningful once its controller saw the current spec.
    let desired_pods = live.as_ref().and_then(|ds| {
        let status = ds.status.as_ref()?;
        let current = status.observed_generation.unwrap_or(0) >= ds.meta().generation.unwrap_or(0);
        current.then_some(status.desired_number_scheduled)
    });
    let selector = format!("{JOB_LABEL}={}", crate::render::labels::label_value(&name));
    let pods: Vec<Pod> = Api::<Pod>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .collect();
    if mount.sub_path.is_some()
        && let Some((node, why)) = daemonset::refused_subpath(&pods)
    {
        tracing::warn!(job = %name, %node, "a kubelet refused the Job's hostPath: it resolves outside the allowed directory; removing the DaemonSet");
        if let Some(live) = &live {
            delete_daemonset(&daemonsets, live).await?;
        }
        let msg = format!(
            "node {node} refused to mount spec.hostPath {:?} ({why}): it resolves outside {} (a symlink?), so it is \
             never mounted; remove the link on that node, or change spec.hostPath",
            job.spec.host_path, mount.volume
        );
        not_ready(&job, &jobs, &ctx, reasons::HOST_PATH_UNSAFE, msg).await?;
        return Ok(Action::await_change());
    }
    let (views, log_error) = read_logs(&ctx, &key, &ns, &job.spec.completion_word, &pods).await;

    let previous = job.status.clone().unwrap_or_default();
    let now = now();
    let mut next = status::compute(&status::JobObservation {
        desired: desired_pods,
        pods: &views,
        previous: Some(&previous),
        generation: job.meta().generation,
        now: &now,
    });
    if let (Some(err), Some(conds)) = (log_error, next.conditions.as_mut())
        && next.completed != Some(true)
    {
        let msg = conds
            .iter()
            .find(|c| c.type_ == "Progressing")
            .map(|c| format!("{}; {err}", c.message))
            .unwrap_or(err);
        conditions::set(
            conds,
            "Progressing",
            true,
            reasons::RUNNING,
            msg,
            job.meta().generation,
            &now,
        );
    }
    write_status(&jobs, &job, &previous, &next).await?;
    if next.completed == Some(true) {
        tracing::info!(job = %name, namespace = %ns, nodes = next.nodes_total.unwrap_or(0), "job completed");
        ctx.mark_completed(&key, uid);
        ctx.event(&job, EventType::Normal, reasons::JOB_COMPLETED, COMPLETED_NOTE.into())
            .await;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(POLL))
}

/// Whether the Job's current spec was already refused as [`reasons::HOST_PATH_UNSAFE`].
fn refused_before(job: &Job) -> bool {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    conditions.iter().any(|c| {
        c.type_ == "Ready"
            && c.status == "False"
            && c.reason == reasons::HOST_PATH_UNSAFE
            && c.observed_generation == job.meta().generation
    })
}

/// Deletes `live` (only that object: a UID precondition), in the background; gone is fine.
async fn delete_daemonset(api: &Api<DaemonSet>, live: &DaemonSet) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: live.meta().uid.clone().map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&live.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Reads the new log lines of every scheduled, started pod that has not printed the word yet.
/// Returns a view of each pod and the first read error, if any (shown in the status: a log
/// that cannot be read keeps the Job from completing).
async fn read_logs(ctx: &Context, key: &JobKey, ns: &str, word: &str, pods: &[Pod]) -> (Vec<PodView>, Option<String>) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let mut cursors = ctx.take_cursors(key);
    // Pods that are gone take their cursors with them.
    cursors.retain(|uid, _| pods.iter().any(|p| p.uid().as_deref() == Some(uid.as_str())));

    let mut reads = Vec::with_capacity(pods.len());
    for pod in pods {
        let uid = pod.uid().unwrap_or_default();
        let mut cursor = cursors.get(&uid).cloned().unwrap_or_default();
        let name = pod.name_any();
        let scheduled = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p != "Pending");
        let api = api.clone();
        let word = word.to_string();
        reads.push(async move {
            let mut error = None;
            if scheduled
                && started
                && !cursor.finished
                && let Err(e) = logs::read_new(&api, &name, &word, &mut cursor).await
            {
                tracing::debug!(pod = %name, error = %e, "cannot read task log");
                error = Some(format!("cannot read the log of pod {name}: {e}"));
            }
            (uid, scheduled, cursor, error)
        });
    }
    let results: Vec<(String, bool, LogCursor, Option<String>)> =
        stream::iter(reads).buffered(PARALLEL_LOG_READS).collect().await;

    let mut views = Vec::with_capacity(results.len());
    let mut first_error = None;
    let mut next: HashMap<String, LogCursor> = HashMap::new();
    for (uid, scheduled, cursor, error) in results {
        views.push(PodView {
            scheduled,
            finished: cursor.finished,
        });
        if first_error.is_none() {
            first_error = error;
        }
        next.insert(uid, cursor);
    }
    ctx.put_cursors(key.clone(), next);
    (views, first_error)
}

/// Writes `status` when it differs from what the Job shows. Never touches the spec.
async fn write_status(api: &Api<Job>, job: &Job, previous: &JobStatus, status: &JobStatus) -> Result<(), Error> {
    crate::runtime::kube::status::write_if_changed(api, job, previous, status).await?;
    Ok(())
}

/// Sets Ready=False with `reason`, sends a Warning event the first time, writes status.
async fn not_ready(job: &Job, api: &Api<Job>, ctx: &Context, reason: Reason, message: String) -> Result<(), Error> {
    let previous = job.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    if status.completed.is_none() {
        status.completed = Some(false);
    }
    crate::runtime::kube::status::set_not_ready(api, &ctx.kit, job, &previous, status, (reason, reason), message)
        .await?;
    Ok(())
}

impl crate::runtime::kube::status::WithConditions for JobStatus {
    fn conditions_mut(&mut self) -> &mut Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>> {
        &mut self.conditions
    }
}
