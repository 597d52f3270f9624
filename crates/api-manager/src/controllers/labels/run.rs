//! Running a label sync: the generic controller both node and PVC label sync use (watch,
//! reconcile queue and periodic resync), and how failed writes are sorted into rejected and
//! retryable.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{StreamExt, future};
use kube::Resource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde::de::DeserializeOwned;

use super::plan::{NotApplied, describe};
use super::watch::changes;
use crate::controllers::config::LabelSyncConfig;
use crate::controllers::{Context, periodic};
use crate::reasons;
use crate::runtime::kube::cache::Shared;
use crate::runtime::kube::controller::{ControllerKit, ReconcileError};
use crate::storageos;

/// The failed writes of one sync, sorted: a 400 means StorageOS will never accept the value
/// (reported, not retried); anything else is retried with backoff. A 404 means the entity went
/// away meanwhile, which leaves nothing to sync.
#[derive(Debug, Default)]
pub struct Failures {
    /// Rejected for good.
    pub rejected: Vec<String>,
    /// Worth retrying.
    pub retry: Vec<String>,
}

impl Failures {
    /// The failures of one step.
    pub fn of(step: &str, error: &storageos::Error) -> Self {
        let mut f = Self::default();
        f.add(step, error);
        f
    }

    /// Files the failure of `step`.
    pub fn add(&mut self, step: &str, error: &storageos::Error) {
        if error.is_not_found() {
            tracing::debug!(step, error = %error, "the StorageOS entity is gone; nothing to sync");
            return;
        }
        let text = format!("{step}: {error}");
        if error.status() == Some(400) {
            self.rejected.push(text);
        } else {
            self.retry.push(text);
        }
    }
}

impl fmt::Display for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = if self.retry.is_empty() {
            &self.rejected
        } else {
            &self.retry
        };
        f.write_str(&shown.join("; "))
    }
}

/// What the reconciles of one label sync controller share.
pub struct Syncing {
    pub ctx: Arc<Context>,
    pub kit: ControllerKit,
}

impl Syncing {
    /// Reports the labels of `obj` that are not applied, as one warning event.
    pub async fn report_not_applied<K: Resource<DynamicType = ()>>(&self, obj: &K, items: &[NotApplied]) {
        if !items.is_empty() {
            self.kit
                .event(obj, EventType::Warning, reasons::LABEL_NOT_SYNCED, describe(items))
                .await;
        }
    }

    /// Reports the writes made for `obj` to the StorageOS `entity` (a normal event for what was
    /// applied, a warning for what StorageOS rejected for good); Err with what is worth retrying.
    pub async fn finish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        entity: &str,
        applied: &[String],
        failures: Failures,
    ) -> Result<Action, Failures> {
        if !applied.is_empty() {
            let note = format!("Set on the StorageOS {entity}: {}", applied.join(", "));
            self.kit
                .event(obj, EventType::Normal, reasons::LABELS_SYNCED, note)
                .await;
        }
        if !failures.rejected.is_empty() {
            let note = format!("StorageOS rejected the labels: {}", failures.rejected.join("; "));
            self.kit
                .event(obj, EventType::Warning, reasons::LABEL_SYNC_REJECTED, note)
                .await;
        }
        if failures.retry.is_empty() {
            Ok(Action::await_change())
        } else {
            Err(failures)
        }
    }
}

/// One label sync controller: a Kubernetes kind whose labels are the source of truth for its
/// StorageOS counterpart. [`run`] gives every one the same watch, queue, backoff and resync.
pub trait LabelSync: Send + Sync + 'static {
    /// The Kubernetes kind (from a process-wide cache).
    type Object: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static;
    /// Why one object's sync failed (retried with backoff).
    type Error: std::error::Error + ReconcileError + Send + 'static;
    /// The controller's name in metrics, logs and events.
    const NAME: &'static str;

    /// Its settings; `None` when it is turned off.
    fn config(ctx: &Context) -> Option<LabelSyncConfig>;
    /// The process's cache of the kind.
    fn source(ctx: &Context) -> Shared<Self::Object>;
    /// What the watch reacts to: `None` for an object not synced, else a hash of what is.
    fn fingerprint(obj: &Self::Object) -> Option<u64>;
    /// Syncs one object.
    fn sync(obj: Arc<Self::Object>, st: Arc<Syncing>) -> impl Future<Output = Result<Action, Self::Error>> + Send;
    /// One resync pass over every cached object: those whose StorageOS counterpart differs.
    fn resync(st: Arc<Syncing>, cached: Vec<Arc<Self::Object>>) -> impl Future<Output = Vec<ObjectRef<Self::Object>>>;
}

/// Runs the label sync `S` until the future is dropped (at once, when it is turned off):
/// [`LabelSync::sync`] on the changes [`changes`] passes on (`workers` at once, per-object
/// backoff on errors), and, on its resync schedule, a pass that queues what
/// [`LabelSync::resync`] returns.
pub async fn run<S: LabelSync>(ctx: Arc<Context>) {
    let Some(config) = S::config(&ctx) else {
        return;
    };
    let name = S::NAME;
    let source = S::source(&ctx);
    // The process's cache of the kind, and its changes as a watch would give them.
    let reader = source.get(&ctx.kube, name);
    let events = source.changes(&ctx.kube, name).map(Ok);
    let (queue, queued) = mpsc::unbounded();
    let st = Arc::new(Syncing {
        kit: ctx.kit(name),
        ctx,
    });
    let controller = Controller::for_stream(changes(events, S::fingerprint), reader.clone())
        .with_config(controller::Config::default().concurrency(config.workers))
        .trigger_backoff(crate::runtime::kube::controller::TriggerBackoff::default())
        .reconcile_on(queued)
        .run(
            |obj: Arc<S::Object>, st: Arc<Syncing>| {
                let work = S::sync(obj.clone(), st.clone());
                async move { st.kit.timed(obj.as_ref(), work).await }
            },
            |obj: Arc<S::Object>, error: &S::Error, st: Arc<Syncing>| st.kit.retry_after_error(obj.as_ref(), error),
            st.clone(),
        )
        .for_each(move |result| {
            match result {
                // Reconcile failures are logged where their backoff is decided; an object gone
                // from the cache before its reconcile is expected.
                Err(controller::Error::ReconcilerFailed(..) | controller::Error::ObjectNotFound(_)) | Ok(_) => {}
                Err(e) => tracing::warn!(controller = name, error = %e, "watch or queue error; the watch retries"),
            }
            future::ready(())
        });
    let pass = || async {
        source.ready().await;
        let due = S::resync(st.clone(), reader.state()).await;
        tracing::debug!(controller = name, differing = due.len(), "resync pass");
        for obj in due {
            let _ = queue.unbounded_send(obj);
        }
    };
    tokio::join!(controller, periodic(config.resync, pass));
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_sorted_into_rejected_and_retryable() {
        let err = |status| storageos::Error::from_status(status, "PUT", "/v2/x", "m".into());
        let mut f = Failures::default();
        f.add("a", &err(400));
        f.add("b", &err(404));
        f.add("c", &err(409));
        f.add("d", &err(500));
        assert_eq!(f.rejected.len(), 1);
        assert_eq!(f.retry.len(), 2);
        assert!(f.to_string().starts_with("c: "), "{f}");
    }
}
