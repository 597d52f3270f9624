//! Watch caches: one reflector per kind, holding objects without their `managedFields` (about
//! half of a small object, and never read by the controllers), kept going forever with backoff.

use std::future::{Future, ready};

use futures::StreamExt;
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
    let (store, writer) = reflector::store::<K>();
    let kind = K::kind(&());
    let drive = reflector::reflector(writer, watcher(api, config).modify(|o| o.managed_fields_mut().clear()))
        .default_backoff()
        .for_each(move |event| {
            if let Err(e) = event {
                tracing::warn!(owner, %kind, error = %e, "watch failed; retrying");
            }
            ready(())
        });
    (store, drive)
}
