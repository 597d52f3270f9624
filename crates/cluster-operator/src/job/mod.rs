//! The Job controller (`jobs.storageos.com`): runs a task once on every selected node through a
//! DaemonSet owned by the Job, and marks the Job completed when every pod has printed the
//! completion word.
//!
//! Watches the Jobs, their DaemonSets (metadata) and their pods (metadata, by the Job label).
//! Logs produce no watch events, so an unfinished Job is also polled every few seconds; logs are
//! read incrementally ([`logs`]) and not at all once the Job completed.

pub mod daemonset;
pub mod hostpath;
pub mod logs;
pub mod reconcile;
pub mod status;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use crate::crd::Job;
use crate::reasons::Reason;
use crate::render::labels::ACTED_MARK_SELECTOR;
use crate::runtime::kube::apply::{self, Applier};
use crate::runtime::kube::controller::{self, ControllerKit, ReconcileError, Reconciler, category, controlling_owner};
use crate::runtime::kube::metrics::ReconcileMetrics;
use crate::runtime::kube::trusted::TrustedNamespaces;
use daemonset::JOB_LABEL;
use logs::LogCursor;

/// The controller name used in metrics and logs.
pub const CONTROLLER: &str = "storageos-job";
/// How often an unfinished Job's logs are checked: logs produce no watch events.
pub const POLL: Duration = Duration::from_secs(3);

/// Why a Job reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the Job, its DaemonSet or pods failed; retried with backoff.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Applying the DaemonSet failed; retried with backoff.
    #[error(transparent)]
    Apply(#[from] apply::Error),
    /// `spec.labelSelector` is not a list of `key=value` pairs; waits for the user to fix it.
    #[error(
        "spec.labelSelector {0:?} is not a comma-separated list of key=value labels; set it to e.g. \"daemonset-job=true\" or remove it"
    )]
    InvalidLabelSelector(String),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Kube(e) => e.category(),
            Error::Apply(_) => category::APPLY,
            Error::InvalidLabelSelector(_) => category::USER,
        }
    }

    fn lost_to_a_newer_version(&self) -> bool {
        matches!(self, Error::Kube(e) if e.lost_to_a_newer_version())
    }
}

/// (namespace, name) of a Job.
pub type JobKey = (String, String);

/// Shared state of the Job controller.
pub struct Context {
    pub client: Client,
    pub applier: Applier,
    /// Events, backoff and reconcile metrics.
    pub kit: ControllerKit,
    /// Only Jobs in this namespace (all namespaces when None).
    namespace: Option<String>,
    /// The host paths a Job may mount.
    host_paths: hostpath::AllowList,
    /// The namespaces whose Jobs are run (every namespace unless set).
    trusted: TrustedNamespaces,
    /// How far each pod's log has been read, per Job, by pod UID.
    cursors: Mutex<HashMap<JobKey, HashMap<String, LogCursor>>>,
    /// UIDs of Jobs this process marked completed, so a stale cache never re-reads their logs
    /// or repeats the event.
    completed: Mutex<HashSet<String>>,
}

impl Context {
    /// A context for Jobs in every namespace.
    pub fn new(client: Client, metrics: ReconcileMetrics) -> Self {
        Self {
            applier: Applier::new(client.clone(), crate::cluster::ownership::APPLY_OWNERSHIP),
            kit: ControllerKit::reporting_as(
                client.clone(),
                CONTROLLER,
                metrics,
                crate::cluster::ownership::FIELD_MANAGER,
            ),
            client,
            namespace: None,
            host_paths: hostpath::AllowList::default(),
            trusted: TrustedNamespaces::Any,
            cursors: Mutex::new(HashMap::new()),
            completed: Mutex::new(HashSet::new()),
        }
    }

    /// Restricts the controller to Jobs (and their DaemonSets and pods) in `namespace`.
    #[must_use]
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Allows Jobs to mount only `host_paths` (default [`hostpath::DEFAULT`]).
    #[must_use]
    pub fn with_host_paths(mut self, host_paths: hostpath::AllowList) -> Self {
        self.host_paths = host_paths;
        self
    }

    /// Runs Jobs only in `trusted` namespaces; a Job elsewhere gets Ready=False with reason
    /// `NamespaceNotAllowed` and no DaemonSet.
    #[must_use]
    pub fn with_trusted_namespaces(mut self, trusted: TrustedNamespaces) -> Self {
        self.trusted = trusted;
        self
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Publishes an event on `job`; failures are logged, never fatal.
    pub async fn event(&self, job: &Job, type_: EventType, reason: Reason, note: String) {
        self.kit.event(job, type_, reason, note).await;
    }

    /// The log cursors of `key`'s pods (taken out; put them back with [`Self::put_cursors`]).
    fn take_cursors(&self, key: &JobKey) -> HashMap<String, LogCursor> {
        self.cursors
            .lock()
            .ok()
            .and_then(|mut c| c.remove(key))
            .unwrap_or_default()
    }

    fn put_cursors(&self, key: JobKey, cursors: HashMap<String, LogCursor>) {
        if let Ok(mut c) = self.cursors.lock() {
            c.insert(key, cursors);
        }
    }

    fn is_marked_completed(&self, uid: &str) -> bool {
        self.completed.lock().is_ok_and(|c| c.contains(uid))
    }

    fn mark_completed(&self, key: &JobKey, uid: String) {
        if let Ok(mut c) = self.completed.lock() {
            c.insert(uid);
        }
        if let Ok(mut c) = self.cursors.lock() {
            c.remove(key);
        }
    }
}

impl Reconciler for Context {
    type Object = Job;
    type Error = Error;
    const NAME: &'static str = CONTROLLER;

    fn kit(&self) -> &ControllerKit {
        &self.kit
    }

    fn trusted(&self) -> &TrustedNamespaces {
        &self.trusted
    }

    async fn reconcile(job: Arc<Job>, ctx: Arc<Self>) -> Result<Action, Error> {
        reconcile::reconcile(job, ctx).await
    }

    async fn untrusted(job: Arc<Job>, ctx: Arc<Self>, refusal: String) -> Result<Action, Error> {
        reconcile::untrusted(job, ctx, refusal).await
    }

    /// Forgets cursors and completion marks of Jobs that no longer exist, and their DaemonSets.
    fn forget(&self, jobs: &[Arc<Job>]) {
        let keys: HashSet<JobKey> = jobs
            .iter()
            .map(|j| (j.namespace().unwrap_or_default(), j.name_any()))
            .collect();
        let uids: HashSet<String> = jobs.iter().filter_map(|j| j.uid()).collect();
        if let Ok(mut c) = self.cursors.lock() {
            c.retain(|k, _| keys.contains(k));
        }
        if let Ok(mut c) = self.completed.lock() {
            c.retain(|u| uids.contains(u));
        }
        // The garbage collector deletes a deleted Job's DaemonSet: forget having applied it.
        self.applier.retain(|k| {
            daemonset::job_of_daemonset(&k.name)
                .is_some_and(|job| keys.contains(&(k.namespace.clone().unwrap_or_default(), job.to_string())))
        });
    }
}

/// The Job owning a DaemonSet, from its controller owner reference.
fn job_of_daemonset(ds: PartialObjectMeta<DaemonSet>) -> Option<ObjectRef<Job>> {
    controlling_owner(&ds)
}

/// The Job of a task pod: its DaemonSet is named after the Job.
fn job_of_pod(pod: PartialObjectMeta<Pod>) -> Option<ObjectRef<Job>> {
    let ds = controlling_owner::<DaemonSet, _>(&pod)?;
    let job = daemonset::job_of_daemonset(&ds.name)?;
    Some(ObjectRef::new(job).within(&pod.namespace()?))
}

/// Runs the Job controller until `shutdown` resolves.
///
/// Wire it into the operator with
/// `job::run(Arc::new(job::Context::new(client, metrics)), shutdown)`.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    // Only the watched namespaces (or the one it is restricted to), and elsewhere only Jobs the
    // operator acted on, so a DaemonSet left in a namespace no longer watched is removed.
    let controller = match &ctx.namespace {
        Some(ns) => controller::controller(Api::namespaced(ctx.client.clone(), ns), watcher::Config::default()),
        None => controller::controller_in::<Job>(&ctx.client, &ctx.trusted, Some(ACTED_MARK_SELECTOR)),
    };
    let labelled = crate::runtime::kube::cache::every().labels(JOB_LABEL);
    let pods = watcher(ctx.api::<PartialObjectMeta<Pod>>(), labelled.clone())
        .default_backoff()
        .touched_objects();
    let controller = controller
        .watches_stream(
            watcher(ctx.api::<PartialObjectMeta<DaemonSet>>(), labelled)
                .default_backoff()
                .touched_objects(),
            job_of_daemonset,
        )
        .watches_stream(pods, job_of_pod);
    controller::run(controller, ctx, shutdown).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use operator_kit::testing::partial_meta as meta;
    use serde_json::json;

    #[test]
    fn daemonsets_and_pods_map_back_to_their_job() {
        let ds = meta::<DaemonSet>(json!({"name": "c-daemonset-job", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "storageos.com/v1", "kind": "Job", "name": "c",
                                 "uid": "u", "controller": true}]}));
        assert_eq!(job_of_daemonset(ds), Some(ObjectRef::new("c").within("ns")));
        let foreign = meta::<DaemonSet>(json!({"name": "x", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "c", "uid": "u", "controller": true}]}));
        assert_eq!(job_of_daemonset(foreign), None);

        let pod = meta::<Pod>(json!({"name": "c-daemonset-job-abcde", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "c-daemonset-job",
                                 "uid": "u", "controller": true}]}));
        assert_eq!(job_of_pod(pod), Some(ObjectRef::new("c").within("ns")));
        let orphan = meta::<Pod>(json!({"name": "p", "namespace": "ns"}));
        assert_eq!(job_of_pod(orphan), None);
    }

    #[tokio::test]
    async fn daemonsets_of_deleted_jobs_are_forgotten() {
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let registry = &mut prometheus_client::registry::Registry::default();
        let ctx = Context::new(client, ReconcileMetrics::register(registry));
        let (store, mut writer) = kube::runtime::reflector::store::<Job>();
        let live: Job = serde_json::from_value(json!({"apiVersion": "storageos.com/v1", "kind": "Job",
            "metadata": {"name": "kept", "namespace": "ns"},
            "spec": {"image": "i", "args": [], "mountPath": "/m", "hostPath": "/var/lib/storageos", "completionWord": "done"}}))
        .unwrap();
        writer.apply_watcher_event(&watcher::Event::Apply(live));
        let key = |job: &str| crate::runtime::kube::apply::ObjectKey {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            namespace: Some("ns".into()),
            name: daemonset::daemonset_name(job),
        };
        ctx.applier.remember_applied(key("kept"));
        for i in 0..1000 {
            ctx.applier.remember_applied(key(&format!("gone-{i}")));
        }
        assert_eq!(ctx.applier.remembered_count(), 1001);
        crate::runtime::kube::controller::forget_deleted(&ctx, &store.state());
        assert_eq!(ctx.applier.remembered_count(), 1);
    }
}
