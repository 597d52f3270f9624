//! One reconcile of a Job: observe (DaemonSet, pods, new log lines) → build the DaemonSet →
//! apply → status.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::daemonset::{self, JOB_LABEL};
use super::hostpath::{AllowList, HostMount};
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

/// Reconciles one Job, in a trusted namespace: observe its DaemonSet → [`decide`] → stop, or
/// apply and watch the pods → status.
pub async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action, Error> {
    if job.meta().deletion_timestamp.is_some() {
        // The garbage collector removes the DaemonSet and its pods.
        return Ok(Action::await_change());
    }
    // Observe the DaemonSet before applying: a foreign one must not be taken over.
    let live = observe_daemonset(&job, &ctx).await?;
    let (desired, mount) = match decide(&job, live.as_ref(), &ctx.host_paths)? {
        Decision::Stop(stop) => return carry_out(&job, &ctx, live.as_ref(), stop).await,
        Decision::Run { desired, mount } => (desired, mount),
    };
    if let Some(action) = start(&job, &ctx, &desired).await? {
        return Ok(action);
    }
    let uid = job.meta().uid.clone().unwrap_or_default();
    if job.status.as_ref().and_then(|s| s.completed) == Some(true) || ctx.is_marked_completed(&uid) {
        // Done: logs are never read again.
        ctx.mark_completed(&job_key(&job), uid);
        return Ok(Action::await_change());
    }
    let pods = observe_pods(&job, &ctx).await?;
    if let Some(stop) = refused_mount(&job, &mount, &pods) {
        return carry_out(&job, &ctx, live.as_ref(), stop).await;
    }
    progress(&job, &ctx, live.as_ref(), &pods).await
}

/// A Job in a namespace the operator does not trust, shown `refusal`. Creating a Job runs an
/// image on every node with a host directory mounted: only in a namespace the operator trusts.
/// A DaemonSet made while the namespace was trusted goes.
pub async fn untrusted(job: Arc<Job>, ctx: Arc<Context>, refusal: String) -> Result<Action, Error> {
    if job.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let live = observe_daemonset(&job, &ctx).await?;
    let stop = Stop {
        remove: Some("its namespace is not trusted".into()),
        refusal: Some((NAMESPACE_NOT_ALLOWED, refusal)),
        then: Action::await_change(),
    };
    carry_out(&job, &ctx, live.as_ref(), stop).await
}

/// What to do with a Job before its pods are looked at ([`decide`]).
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    /// End the pass here.
    Stop(Stop),
    /// Apply `desired`, which mounts `mount`, then watch its pods.
    Run { desired: Box<DaemonSet>, mount: HostMount },
}

/// A pass that ends without running the Job (now): what is undone and shown first.
#[derive(Debug, PartialEq)]
pub(crate) struct Stop {
    /// Why the Job's own DaemonSet is removed (logged), if it is.
    pub remove: Option<String>,
    /// Ready=False with this reason and message (one Warning event), if any.
    pub refusal: Option<(Reason, String)>,
    /// What the pass returns.
    pub then: Action,
}

/// Decides, on the Job, its live DaemonSet and the host paths allowed, whether it runs (pure).
pub(crate) fn decide(job: &Job, live: Option<&DaemonSet>, host_paths: &AllowList) -> Result<Decision, Error> {
    let Some(mount) = host_paths.mount(&job.spec.host_path) else {
        // Admission allows the default list; the operator's own list may be narrower. A
        // DaemonSet made under a wider list is removed: it mounts what is no longer allowed.
        let message = host_paths.refusal(&job.spec.host_path);
        return Ok(Decision::Stop(Stop {
            remove: Some("its hostPath is not allowed".into()),
            refusal: Some((reasons::HOST_PATH_NOT_ALLOWED, message)),
            then: Action::await_change(),
        }));
    };
    if mount.sub_path.is_some() && refused_before(job) {
        // A kubelet found this path resolving outside the allowed directory: never again
        // until the Job changes.
        let remove = Some("its hostPath was refused by a kubelet".into());
        return Ok(Decision::Stop(Stop {
            remove,
            refusal: None,
            then: Action::await_change(),
        }));
    }
    let desired = match daemonset::build_mounting(job, &mount) {
        Ok(ds) => ds,
        Err(e @ Error::InvalidLabelSelector(_)) => {
            let refusal = Some((reasons::INVALID_SPEC, e.to_string()));
            let then = Action::await_change();
            return Ok(Decision::Stop(Stop {
                remove: None,
                refusal,
                then,
            }));
        }
        Err(e) => return Err(e),
    };
    if let Some(stop) = live.and_then(|live| in_the_way(job, live)) {
        return Ok(Decision::Stop(stop));
    }
    Ok(Decision::Run {
        desired: Box::new(desired),
        mount,
    })
}

/// How a live DaemonSet of the Job's name keeps the Job from running, if it does.
fn in_the_way(job: &Job, live: &DaemonSet) -> Option<Stop> {
    let name = job.name_any();
    if !is_controlled_by(live, job.meta().uid.as_ref()) {
        let message = format!(
            "DaemonSet {}/{} exists and is not controlled by this Job; delete it or give the Job another name",
            job.namespace().unwrap_or_default(),
            live.name_any()
        );
        return Some(Stop {
            remove: None,
            refusal: Some((reasons::DAEMON_SET_CONFLICT, message)),
            then: Action::requeue(Duration::from_secs(10)),
        });
    }
    // Made with the shared selector of the Go operator; selectors are immutable.
    (!daemonset::has_own_selector(live, &name)).then(|| Stop {
        remove: Some("it has the old shared selector; it is replaced".into()),
        refusal: None,
        then: Action::requeue(Duration::from_secs(1)),
    })
}

/// Whether a kubelet refused to mount the Job's `subPath` (it resolves outside the allowed
/// directory, a symlink?): the Job stops, and is never run again until it changes (pure).
pub(crate) fn refused_mount(job: &Job, mount: &HostMount, pods: &[Pod]) -> Option<Stop> {
    mount.sub_path.as_ref()?;
    let (node, why) = daemonset::refused_subpath(pods)?;
    let message = format!(
        "node {node} refused to mount spec.hostPath {:?} ({why}): it resolves outside {} (a symlink?), so it is \
         never mounted; remove the link on that node, or change spec.hostPath",
        job.spec.host_path, mount.volume
    );
    Some(Stop {
        remove: Some(format!("the kubelet of node {node} refused its hostPath")),
        refusal: Some((reasons::HOST_PATH_UNSAFE, message)),
        then: Action::await_change(),
    })
}

/// Carries out `stop`: removes the Job's own DaemonSet (`live`, when the Job controls it) if
/// asked, then shows the refusal.
async fn carry_out(job: &Job, ctx: &Context, live: Option<&DaemonSet>, stop: Stop) -> Result<Action, Error> {
    let ns = job.namespace().unwrap_or_default();
    if let Some(why) = &stop.remove
        && let Some(live) = live.filter(|l| is_controlled_by(*l, job.meta().uid.as_ref()))
    {
        tracing::warn!(job = %job.name_any(), daemonset = %live.name_any(), "removing the DaemonSet of a Job: {why}");
        delete_daemonset(&Api::namespaced(ctx.client.clone(), &ns), live).await?;
    }
    if let Some((reason, message)) = stop.refusal {
        not_ready(job, &Api::namespaced(ctx.client.clone(), &ns), ctx, reason, message).await?;
    }
    Ok(stop.then)
}

fn job_key(job: &Job) -> JobKey {
    (job.namespace().unwrap_or_default(), job.name_any())
}

/// The Job's DaemonSet, whoever made it.
async fn observe_daemonset(job: &Job, ctx: &Context) -> Result<Option<DaemonSet>, Error> {
    let daemonsets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    Ok(daemonsets.get_opt(&daemonset::daemonset_name(&job.name_any())).await?)
}

/// The Job's pods that are not going away.
async fn observe_pods(job: &Job, ctx: &Context) -> Result<Vec<Pod>, Error> {
    let selector = format!("{JOB_LABEL}={}", crate::render::labels::label_value(&job.name_any()));
    Ok(
        Api::<Pod>::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default())
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .into_iter()
            .filter(|p| p.meta().deletion_timestamp.is_none())
            .collect(),
    )
}

/// Marks the Job, then applies `desired`; `Some` when the pass ends here (the mark's patch
/// triggers the next one). A refused apply is shown on the Job and retried.
async fn start(job: &Job, ctx: &Context, desired: &DaemonSet) -> Result<Option<Action>, Error> {
    let ns = job.namespace().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    // Marked before its DaemonSet exists: should the namespace stop being watched, the operator
    // still sees this Job (and removes the DaemonSet) though it no longer watches there.
    if finalizer::mark(&jobs, job, ACTED_MARK, &PatchParams::default())
        .await?
        .is_some()
    {
        return Ok(Some(Action::await_change()));
    }
    let value = serde_json::to_value(desired).map_err(|_| {
        crate::runtime::kube::apply::Error::from(crate::runtime::kube::object::Malformed("a DaemonSet"))
    })?;
    let owner = job.controller_owner_ref(&());
    if let Err(e) = ctx
        .applier
        .apply(&value, owner.as_ref().map(|o| (o, ns.as_str())))
        .await
    {
        let message = format!("cannot apply {}: {e}", desired.name_any());
        not_ready(job, &jobs, ctx, reasons::APPLY_FAILED, message).await?;
        return Err(e.into());
    }
    Ok(None)
}

/// Reads the pods' new log lines and writes the status; the Job completes when every pod
/// printed the word (one event), else it is polled again.
async fn progress(job: &Job, ctx: &Context, live: Option<&DaemonSet>, pods: &[Pod]) -> Result<Action, Error> {
    let key = job_key(job);
    let (views, log_error) = read_logs(ctx, &key, &key.0, &job.spec.completion_word, pods).await;
    let previous = job.status.clone().unwrap_or_default();
    let next = next_status(job, &previous, desired_pods(live), &views, log_error, &now());
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &key.0);
    write_status(&jobs, job, &previous, &next).await?;
    if next.completed != Some(true) {
        return Ok(Action::requeue(POLL));
    }
    tracing::info!(job = %key.1, namespace = %key.0, nodes = next.nodes_total.unwrap_or(0), "job completed");
    ctx.mark_completed(&key, job.meta().uid.clone().unwrap_or_default());
    ctx.event(job, EventType::Normal, reasons::JOB_COMPLETED, COMPLETED_NOTE.into())
        .await;
    Ok(Action::await_change())
}

/// The pods the DaemonSet wants, once its controller saw the current spec (before, its count
/// is not meaningful).
pub(crate) fn desired_pods(live: Option<&DaemonSet>) -> Option<i32> {
    let ds = live?;
    let status = ds.status.as_ref()?;
    let current = status.observed_generation.unwrap_or(0) >= ds.meta().generation.unwrap_or(0);
    current.then_some(status.desired_number_scheduled)
}

/// The Job's next status, from its pods; a log that could not be read is added to the
/// Progressing message of a Job not completed (pure).
pub(crate) fn next_status(
    job: &Job,
    previous: &JobStatus,
    desired: Option<i32>,
    views: &[PodView],
    log_error: Option<String>,
    now: &Time,
) -> JobStatus {
    let mut next = status::compute(&status::JobObservation {
        desired,
        pods: views,
        previous: Some(previous),
        generation: job.meta().generation,
        now,
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
            now,
        );
    }
    next
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
    crate::runtime::kube::status::write_if_changed(
        api,
        job,
        (previous, status),
        crate::cluster::ownership::FIELD_MANAGER,
    )
    .await?;
    Ok(())
}

/// Sets Ready=False with `reason`, sends a Warning event the first time, writes status.
async fn not_ready(job: &Job, api: &Api<Job>, ctx: &Context, reason: Reason, message: String) -> Result<(), Error> {
    let previous = job.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    if status.completed.is_none() {
        status.completed = Some(false);
    }
    crate::runtime::kube::status::set_not_ready(
        (api, crate::cluster::ownership::FIELD_MANAGER),
        &ctx.kit,
        job,
        &previous,
        status,
        (reason, reason),
        message,
    )
    .await?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(extra: serde_json::Value) -> Job {
        let mut spec = json!({"image": "busybox", "args": [], "mountPath": "/data",
                              "hostPath": "/var/lib/storageos", "completionWord": "done"});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid", "generation": 2},
            "spec": spec
        }))
        .unwrap()
    }

    /// The Job's own DaemonSet as applied, controlled by the Job.
    fn own(job: &Job) -> DaemonSet {
        let mount = AllowList::default().mount(&job.spec.host_path).unwrap();
        let mut ds = daemonset::build_mounting(job, &mount).unwrap();
        ds.metadata.owner_references = job.controller_owner_ref(&()).map(|o| vec![o]);
        ds
    }

    fn stopped(decision: Decision) -> Stop {
        match decision {
            Decision::Stop(stop) => stop,
            Decision::Run { .. } => panic!("runs"),
        }
    }

    fn reason(stop: &Stop) -> Option<Reason> {
        stop.refusal.as_ref().map(|(r, _)| *r)
    }

    #[test]
    fn a_job_on_an_allowed_path_without_a_daemonset_or_with_its_own_runs() {
        let j = job(json!({}));
        for live in [None, Some(own(&j))] {
            let Decision::Run { desired, mount } = decide(&j, live.as_ref(), &AllowList::default()).unwrap() else {
                panic!("stopped with {live:?}");
            };
            assert_eq!(desired.name_any(), "j-daemonset-job");
            assert_eq!(mount.sub_path, None);
        }
    }

    #[test]
    fn a_path_not_allowed_removes_the_daemonset_and_waits_for_a_change() {
        let j = job(json!({"hostPath": "/etc"}));
        let stop = stopped(decide(&j, Some(&own(&job(json!({})))), &AllowList::default()).unwrap());
        assert!(stop.remove.is_some());
        assert_eq!(reason(&stop), Some(reasons::HOST_PATH_NOT_ALLOWED));
        assert_eq!(stop.then, Action::await_change());
    }

    #[test]
    fn a_bad_label_selector_is_refused_and_nothing_removed() {
        let j = job(json!({"labelSelector": "no-equals-sign"}));
        let stop = stopped(decide(&j, None, &AllowList::default()).unwrap());
        assert_eq!(
            (stop.remove.is_some(), reason(&stop)),
            (false, Some(reasons::INVALID_SPEC))
        );
        assert_eq!(stop.then, Action::await_change());
    }

    #[test]
    fn a_foreign_daemonset_is_a_conflict_and_an_old_selector_is_replaced() {
        let j = job(json!({}));
        let mut foreign = own(&j);
        foreign.metadata.owner_references = None;
        let stop = stopped(decide(&j, Some(&foreign), &AllowList::default()).unwrap());
        assert_eq!(
            (stop.remove.is_some(), reason(&stop)),
            (false, Some(reasons::DAEMON_SET_CONFLICT))
        );
        assert!(stop.refusal.unwrap().1.contains("ns/j-daemonset-job"));
        assert_eq!(stop.then, Action::requeue(Duration::from_secs(10)));

        let mut old = own(&j);
        if let Some(spec) = old.spec.as_mut() {
            spec.selector.match_labels = Some([("daemonset-job".to_string(), "true".to_string())].into());
        }
        let stop = stopped(decide(&j, Some(&old), &AllowList::default()).unwrap());
        assert_eq!((stop.remove.is_some(), reason(&stop)), (true, None));
        assert_eq!(stop.then, Action::requeue(Duration::from_secs(1)));
    }

    #[test]
    fn a_sub_path_a_kubelet_refused_stops_the_job_until_it_changes() {
        let subtree: AllowList = "/var/lib/storageos/*".parse().unwrap();
        let j = job(json!({"hostPath": "/var/lib/storageos/x"}));
        let mount = subtree.mount(&j.spec.host_path).unwrap();
        let pod: Pod = serde_json::from_value(json!({"spec": {"nodeName": "n1", "containers": []},
            "status": {"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "CreateContainerConfigError",
                "message": "failed to prepare subPath for volumeMount"}}}]}}))
        .unwrap();
        let stop = refused_mount(&j, &mount, std::slice::from_ref(&pod)).unwrap();
        assert_eq!(
            (stop.remove.is_some(), reason(&stop)),
            (true, Some(reasons::HOST_PATH_UNSAFE))
        );
        assert!(stop.refusal.as_ref().unwrap().1.contains("node n1"));
        let whole = AllowList::default().mount("/var/lib/storageos").unwrap();
        assert_eq!(refused_mount(&j, &whole, &[pod]), None, "no subPath, nothing to refuse");

        // Once refused for this generation, it is not run again.
        let mut refused = j.clone();
        refused.status = Some(JobStatus {
            conditions: Some(vec![]),
            ..Default::default()
        });
        let conds = refused.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions::set_not_ready(conds, reasons::HOST_PATH_UNSAFE, "refused", Some(2));
        let stop = stopped(decide(&refused, None, &subtree).unwrap());
        assert_eq!((stop.remove.is_some(), reason(&stop)), (true, None));
        assert!(matches!(decide(&j, None, &subtree).unwrap(), Decision::Run { .. }));
    }

    #[test]
    fn a_log_read_error_is_shown_while_the_job_runs() {
        let j = job(json!({}));
        let views = [PodView {
            scheduled: true,
            finished: false,
        }];
        let error = Some("cannot read the log of pod p".to_string());
        let next = next_status(&j, &JobStatus::default(), Some(1), &views, error.clone(), &now());
        assert_eq!(
            progressing(&next),
            "0 of 1 nodes printed the completion word; cannot read the log of pod p"
        );

        let done = [PodView {
            scheduled: true,
            finished: true,
        }];
        let next = next_status(&j, &JobStatus::default(), Some(1), &done, error, &now());
        assert_eq!(next.completed, Some(true));
        assert!(!progressing(&next).contains("cannot read"));
    }

    fn progressing(status: &JobStatus) -> String {
        let conditions = status.conditions.as_deref().unwrap_or_default();
        let found = conditions.iter().find(|c| c.type_ == "Progressing");
        found.map(|c| c.message.clone()).unwrap_or_default()
    }

    #[test]
    fn the_desired_count_counts_only_once_the_daemonset_controller_saw_the_spec() {
        let mut ds = own(&job(json!({})));
        ds.metadata.generation = Some(3);
        ds.status = Some(
            serde_json::from_value(json!({"currentNumberScheduled": 0, "desiredNumberScheduled": 4,
            "numberMisscheduled": 0, "numberReady": 0, "observedGeneration": 2}))
            .unwrap(),
        );
        assert_eq!(desired_pods(Some(&ds)), None);
        ds.metadata.generation = Some(2);
        assert_eq!(desired_pods(Some(&ds)), Some(4));
        assert_eq!(desired_pods(None), None);
    }
}
