//! Watch caches: one reflector per kind, holding objects without their `managedFields` (about
//! half of a small object, and never read by the controllers), kept going forever with backoff.

use std::future::{Future, ready};
use std::sync::{Arc, OnceLock};

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
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

/// A cache of every object of a kind that several parts of a process read, so the kind is
/// watched and held once: handed an already running cache ([`Shared::of`]), or started by the
/// first reader ([`Shared::get`]) and kept filled for the life of the process.
pub struct Shared<K: Resource<DynamicType = ()> + 'static> {
    store: Arc<OnceLock<Store<K>>>,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for Shared<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + 'static> Default for Shared<K> {
    fn default() -> Self {
        Self {
            store: Arc::new(OnceLock::new()),
        }
    }
}

impl<K> Shared<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    /// A shared cache that is `store` (kept filled by whoever made it).
    pub fn of(store: Store<K>) -> Self {
        let shared = Self::default();
        let _ = shared.store.set(store);
        shared
    }

    /// The cache; the first call without one starts it (every object of the kind, through
    /// `client`, watch errors logged under `owner`). Needs a Tokio runtime.
    pub fn get(&self, client: &Client, owner: &'static str) -> Store<K> {
        self.store
            .get_or_init(|| {
                let (store, drive) = reflect(Api::<K>::all(client.clone()), watcher::Config::default(), owner);
                tokio::spawn(drive);
                store
            })
            .clone()
    }
}
