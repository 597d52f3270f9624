//! Watch caches: one reflector per kind, holding objects slimmed by [`slim`] (no
//! `managedFields`, no `kubectl apply` copy), kept going forever with backoff.

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

/// The annotation `kubectl apply` keeps a copy of the whole applied object in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no reader of a cache needs and what can be as large as the rest of the object:
/// `managedFields` and `kubectl apply`'s copy of the object (a GitOps-managed PVC or a Node
/// registered from a manifest carries one).
pub fn slim<K: Resource>(obj: &mut K) {
    obj.managed_fields_mut().clear();
    if let Some(annotations) = obj.meta_mut().annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
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
    let drive = reflector::reflector(writer, events.modify(slim))
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    use super::*;

    #[test]
    fn slim_drops_managed_fields_and_the_apply_copy_and_keeps_the_rest() {
        let mut pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "app", "labels": {"a": "1"},
                "annotations": {LAST_APPLIED_ANNOTATION: "{\"kind\":\"PersistentVolumeClaim\"}",
                                "volume.kubernetes.io/storage-provisioner": "csi.storageos.com"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"storageClassName": "fast", "volumeName": "pv1"}
        }))
        .unwrap();
        slim(&mut pvc);
        assert!(pvc.managed_fields().is_empty());
        assert_eq!(
            pvc.annotations().keys().collect::<Vec<_>>(),
            ["volume.kubernetes.io/storage-provisioner"]
        );
        assert_eq!(pvc.labels().get("a").map(String::as_str), Some("1"));
        assert_eq!(pvc.spec.unwrap().volume_name.as_deref(), Some("pv1"));
    }
}
