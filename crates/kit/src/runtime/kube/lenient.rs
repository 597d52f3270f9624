//! Watches that one undecodable object cannot stall.
//!
//! kube's watcher decodes a whole list page at once: one object whose stored form no longer
//! fits the type (a field of the wrong type, stored under an older schema or written where the
//! schema was loose) fails the page, the watch retries the same page with backoff, and every
//! other object of the kind goes unreconciled. Here each object is decoded on its own: one that
//! does not fit is reported (a log line and a Warning event on it, once per version) and left
//! out, and the rest flow on. Each object is decoded through kube's `DeserializeGuard`.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, LazyLock, Mutex};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::DeserializeGuard;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::events::Recorder;
use crate::reasons;

/// Reports each undecodable object version once.
#[derive(Clone)]
struct Reporting {
    client: Client,
    recorder: Arc<Recorder>,
    /// By UID: the version last reported (one entry per object that does not decode now).
    seen: &'static Mutex<HashMap<String, String>>,
}

/// What [`Reporting::seen`] holds, shared by every lenient watch of the process: a kind watched
/// twice (the operator's controllers and its OLM condition both watch the clusters; each
/// namespace has a watch of its own) still reports each version once.
static SEEN: LazyLock<Mutex<HashMap<String, String>>> = LazyLock::new(Mutex::default);

impl Reporting {
    /// Publishing as `<kind>-watch` (`storageoscluster-watch`): the watch, not a controller,
    /// says the object cannot be read.
    fn new<K: Resource<DynamicType = ()>>(client: &Client) -> Self {
        let reporter = Reporter {
            controller: format!("{}-watch", K::kind(&()).to_lowercase()),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            client: client.clone(),
            recorder: Arc::new(Recorder::new(client.clone(), reporter)),
            seen: &SEEN,
        }
    }

    /// The object decodes again, or is gone: a later undecodable version is news.
    fn forget(&self, meta: &ObjectMeta) {
        if let (Some(uid), Ok(mut seen)) = (&meta.uid, self.seen.lock()) {
            seen.remove(uid);
        }
    }

    async fn report<K: Resource<DynamicType = ()> + DeserializeOwned>(&self, meta: &ObjectMeta, error: &str) {
        let (uid, version) = (
            meta.uid.clone().unwrap_or_default(),
            meta.resource_version.clone().unwrap_or_default(),
        );
        let first = self
            .seen
            .lock()
            .map(|mut s| s.insert(uid, version.clone()).as_ref() != Some(&version))
            .unwrap_or(true);
        if !first {
            return;
        }
        let kind = K::kind(&());
        let name = meta.name.clone().unwrap_or_default();
        let namespace = meta.namespace.clone().unwrap_or_default();
        let error = self
            .naming_the_field::<K>(&namespace, &name)
            .await
            .unwrap_or_else(|| error.to_string());
        tracing::warn!(%kind, %namespace, %name, %error, "cannot decode the object; it is left out until it is fixed");
        let regarding = ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(kind.clone().into_owned()),
            name: Some(name),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            ..Default::default()
        };
        let note = format!(
            "this {kind} does not fit the operator's schema ({error}) and is ignored until it is fixed: `kubectl edit` that field (a deletion does not finish before then: the operator's finalizer stays until it can read the object)"
        );
        if let Err(e) = self
            .recorder
            .publish_reason(EventType::Warning, reasons::UNDECODABLE, "Decode", note, &regarding)
            .await
        {
            tracing::debug!(error = %e, "cannot publish the undecodable object's event");
        }
    }
}

impl Reporting {
    /// The decoder's complaint with the path of the field (`spec.debug: invalid type…`), from a
    /// fresh read of the object: the watch's own decoder does not say where. `None` when the
    /// read fails or the object now decodes.
    async fn naming_the_field<K: Resource<DynamicType = ()> + DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<String> {
        let resource = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(self.client.clone(), &resource)
        } else {
            Api::namespaced_with(self.client.clone(), namespace, &resource)
        };
        let raw = serde_json::to_value(api.get(name).await.ok()?).ok()?;
        let e = serde_path_to_error::deserialize::<_, K>(raw).err()?;
        Some(format!("{}: {}", e.path(), e.inner()))
    }
}

/// The watch of `api` with each object decoded on its own (see the module): undecodable ones
/// are reported and left out. A deletion of one is handed on as the deletion of what `store`
/// holds under its name, so nothing stale stays cached.
pub fn watcher<K>(
    client: &Client,
    api: Api<DeserializeGuard<K>>,
    config: watcher::Config,
    store: Store<K>,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let reporting = Reporting::new::<K>(client);
    watcher::watcher(api, config).filter_map(move |event| {
        let (reporting, store) = (reporting.clone(), store.clone());
        async move {
            let event = match event {
                Ok(event) => event,
                Err(e) => return Some(Err(e)),
            };
            let stored = |meta: &ObjectMeta| {
                let name = meta.name.clone().unwrap_or_default();
                let key = match &meta.namespace {
                    Some(ns) => ObjectRef::<K>::new(&name).within(ns),
                    None => ObjectRef::<K>::new(&name),
                };
                store.get(&key).map(|k| k.as_ref().clone())
            };
            Some(Ok(match event {
                Event::Init => Event::Init,
                Event::InitDone => Event::InitDone,
                Event::InitApply(DeserializeGuard(Ok(k))) => {
                    reporting.forget(k.meta());
                    Event::InitApply(k)
                }
                Event::Apply(DeserializeGuard(Ok(k))) => {
                    reporting.forget(k.meta());
                    Event::Apply(k)
                }
                // A copy that decoded before no longer stands for the object: it leaves the
                // cache, so nothing goes on acting on a spec the object no longer has.
                Event::InitApply(DeserializeGuard(Err(invalid))) | Event::Apply(DeserializeGuard(Err(invalid))) => {
                    reporting.report::<K>(&invalid.metadata, &invalid.error).await;
                    Event::Delete(stored(&invalid.metadata)?)
                }
                Event::Delete(DeserializeGuard(Ok(k))) => {
                    reporting.forget(k.meta());
                    Event::Delete(k)
                }
                Event::Delete(DeserializeGuard(Err(invalid))) => {
                    reporting.forget(&invalid.metadata);
                    Event::Delete(stored(&invalid.metadata)?)
                }
            }))
        }
    })
}

/// `Api<DeserializeGuard<K>>` in `namespace`, or across every namespace.
pub fn api<K>(client: &Client, namespace: Option<&str>) -> Api<DeserializeGuard<K>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;

    /// What the watcher's list pages decode into: one object of the wrong shape leaves the others
    /// decoded and keeps its own name.
    #[test]
    fn a_list_with_one_bad_object_still_decodes_the_others() {
        let list: kube::core::ObjectList<DeserializeGuard<ConfigMap>> = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "1"},
            "items": [
                {"metadata": {"name": "bad", "namespace": "a"}, "data": {"k": true}},
                {"metadata": {"name": "good", "namespace": "b"}, "data": {"k": "v"}}
            ]
        }))
        .unwrap();
        let (valid, invalid): (Vec<_>, Vec<_>) = list.items.into_iter().partition(|o| o.0.is_ok());
        assert_eq!(valid.iter().map(|o| o.name_any()).collect::<Vec<_>>(), ["good"]);
        let bad = invalid[0].0.as_ref().unwrap_err();
        assert_eq!(bad.metadata.name.as_deref(), Some("bad"));
        assert!(bad.error.to_lowercase().contains("invalid type"), "{}", bad.error);
    }
}
