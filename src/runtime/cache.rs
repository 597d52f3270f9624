//! Watch caches: one reflector per kind, holding objects without their `managedFields` (about
//! half of a small object, and never read by the controllers), kept going forever with backoff.

use std::future::{Future, ready};

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// A cache of `api` (filtered by `config`) and the future that keeps it filled; watch errors
/// are logged under `owner` and retried with backoff.
pub fn reflect<K>(api: Api<K>, config: watcher::Config, owner: &'static str) -> (Store<K>, impl Future<Output = ()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    reflect_events(owner, watcher(api, config))
}

/// A cache of the watch `events` (for a watch built by the caller, such as a metadata watch)
/// and the future that keeps it filled; errors are logged under `owner` and retried with backoff.
pub fn reflect_events<K>(
    owner: &'static str,
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
) -> (Store<K>, impl Future<Output = ()>)
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let kind = K::kind(&()).to_string();
    let drive = reflector::reflector(writer, events.modify(|o| o.managed_fields_mut().clear()))
        .default_backoff()
        .for_each(move |event| {
            if let Err(e) = event {
                tracing::warn!(owner, %kind, error = %e, "watch failed; retrying");
            }
            ready(())
        });
    (store, drive)
}
