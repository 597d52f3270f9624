//! Plumbing every controller shares: events on its objects, per-object exponential backoff and
//! controller-runtime-compatible reconcile metrics.

use std::collections::{HashMap, HashSet};
use std::fmt::{Debug, Display};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use super::events::Recorder;
use super::metrics::{ReconcileMetrics, ReconcileResult};
use super::namespaced;
use super::trusted::TrustedNamespaces;
use crate::reasons::Reason;

pub use super::metrics::category;

/// What a failed reconcile says about itself besides its message: the metrics label it, and
/// the runner's 409 policy reads it.
pub trait ReconcileError: Display {
    /// The `category` label of the reconcile error metric, one of [`category`].
    fn category(&self) -> &'static str;

    /// Whether this is a write guarded by the version the reconcile decided on that lost to a
    /// newer version (409): usually the controller's own write of the pass before, whose watch
    /// event had not reached the cache yet. [`run`] then decides again on the newer version
    /// (its watch event triggers a pass; a requeue after [`STALE_VIEW_RETRY`] is the fallback),
    /// without a warning or a reconcile error in the metrics.
    fn lost_to_a_newer_version(&self) -> bool {
        false
    }
}

/// The category of a Kubernetes API failure: its 403 and 409 apart from the rest.
pub fn kube_category(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(s) if s.code == 403 => category::FORBIDDEN,
        kube::Error::Api(s) if s.code == 409 => category::CONFLICT,
        _ => category::KUBERNETES,
    }
}

impl ReconcileError for kube::Error {
    fn category(&self) -> &'static str {
        kube_category(self)
    }

    fn lost_to_a_newer_version(&self) -> bool {
        is_conflict(self)
    }
}

/// The `P` that controls `child` (its owner reference with `controller: true`, when that names a
/// `P`), in the child's namespace: how a watched child maps back to the object to reconcile.
pub fn controlling_owner<P, C>(child: &C) -> Option<ObjectRef<P>>
where
    P: Resource<DynamicType = ()>,
    C: ResourceExt,
{
    let owner = child.owner_references().iter().find(|o| o.controller == Some(true))?;
    ObjectRef::from_owner_ref(child.namespace().as_deref(), owner, ())
}

/// Whether `child` is controlled by the object with this `uid`.
pub fn is_controlled_by<C: ResourceExt>(child: &C, uid: Option<&String>) -> bool {
    child
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid)
}

/// Drives a controller's result stream until the controller stops. Reconcile failures are
/// logged where their backoff is decided ([`ControllerKit::retry_after_error`]); the rest (watch and
/// queue errors, which the watch retries) is logged here at debug level.
pub async fn drain<T, E: Display>(controller: &'static str, results: impl futures::Stream<Item = Result<T, E>>) {
    use futures::StreamExt;
    results
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(controller, error = %e, "controller event");
            }
        })
        .await;
}

/// The delay after `failures` consecutive failures: 100 ms doubling up to 30 s. The cap is low
/// on purpose: a pass that failed through a storm of faults (minutes of StorageOS errors and
/// apiserver restarts) must not leave the status stale for minutes after the storm, and nothing
/// else triggers a pass once the cluster is quiet: with a 5-minute cap, a cluster can stay
/// Ready=False for up to 5 minutes after it recovered (past the chaos soak's 180 s bound). A
/// failing pass every 30 s costs a few requests.
pub fn backoff_delay(failures: u32) -> Duration {
    const MAX: Duration = Duration::from_secs(30);
    let exp = failures.saturating_sub(1).min(20);
    Duration::from_millis(100).saturating_mul(1 << exp).min(MAX)
}

/// Backoff of a controller's combined trigger stream (`Controller::trigger_backoff`): 100 ms
/// doubling up to 2 s. kube-runtime's default (up to 30 s, with jitter) pauses *every* watch of
/// a controller after an error in any one of them. After a kube-apiserver restart, each watch
/// has a stale error (403 while the apiserver's RBAC cache fills) and they arrive one backoff
/// apart, so a controller stayed deaf to its objects for minutes (tests/k8s_faults.rs). Every
/// auxiliary watch keeps its own backoff (`default_backoff()`); this only spaces out retries of
/// the main watch.
#[derive(Debug, Default)]
pub struct TriggerBackoff {
    failures: u32,
}

impl Iterator for TriggerBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(backoff_delay(self.failures).min(Duration::from_secs(2)))
    }
}

impl kube::runtime::utils::Backoff for TriggerBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// One controller's events, backoff and metrics.
pub struct ControllerKit {
    name: &'static str,
    recorder: Recorder,
    metrics: ReconcileMetrics,
    /// Consecutive failures per object (namespace, name).
    failures: Mutex<HashMap<(String, String), u32>>,
}

fn key<K: ResourceExt>(obj: &K) -> (String, String) {
    (obj.namespace().unwrap_or_default(), obj.name_any())
}

impl ControllerKit {
    /// The kit of controller `name` (the metrics label and log field), reporting events as
    /// `component` (the process: its controllers report under one name).
    pub fn reporting_as(client: Client, name: &'static str, metrics: ReconcileMetrics, component: &str) -> Self {
        let reporter = Reporter {
            controller: component.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        metrics.declare(name);
        Self {
            name,
            recorder: Recorder::new(client, reporter),
            metrics,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes an event on `obj`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(&self, obj: &K, type_: EventType, reason: Reason, note: String) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(controller = self.name, object = %obj.name_any(), error = %e, "cannot publish event");
        }
    }

    /// Runs one reconcile of `obj`, recording its duration and outcome, and forgetting past
    /// failures when it succeeds. The reconcile runs in its trace span, the parent of the
    /// applies and StorageOS requests made inside it.
    pub async fn timed<K: ResourceExt, E: ReconcileError>(
        &self,
        obj: &K,
        reconcile: impl Future<Output = Result<Action, E>>,
    ) -> Result<Action, E> {
        self.measure(obj, reconcile).await
    }

    /// [`ControllerKit::timed`] for work on `obj` that is not a controller's reconcile (a fencing pass, a
    /// queued delete): the same metrics, span and failure bookkeeping, and the work's own
    /// result.
    pub async fn measure<K: ResourceExt, T, E: ReconcileError>(
        &self,
        obj: &K,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let k = key(obj);
        let span = crate::telemetry::spans::reconcile(self.name, &k.0, &k.1);
        let result = work.instrument(span.clone()).await;
        crate::telemetry::spans::finish(&span, &result);
        let outcome = match &result {
            Ok(_) => {
                if let Ok(mut f) = self.failures.lock() {
                    f.remove(&k);
                }
                ReconcileResult::Success
            }
            Err(e) => ReconcileResult::Error(e.category()),
        };
        self.metrics
            .observe(self.name, outcome, started.elapsed().as_secs_f64());
        result
    }

    /// Forgets the failures of objects for which `keep` is false (for example deleted ones).
    pub fn retain_failures(&self, keep: impl Fn(&(String, String)) -> bool) {
        if let Ok(mut f) = self.failures.lock() {
            f.retain(|k, _| keep(k));
        }
    }

    /// The error policy: count the failure of `obj` and retry after its backoff.
    pub fn retry_after_error<K: ResourceExt>(&self, obj: &K, error: &dyn ReconcileError) -> Action {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry(key(obj)).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        let delay = backoff_delay(n);
        tracing::warn!(controller = self.name, object = %obj.name_any(), error = %error, category = error.category(), retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }
}

/// A controller built on the kit: its context holds the [`ControllerKit`] and says how to reconcile and
/// what to forget of deleted objects. [`run`] does the rest the same way for every controller.
pub trait Reconciler: Send + Sync + Sized + 'static {
    /// The kind reconciled.
    type Object: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static;
    /// Why a reconcile failed.
    type Error: std::error::Error + ReconcileError + Send + Sync + 'static;
    /// The controller's name in logs.
    const NAME: &'static str;

    /// Events, backoff and metrics.
    fn kit(&self) -> &ControllerKit;

    /// The namespaces whose objects [`run`] reconciles; an object elsewhere goes to
    /// [`Reconciler::untrusted`] instead.
    fn trusted(&self) -> &TrustedNamespaces;

    /// One reconcile of `obj`, which is in a trusted namespace.
    fn reconcile(obj: Arc<Self::Object>, ctx: Arc<Self>) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// What is done instead of a reconcile for `obj`, in a namespace not trusted: undo what was
    /// made for it, and show `refusal` on it (Ready=False, reason `NamespaceNotAllowed`, one
    /// Warning event), or release it when it is being deleted.
    fn untrusted(
        obj: Arc<Self::Object>,
        ctx: Arc<Self>,
        refusal: String,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// Forgets what the context keeps of objects no longer in `live` (the controller's cache);
    /// [`forget_deleted`] already forgets their backoff.
    fn forget(&self, _live: &[Arc<Self::Object>]) {}
}

/// When a reconcile that lost to a newer version of its object is made again, unless the
/// newer version's watch event comes first.
pub const STALE_VIEW_RETRY: Duration = Duration::from_secs(2);

/// What a reconcile that lost to a newer version of `object` returns instead of its error: a
/// requeue after [`STALE_VIEW_RETRY`], logged at debug only.
pub fn decide_again(controller: &str, object: &str, error: &dyn Display) -> Action {
    tracing::debug!(controller, object, %error, "decided on an older version of the object; deciding again");
    Action::requeue(STALE_VIEW_RETRY)
}

/// Whether `e` is the apiserver's 409 Conflict.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// A controller of `api` whose watch-triggered reconciles back off (see [`TriggerBackoff`]).
pub fn controller<K>(api: Api<K>, config: watcher::Config) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    Controller::new(api, config).trigger_backoff(TriggerBackoff::default())
}

/// [`controller`] of the `K` in the namespaces `trusted` allows (and, with `elsewhere_labelled`,
/// those with that label in every other namespace): nothing else is watched or cached
/// ([`super::namespaced::watch`]).
pub fn controller_in<K: namespaced::Watched>(
    client: &Client,
    trusted: &TrustedNamespaces,
    elsewhere_labelled: Option<&str>,
) -> Controller<K> {
    let (reader, writer) = reflector::store();
    let events = namespaced::watch(
        client,
        trusted,
        &watcher::Config::default(),
        elsewhere_labelled,
        reader.clone(),
    )
    .default_backoff();
    Controller::for_stream(reflector::reflector(writer, events).applied_objects(), reader)
        .trigger_backoff(TriggerBackoff::default())
}

/// Forgets the backoff and the context's state of every object not in `live`, so an object
/// deleted while failing leaves nothing behind and a same-named replacement starts afresh.
pub fn forget_deleted<R: Reconciler>(ctx: &R, live: &[Arc<R::Object>]) {
    let keys: HashSet<(String, String)> = live.iter().map(|o| key(o.as_ref())).collect();
    ctx.kit().retain_failures(|k| keys.contains(k));
    ctx.forget(live);
}

/// One pass over `obj`, the same for every controller: the trusted-namespace gate (an object
/// elsewhere gets [`Reconciler::untrusted`], with the refusal to show), then the reconcile, and
/// the one 409 policy ([`ReconcileError::lost_to_a_newer_version`]: decide again, no error).
pub async fn pass<R: Reconciler>(obj: Arc<R::Object>, ctx: Arc<R>) -> Result<Action, R::Error> {
    let namespace = obj.namespace().unwrap_or_default();
    let result = if ctx.trusted().allows(&namespace) {
        R::reconcile(obj.clone(), ctx.clone()).await
    } else {
        if obj.meta().deletion_timestamp.is_none() {
            tracing::warn!(controller = R::NAME, object = %obj.name_any(), %namespace, "ignoring an object in a namespace that is not trusted");
        }
        let refusal = ctx.trusted().refusal(&R::Object::kind(&()), &namespace);
        R::untrusted(obj.clone(), ctx.clone(), refusal).await
    };
    match result {
        Err(e) if e.lost_to_a_newer_version() => Ok(decide_again(R::NAME, &obj.name_any(), &e)),
        result => result,
    }
}

/// Runs `controller` until `shutdown` resolves: each [`pass`] is timed and traced
/// ([`ControllerKit::timed`]), a failure retried with the kit's backoff, deleted objects forgotten
/// before each reconcile.
pub async fn run<R: Reconciler>(
    controller: Controller<R::Object>,
    ctx: Arc<R>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let store = controller.store();
    let results = controller.graceful_shutdown_on(shutdown).run(
        move |obj: Arc<R::Object>, ctx: Arc<R>| {
            forget_deleted(ctx.as_ref(), &store.state());
            async move { ctx.kit().timed(obj.as_ref(), pass(obj.clone(), ctx.clone())).await }
        },
        |obj, error, ctx| ctx.kit().retry_after_error(obj.as_ref(), error),
        ctx,
    );
    drain(R::NAME, results).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// Why the toy reconcile failed: its HTTP status.
    #[derive(Debug, thiserror::Error)]
    #[error("status {0}")]
    struct Status(u16);

    impl ReconcileError for Status {
        fn category(&self) -> &'static str {
            category::KUBERNETES
        }

        fn lost_to_a_newer_version(&self) -> bool {
            self.0 == 409
        }
    }

    /// A controller of ConfigMaps that fails with `fail` and records the refusals it is given.
    struct Toy {
        kit: ControllerKit,
        trusted: TrustedNamespaces,
        fail: Option<u16>,
        refusals: Mutex<Vec<String>>,
    }

    impl Reconciler for Toy {
        type Object = ConfigMap;
        type Error = Status;
        const NAME: &'static str = "toy";

        fn kit(&self) -> &ControllerKit {
            &self.kit
        }

        fn trusted(&self) -> &TrustedNamespaces {
            &self.trusted
        }

        async fn reconcile(_: Arc<ConfigMap>, ctx: Arc<Self>) -> Result<Action, Status> {
            match ctx.fail {
                Some(code) => Err(Status(code)),
                None => Ok(Action::requeue(Duration::from_secs(60))),
            }
        }

        async fn untrusted(_: Arc<ConfigMap>, ctx: Arc<Self>, refusal: String) -> Result<Action, Status> {
            if let Ok(mut r) = ctx.refusals.lock() {
                r.push(refusal);
            }
            Ok(Action::await_change())
        }
    }

    fn toy(fail: Option<u16>) -> Arc<Toy> {
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let metrics = ReconcileMetrics::register(&mut prometheus_client::registry::Registry::default());
        Arc::new(Toy {
            kit: ControllerKit::reporting_as(client, "toy", metrics, "a-toy-operator"),
            trusted: TrustedNamespaces::only("ops"),
            fail,
            refusals: Mutex::new(Vec::new()),
        })
    }

    fn config_map(namespace: &str) -> Arc<ConfigMap> {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("c".into());
        cm.metadata.namespace = Some(namespace.into());
        Arc::new(cm)
    }

    #[tokio::test]
    async fn the_gate_gives_an_untrusted_object_its_refusal_instead_of_a_reconcile() {
        let ctx = toy(Some(500));
        let action = pass(config_map("tenant"), ctx.clone()).await.unwrap();
        assert_eq!(action, Action::await_change());
        let refusals = ctx.refusals.lock().unwrap().clone();
        assert_eq!(refusals, vec![ctx.trusted.refusal("ConfigMap", "tenant")]);
        assert!(matches!(pass(config_map("ops"), ctx).await, Err(Status(500))));
    }

    #[tokio::test]
    async fn a_write_that_lost_to_a_newer_version_is_decided_again_not_failed() {
        let action = pass(config_map("ops"), toy(Some(409))).await.unwrap();
        assert_eq!(action, Action::requeue(STALE_VIEW_RETRY));
        let ok = pass(config_map("ops"), toy(None)).await.unwrap();
        assert_eq!(ok, Action::requeue(Duration::from_secs(60)));
    }

    #[test]
    fn kubernetes_failures_are_told_apart_by_status() {
        let status = |code| kube::Error::Api(kube::core::Status::failure("x", "y").with_code(code).boxed());
        assert_eq!(status(403).category(), category::FORBIDDEN);
        assert_eq!(status(409).category(), category::CONFLICT);
        assert_eq!(status(500).category(), category::KUBERNETES);
        assert!(status(409).lost_to_a_newer_version() && !status(500).lost_to_a_newer_version());
    }

    #[test]
    fn trigger_backoff_doubles_from_100ms_to_2s_and_resets() {
        use kube::runtime::utils::Backoff;
        let mut b = TriggerBackoff::default();
        let first: Vec<Duration> = b.by_ref().take(6).collect();
        assert_eq!(first[0], Duration::from_millis(100));
        assert_eq!(first[5], Duration::from_secs(2));
        assert_eq!(b.next(), Some(Duration::from_secs(2)));
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn backoff_doubles_from_100ms_to_5min() {
        assert_eq!(backoff_delay(1), Duration::from_millis(100));
        assert_eq!(backoff_delay(2), Duration::from_millis(200));
        assert_eq!(backoff_delay(5), Duration::from_millis(1600));
        assert_eq!(backoff_delay(9), Duration::from_millis(25_600));
        assert_eq!(backoff_delay(10), Duration::from_secs(30));
        assert_eq!(backoff_delay(u32::MAX), Duration::from_secs(30));
    }
}
