//! What the node delete and namespace delete controllers share: when a Kubernetes object is
//! deleted, delete the StorageOS object of the same name.
//!
//! - A metadata watch on the Kubernetes kind queues a delete when an object is deleted. A queued
//!   delete is retried with backoff (409 in use, 423 locked, 5xx, transport errors) until the API
//!   says the object is gone, and is dropped if the Kubernetes object comes back.
//! - A watch can miss deletes: after a watch gap the watcher re-lists and reports none. Names
//!   seen before a re-list and absent after it are queued as deleted.
//! - Deletes that happened while the process was down are found by the garbage collection loop:
//!   StorageOS objects with no Kubernetes object of their name are deleted, only when both lists
//!   were read completely. There is no extra sweep at start-up: the GC runs after its delay
//!   (and not at all when its interval is 0s, as the user asked).
//! - Where maintenance applies (node delete), nothing is deleted while an upgrade runs; queued
//!   deletes wait and say so once.
//!
//! The Go api-manager panicked on transport errors here (docs/api-manager.md); every StorageOS error
//! is just a retry.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ObjectMeta};
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::{Context, periodic};
use crate::controllers::config::DeleteSyncConfig;
use crate::maintenance::Maintenance;
use crate::reasons;
use crate::runtime::kube::cache;
use crate::runtime::kube::controller::{ControllerKit, backoff_delay};
use crate::storageos;

/// How often a delete suspended by maintenance (or by not knowing whether there is
/// maintenance) is tried again, at most.
pub const MAINTENANCE_RECHECK: Duration = Duration::from_secs(10);

/// A StorageOS object as the delete needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub name: String,
    pub version: String,
}

impl From<storageos::Node> for Entry {
    fn from(n: storageos::Node) -> Self {
        Self {
            id: n.id,
            name: n.name.to_string(),
            version: n.version.to_string(),
        }
    }
}

impl From<storageos::Namespace> for Entry {
    fn from(n: storageos::Namespace) -> Self {
        Self {
            id: n.id,
            name: n.name,
            version: n.version,
        }
    }
}

/// One Kubernetes kind whose deletions are mirrored to StorageOS.
pub trait DeleteSync: Send + Sync + 'static {
    /// The cluster-scoped Kubernetes kind (Node, Namespace).
    type Object: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static;
    /// The controller name (metrics, logs).
    const CONTROLLER: &'static str;
    /// What the StorageOS object is called in logs and events ("node", "namespace").
    const KIND: &'static str;
    /// Whether an upgrade in progress suspends deletes.
    const SUSPENDED_IN_MAINTENANCE: bool;

    /// Whether an object of this kind has a StorageOS counterpart.
    fn mirrored(obj: &PartialObjectMeta<Self::Object>) -> bool;
    /// Its settings (garbage collection schedule, deletes at once).
    fn config(ctx: &Context) -> DeleteSyncConfig;
    /// Every StorageOS object of this kind.
    fn list(ctx: &Context) -> impl Future<Output = Result<Vec<Entry>, storageos::Error>> + Send;
    /// Deletes one (with the version read).
    fn delete(ctx: &Context, entry: &Entry) -> impl Future<Output = Result<(), storageos::Error>> + Send;
}

/// Runs the watch, the queued deletes and the garbage collection until dropped.
pub async fn run<M: DeleteSync>(ctx: Arc<Context>) {
    let kit = Arc::new(ctx.kit(M::CONTROLLER));
    let (c, k) = (&ctx, &kit);
    tokio::join!(
        watch_and_delete::<M>(ctx.clone(), kit.clone()),
        periodic(M::config(&ctx).gc, move || collect_garbage::<M>(c, k)),
    );
}

// ------------------------------------------------------------------------------------------
// The queue (pure; unit-tested)

/// A delete waiting to happen.
#[derive(Debug, Clone)]
pub struct Queued<K> {
    /// The deleted object (or a stand-in with its name), for events.
    pub obj: PartialObjectMeta<K>,
    failures: u32,
    due: Instant,
    in_flight: bool,
    /// Whether the failure warning was published (once per queued delete).
    pub said_failing: bool,
    /// Whether the maintenance warning was published (once per queued delete).
    pub said_suspended: bool,
}

/// How one attempt ended.
#[derive(Debug)]
pub enum DeleteOutcome {
    /// The StorageOS object was deleted, or did not exist.
    Gone,
    /// An upgrade is in progress (or whether one is could not be read): nothing was done.
    Suspended,
    /// The delete failed; try again after the backoff.
    Failed,
}

/// The names being watched and the deletes queued.
pub struct Tracker<K> {
    /// Names of mirrored objects that exist as far as the watch knows.
    known: HashSet<String>,
    /// Every name seen since a re-list started.
    relist: Option<HashSet<String>>,
    queue: BTreeMap<String, Queued<K>>,
}

impl<K> Default for Tracker<K> {
    fn default() -> Self {
        Self {
            known: HashSet::new(),
            relist: None,
            queue: BTreeMap::new(),
        }
    }
}

fn stand_in<K>(name: &str) -> PartialObjectMeta<K>
where
    K: Resource<DynamicType = ()>,
{
    let mut obj = ObjectMeta {
        name: Some(name.to_string()),
        ..ObjectMeta::default()
    }
    .into_response_partial::<K>();
    obj.types = Some(kube::core::TypeMeta {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
    });
    obj
}

impl<K: Resource<DynamicType = ()> + Clone> Tracker<K> {
    /// Takes in one watch event; `mirrored` says whether an object had a StorageOS counterpart.
    pub fn observe(
        &mut self,
        event: watcher::Event<PartialObjectMeta<K>>,
        mirrored: impl Fn(&PartialObjectMeta<K>) -> bool,
        now: Instant,
    ) {
        match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                let name = obj.name_any();
                if self.queue.remove(&name).is_some() {
                    tracing::info!(name, "the object is back; its StorageOS delete is cancelled");
                }
                if mirrored(&obj) {
                    self.known.insert(name.clone());
                }
                if let Some(seen) = self.relist.as_mut() {
                    seen.insert(name);
                }
            }
            watcher::Event::Delete(obj) => {
                let name = obj.name_any();
                // A node whose annotation was removed before it was deleted still counts.
                let was_known = self.known.remove(&name);
                if was_known || mirrored(&obj) {
                    self.enqueue(obj, now);
                }
            }
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitDone => {
                let Some(seen) = self.relist.take() else { return };
                let missed: Vec<String> = self.known.iter().filter(|n| !seen.contains(*n)).cloned().collect();
                for name in missed {
                    tracing::info!(name, "deleted while the watch was interrupted");
                    self.known.remove(&name);
                    self.enqueue(stand_in(&name), now);
                }
            }
        }
    }

    fn enqueue(&mut self, obj: PartialObjectMeta<K>, now: Instant) {
        self.queue.entry(obj.name_any()).or_insert(Queued {
            obj,
            failures: 0,
            due: now,
            in_flight: false,
            said_failing: false,
            said_suspended: false,
        });
    }

    /// When the next queued delete not yet running is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.values().filter(|q| !q.in_flight).map(|q| q.due).min()
    }

    /// Up to `limit` deletes due at `now`, marked as running.
    pub fn start_due(&mut self, now: Instant, limit: usize) -> Vec<(String, Queued<K>)> {
        let mut started = Vec::new();
        for (name, q) in &mut self.queue {
            if started.len() >= limit {
                break;
            }
            if !q.in_flight && q.due <= now {
                q.in_flight = true;
                started.push((name.clone(), q.clone()));
            }
        }
        started
    }

    /// Records how the delete of `name` ended; a cancelled delete is forgotten.
    pub fn finish(&mut self, name: &str, outcome: &DeleteOutcome, now: Instant) {
        let Some(q) = self.queue.get_mut(name) else { return };
        q.in_flight = false;
        q.failures = q.failures.saturating_add(1);
        match outcome {
            DeleteOutcome::Gone => {
                self.queue.remove(name);
            }
            DeleteOutcome::Failed => {
                q.said_failing = true;
                q.due = now + backoff_delay(q.failures);
            }
            DeleteOutcome::Suspended => {
                q.said_suspended = true;
                q.due = now + backoff_delay(q.failures).min(MAINTENANCE_RECHECK);
            }
        }
    }

    /// The names of queued deletes.
    pub fn queued(&self) -> Vec<String> {
        self.queue.keys().cloned().collect()
    }
}

/// The StorageOS objects without a Kubernetes object of their name.
pub fn orphans(storageos: Vec<Entry>, kubernetes: &HashSet<String>) -> Vec<Entry> {
    storageos
        .into_iter()
        .filter(|e| !kubernetes.contains(&e.name))
        .collect()
}

// ------------------------------------------------------------------------------------------
// The effects

/// The current maintenance state, as an `Err` message when deletes must wait.
async fn check_maintenance<M: DeleteSync>(ctx: &Context) -> Result<(), String> {
    if !M::SUSPENDED_IN_MAINTENANCE {
        return Ok(());
    }
    match ctx.maintenance().await {
        Ok(Maintenance::Off) => Ok(()),
        Ok(Maintenance::On { upgrade }) => Err(format!(
            "upgrade {upgrade} is in progress; StorageOS {}s are not deleted until it ends",
            M::KIND
        )),
        Err(e) => Err(format!(
            "cannot tell whether an upgrade is in progress ({e}); StorageOS {}s are not deleted until it can be read",
            M::KIND
        )),
    }
}

/// Deletes the StorageOS object called `name`; Ok(true) if it was deleted now, Ok(false) if
/// there was none.
async fn delete_by_name<M: DeleteSync>(ctx: &Context, name: &str) -> Result<bool, SyncError> {
    let Some(entry) = M::list(ctx).await?.into_iter().find(|e| e.name == name) else {
        return Ok(false);
    };
    Ok(delete_entry::<M>(ctx, &entry).await?)
}

/// A delete sync's error: the StorageOS API's, counted under its category.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct SyncError(#[from] storageos::Error);

impl crate::runtime::kube::controller::ReconcileError for SyncError {
    fn category(&self) -> &'static str {
        crate::runtime::kube::controller::category::STORAGEOS
    }
}

async fn delete_entry<M: DeleteSync>(ctx: &Context, entry: &Entry) -> Result<bool, storageos::Error> {
    match M::delete(ctx, entry).await {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

/// One attempt at a queued delete, with its events (each warning once per queued delete).
async fn attempt<M: DeleteSync>(
    ctx: Arc<Context>,
    kit: Arc<ControllerKit>,
    name: String,
    q: Queued<M::Object>,
) -> (String, DeleteOutcome) {
    if let Err(why) = check_maintenance::<M>(&ctx).await {
        tracing::info!(controller = M::CONTROLLER, name, "{why}");
        if !q.said_suspended {
            kit.event(
                &q.obj,
                EventType::Warning,
                reasons::DELETE_SUSPENDED,
                format!("StorageOS {} {name}: {why}", M::KIND),
            )
            .await;
        }
        return (name, DeleteOutcome::Suspended);
    }
    let result = kit.measure(&q.obj, delete_by_name::<M>(&ctx, &name)).await;
    let outcome = match result {
        Ok(false) => {
            tracing::info!(
                controller = M::CONTROLLER,
                name,
                "no StorageOS {} of this name; nothing to delete",
                M::KIND
            );
            DeleteOutcome::Gone
        }
        Ok(true) => {
            tracing::info!(controller = M::CONTROLLER, name, "StorageOS {} deleted", M::KIND);
            kit.event(
                &q.obj,
                EventType::Normal,
                reasons::DELETED,
                format!(
                    "StorageOS {} {name} is deleted: its Kubernetes {} was deleted",
                    M::KIND,
                    M::KIND
                ),
            )
            .await;
            DeleteOutcome::Gone
        }
        Err(e) => {
            tracing::warn!(controller = M::CONTROLLER, name, error = %e, "cannot delete the StorageOS {} yet; retrying with backoff", M::KIND);
            if !q.said_failing {
                kit.event(
                    &q.obj,
                    EventType::Warning,
                    reasons::DELETE_RETRYING,
                    format!(
                        "cannot delete StorageOS {} {name} yet ({e}); retrying with backoff",
                        M::KIND
                    ),
                )
                .await;
            }
            DeleteOutcome::Failed
        }
    };
    (name, outcome)
}

type Running = FuturesUnordered<Pin<Box<dyn Future<Output = (String, DeleteOutcome)> + Send>>>;

/// The watch and the queued deletes, until dropped.
async fn watch_and_delete<M: DeleteSync>(ctx: Arc<Context>, kit: Arc<ControllerKit>) {
    let api = Api::<PartialObjectMeta<M::Object>>::all(ctx.kube.clone());
    let mut events = watcher(api, cache::every()).default_backoff().boxed();
    let workers = usize::from(M::config(&ctx).workers.max(1));
    let mut tracker = Tracker::<M::Object>::default();
    let mut running: Running = FuturesUnordered::new();
    loop {
        let now = Instant::now();
        for (name, q) in tracker.start_due(now, workers.saturating_sub(running.len())) {
            running.push(Box::pin(attempt::<M>(ctx.clone(), kit.clone(), name, q)));
        }
        let next = tracker.next_due().filter(|_| running.len() < workers);
        tokio::select! {
            event = events.try_next() => match event {
                Ok(Some(event)) => tracker.observe(event, M::mirrored, Instant::now()),
                Ok(None) => return,
                Err(e) => tracing::warn!(controller = M::CONTROLLER, error = %e, "watch failed; retrying"),
            },
            Some((name, outcome)) = running.next(), if !running.is_empty() => {
                tracker.finish(&name, &outcome, Instant::now());
            }
            () = tokio::time::sleep_until(next.unwrap_or(now)), if next.is_some() => {}
        }
    }
}

/// One garbage collection pass: StorageOS objects without a Kubernetes object are deleted once
/// (errors are logged; the next pass tries again).
async fn collect_garbage<M: DeleteSync>(ctx: &Context, kit: &ControllerKit) {
    // StorageOS first: an object created between the two reads is then in both lists.
    let storageos = match M::list(ctx).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(controller = M::CONTROLLER, error = %e, "garbage collection skipped: cannot list StorageOS {}s", M::KIND);
            return;
        }
    };
    let kubernetes = match cache::names(&Api::<M::Object>::all(ctx.kube.clone())).await {
        Ok(names) => names,
        Err(e) => {
            tracing::warn!(controller = M::CONTROLLER, error = %e, "garbage collection skipped: cannot list Kubernetes {}s", M::KIND);
            return;
        }
    };
    let orphans = orphans(storageos, &kubernetes);
    if orphans.is_empty() {
        return;
    }
    if let Err(why) = check_maintenance::<M>(ctx).await {
        tracing::info!(controller = M::CONTROLLER, "garbage collection skipped: {why}");
        return;
    }
    for entry in orphans {
        match delete_entry::<M>(ctx, &entry).await {
            Ok(deleted) => {
                if deleted {
                    tracing::info!(controller = M::CONTROLLER, name = %entry.name, "garbage collected the StorageOS {}", M::KIND);
                    kit.event(
                        &stand_in::<M::Object>(&entry.name),
                        EventType::Normal,
                        reasons::DELETED,
                        format!(
                            "StorageOS {} {} is deleted: no Kubernetes {} has its name",
                            M::KIND,
                            entry.name,
                            M::KIND
                        ),
                    )
                    .await;
                }
            }
            Err(e) => {
                tracing::warn!(controller = M::CONTROLLER, name = %entry.name, error = %e, "garbage collection cannot delete the StorageOS {}; the next pass retries", M::KIND)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::core::v1::Node;

    use super::*;

    fn node(name: &str, mirrored: bool) -> PartialObjectMeta<Node> {
        let mut n = stand_in::<Node>(name);
        if mirrored {
            n.metadata.labels = Some([("m".to_string(), "1".to_string())].into());
        }
        n
    }

    fn is_mirrored(n: &PartialObjectMeta<Node>) -> bool {
        n.labels().contains_key("m")
    }

    #[test]
    fn only_mirrored_deletes_are_queued_and_a_returning_object_cancels() {
        let now = Instant::now();
        let mut t = Tracker::<Node>::default();
        t.observe(watcher::Event::Apply(node("a", true)), is_mirrored, now);
        t.observe(watcher::Event::Apply(node("b", false)), is_mirrored, now);
        t.observe(watcher::Event::Delete(node("b", false)), is_mirrored, now);
        assert!(
            t.queued().is_empty(),
            "an object without a StorageOS counterpart is ignored"
        );
        // The annotation was removed before the delete: still known.
        t.observe(watcher::Event::Delete(node("a", false)), is_mirrored, now);
        assert_eq!(t.queued(), ["a"]);
        t.observe(watcher::Event::Apply(node("a", true)), is_mirrored, now);
        assert!(t.queued().is_empty(), "re-created: the delete is cancelled");
    }

    #[test]
    fn deletes_missed_during_a_watch_gap_are_found_at_the_relist() {
        let now = Instant::now();
        let mut t = Tracker::<Node>::default();
        t.observe(watcher::Event::Init, is_mirrored, now);
        for n in ["a", "b", "c"] {
            t.observe(watcher::Event::InitApply(node(n, n != "c")), is_mirrored, now);
        }
        t.observe(watcher::Event::InitDone, is_mirrored, now);
        assert!(t.queued().is_empty(), "the first list deletes nothing");
        // Re-list after a gap: b and c vanished; only b had StorageOS.
        t.observe(watcher::Event::Init, is_mirrored, now);
        t.observe(watcher::Event::InitApply(node("a", true)), is_mirrored, now);
        t.observe(watcher::Event::InitDone, is_mirrored, now);
        assert_eq!(t.queued(), ["b"]);
        let started = t.start_due(now, 5);
        assert_eq!(started[0].1.obj.types.as_ref().unwrap().kind, "Node");
    }

    #[test]
    fn failures_back_off_and_maintenance_rechecks_soon() {
        let now = Instant::now();
        let mut t = Tracker::<Node>::default();
        for n in ["a", "b", "c"] {
            t.observe(watcher::Event::Delete(node(n, true)), is_mirrored, now);
        }
        let started = t.start_due(now, 2);
        assert_eq!(started.len(), 2, "bounded by the workers");
        assert_eq!(t.next_due(), Some(now), "c waits for a worker");
        assert!(t.start_due(now, 2).iter().all(|(n, _)| n == "c"));
        for _ in 0..12 {
            t.finish("a", &DeleteOutcome::Failed, now);
            t.finish("b", &DeleteOutcome::Suspended, now);
        }
        let a = &t.queue["a"];
        assert!(a.said_failing && !a.said_suspended);
        assert_eq!(a.due, now + backoff_delay(12));
        assert_eq!(t.queue["b"].due, now + MAINTENANCE_RECHECK);
        t.finish("c", &DeleteOutcome::Gone, now);
        t.finish("gone-already", &DeleteOutcome::Failed, now);
        assert_eq!(t.queued(), ["a", "b"]);
    }

    #[test]
    fn orphans_are_storageos_objects_without_a_kubernetes_name() {
        let e = |n: &str| Entry {
            id: format!("id-{n}"),
            name: n.into(),
            version: "1".into(),
        };
        let k8s: HashSet<String> = ["a".to_string()].into();
        assert_eq!(orphans(vec![e("a"), e("b")], &k8s), vec![e("b")]);
    }
}
