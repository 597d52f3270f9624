//! A watch cache of compact views, for kinds a controller holds one of per node (Nodes, node
//! pods).
//!
//! kube's reflector store keeps each object as the watch parsed it, so a view's `ObjectMeta`
//! (360 bytes however little of it is set), and keys it with a copy of its name, namespace,
//! resourceVersion and UID: at 5,000 nodes that was more than half of each ~1.5 KB entry, and
//! none of it what status reads (docs/benchmarks.md). Here the watch parses each object as [`Listed`]:
//! the metadata the watcher needs plus the view, and the store keeps only the view, keyed by
//! namespace and name held inline when short.
//!
//! It follows the reflector's rules: a (re)list fills a buffer that replaces the store at its
//! end, so a reader never sees a half-listed store, and [`ViewStore::wait_until_ready`] waits
//! for the first whole list. [`reflect_views`] also says which events changed what the store
//! holds, so a controller is woken only by changes it can see.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::{Deserialize, Deserializer};
use smol_str::SmolStr;
use tokio::sync::watch;

/// What a cache keeps of an object of kind [`View::Of`].
pub trait View: Clone + PartialEq + Send + Sync + 'static {
    /// The kind it is a view of.
    type Of: Resource<DynamicType = ()>;
    /// Parses an object of that kind, as a watch or a list returns it, into its identity and
    /// this view, skipping what neither keeps.
    fn listed<'de, D: Deserializer<'de>>(d: D) -> Result<Listed<Self>, D::Error>;
}

/// An object as its watch parses it: the identity the watcher reads (name, namespace,
/// resourceVersion), and the view the store keeps. A [`kube::Resource`] of the view's kind, so
/// `Api` and `watcher` take it.
#[derive(Clone, Debug)]
pub struct Listed<V> {
    pub metadata: ObjectMeta,
    pub view: V,
}

impl<V: View> Resource for Listed<V> {
    type DynamicType = ();
    type Scope = <V::Of as Resource>::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        V::Of::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        V::Of::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        V::Of::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        V::Of::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de, V: View> Deserialize<'de> for Listed<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        V::listed(d)
    }
}

/// Namespace (empty for a cluster-scoped kind) and name.
type Key = (SmolStr, SmolStr);

fn key<V>(obj: &Listed<V>) -> Key {
    let meta = &obj.metadata;
    (
        meta.namespace.as_deref().unwrap_or_default().into(),
        meta.name.as_deref().unwrap_or_default().into(),
    )
}

struct Inner<V> {
    objects: HashMap<Key, Arc<V>>,
    /// A (re)list in progress: what it has read so far.
    listing: Option<HashMap<Key, Arc<V>>>,
}

/// The views of every object a watch has seen, shared by its clones.
pub struct ViewStore<V> {
    inner: Arc<RwLock<Inner<V>>>,
    listed: Arc<watch::Sender<bool>>,
}

impl<V> Clone for ViewStore<V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            listed: self.listed.clone(),
        }
    }
}

impl<V: Clone + PartialEq> Default for ViewStore<V> {
    fn default() -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                objects: HashMap::new(),
                listing: None,
            })),
            listed: Arc::new(watch::Sender::new(false)),
        }
    }
}

impl<V: Clone + PartialEq> ViewStore<V> {
    /// Every view held, in no order.
    pub fn state(&self) -> Vec<Arc<V>> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.objects.values().cloned().collect()
    }

    /// The view of the object `name` in `namespace` (empty for a cluster-scoped kind).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<V>> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner
            .objects
            .get(&(SmolStr::from(namespace), SmolStr::from(name)))
            .cloned()
    }

    /// Every view held with its namespace (empty for a cluster-scoped kind) and name, in no
    /// order.
    pub fn entries(&self) -> Vec<(SmolStr, SmolStr, Arc<V>)> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner
            .objects
            .iter()
            .map(|((ns, name), view)| (ns.clone(), name.clone(), view.clone()))
            .collect()
    }

    /// Returns once the first list has been read whole.
    pub async fn wait_until_ready(&self) {
        let mut listed = self.listed.subscribe();
        // The sender lives as long as `self`: the wait ends only when it says true.
        let _ = listed.wait_for(|done| *done).await;
    }

    /// Takes in one watch event; true when what the store holds changed: an object applied with
    /// a view it did not hold, one deleted, or a relist's end dropping objects it held.
    pub fn apply(&self, event: &watcher::Event<Listed<V>>) -> bool {
        let mut guard = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let inner = &mut *guard;
        match event {
            watcher::Event::Apply(obj) => {
                let view = &obj.view;
                let key = key(obj);
                let changed = inner.objects.get(&key).is_none_or(|held| **held != *view);
                if changed {
                    inner.objects.insert(key, Arc::new(view.clone()));
                }
                changed
            }
            watcher::Event::Delete(obj) => inner.objects.remove(&key(obj)).is_some(),
            watcher::Event::Init => {
                inner.listing = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(obj) => {
                let view = &obj.view;
                let key = key(obj);
                // An object listed as held keeps its allocation.
                let (kept, changed) = match inner.objects.get(&key) {
                    Some(held) if **held == *view => (held.clone(), false),
                    _ => (Arc::new(view.clone()), true),
                };
                inner.listing.get_or_insert_with(HashMap::new).insert(key, kept);
                changed
            }
            watcher::Event::InitDone => {
                drop(guard);
                !self.end_list().is_empty()
            }
        }
    }
}

impl<V: Clone + PartialEq> ViewStore<V> {
    /// Ends a (re)list: what it read replaces what the store held. Returns what it dropped
    /// (deleted while the watch was down), each with its name and namespace and last view.
    fn end_list(&self) -> Vec<Listed<V>> {
        let mut guard = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let inner = &mut *guard;
        let listed = inner.listing.take().unwrap_or_default();
        let dropped = inner
            .objects
            .iter()
            .filter(|(k, _)| !listed.contains_key(*k))
            .map(|((ns, name), view)| Listed {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: (!ns.is_empty()).then(|| ns.to_string()),
                    ..ObjectMeta::default()
                },
                view: view.as_ref().clone(),
            })
            .collect();
        inner.objects = listed;
        drop(guard);
        self.listed.send_replace(true);
        dropped
    }
}

/// Keeps `store` from `events` and passes on what changed what it holds: each object applied
/// with a new view or deleted, and each object a relist dropped (deleted while the watch was
/// down; named, as a controller's trigger needs every object to be). Errors pass through.
pub fn reflect_views<V: View>(
    events: impl Stream<Item = watcher::Result<watcher::Event<Listed<V>>>>,
    store: ViewStore<V>,
) -> impl Stream<Item = watcher::Result<Listed<V>>> {
    events.flat_map(move |event| {
        let touched: Vec<watcher::Result<Listed<V>>> = match event {
            Err(e) => vec![Err(e)],
            Ok(watcher::Event::InitDone) => store.end_list().into_iter().map(Ok).collect(),
            Ok(event) if store.apply(&event) => touched(event).map(Ok).into_iter().collect(),
            Ok(_) => Vec::new(),
        };
        futures::stream::iter(touched)
    })
}

/// The object an event is about, if it is about one.
fn touched<V>(event: watcher::Event<Listed<V>>) -> Option<Listed<V>> {
    match event {
        watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) | watcher::Event::Delete(obj) => Some(obj),
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// A ConfigMap's `data.v`, as a view would keep it.
    #[derive(Clone, Debug, Default, PartialEq)]
    struct Value(String);

    impl View for Value {
        type Of = ConfigMap;
        fn listed<'de, D: Deserializer<'de>>(d: D) -> Result<Listed<Self>, D::Error> {
            let cm = ConfigMap::deserialize(d)?;
            let v = cm.data.as_ref().and_then(|d| d.get("v")).cloned().unwrap_or_default();
            Ok(Listed {
                metadata: cm.metadata,
                view: Value(v),
            })
        }
    }

    fn obj(name: &str, value: &str) -> Listed<Value> {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
            "data": {"v": value}
        }))
        .unwrap()
    }

    fn held(store: &ViewStore<Value>) -> Vec<String> {
        let mut v: Vec<String> = store.state().iter().map(|s| s.0.clone()).collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn a_relist_replaces_the_store_at_its_end_and_readiness_waits_for_the_first() {
        let store = ViewStore::<Value>::default();
        assert!(!store.apply(&watcher::Event::<Listed<Value>>::Init));
        assert!(store.apply(&watcher::Event::InitApply(obj("a", "1"))));
        // Not ready, and nothing visible, until the list ends.
        assert!(held(&store).is_empty());
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), store.wait_until_ready())
                .await
                .is_err()
        );
        assert!(store.apply(&watcher::Event::InitApply(obj("b", "2"))));
        assert!(
            !store.apply(&watcher::Event::<Listed<Value>>::InitDone),
            "nothing held was dropped"
        );
        store.wait_until_ready().await;
        assert_eq!(held(&store), ["1", "2"]);

        // A relist: `a` unchanged (no change, same allocation), `b` gone while the watch was down.
        let a_before = store.state().into_iter().find(|v| v.0 == "1").unwrap();
        store.apply(&watcher::Event::<Listed<Value>>::Init);
        assert!(!store.apply(&watcher::Event::InitApply(obj("a", "1"))));
        assert_eq!(held(&store), ["1", "2"], "the old list is read until the new one ends");
        assert!(
            store.apply(&watcher::Event::<Listed<Value>>::InitDone),
            "dropping b is a change"
        );
        assert_eq!(held(&store), ["1"]);
        let a_after = store.state().into_iter().next().unwrap();
        assert!(Arc::ptr_eq(&a_before, &a_after));
    }

    #[test]
    fn only_a_changed_view_or_a_delete_is_a_change() {
        let store = ViewStore::<Value>::default();
        assert!(store.apply(&watcher::Event::Apply(obj("a", "1"))));
        assert!(!store.apply(&watcher::Event::Apply(obj("a", "1"))), "same view");
        assert!(store.apply(&watcher::Event::Apply(obj("a", "2"))));
        assert!(store.apply(&watcher::Event::Delete(obj("a", "2"))));
        assert!(!store.apply(&watcher::Event::Delete(obj("a", "2"))), "not held");
        assert!(held(&store).is_empty());
    }

    #[test]
    fn a_view_is_found_by_namespace_and_name() {
        let store = ViewStore::<Value>::default();
        store.apply(&watcher::Event::Apply(obj("a", "1")));
        store.apply(&watcher::Event::Apply(obj("a-name-longer-than-twenty-three", "2")));
        assert_eq!(store.get("ns", "a").map(|v| v.0.clone()), Some("1".into()));
        assert_eq!(
            store.get("ns", "a-name-longer-than-twenty-three").map(|v| v.0.clone()),
            Some("2".into())
        );
        assert!(store.get("other", "a").is_none() && store.get("ns", "b").is_none());
        let mut entries: Vec<_> = store
            .entries()
            .into_iter()
            .map(|(ns, name, v)| format!("{ns}/{name}={}", v.0))
            .collect();
        entries.sort();
        assert_eq!(entries, ["ns/a-name-longer-than-twenty-three=2", "ns/a=1"]);
    }

    #[tokio::test]
    async fn the_stream_passes_changes_errors_and_what_a_relist_dropped_by_name() {
        let store = ViewStore::<Value>::default();
        let events = futures::stream::iter(vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(obj("a", "1"))),
            Ok(watcher::Event::InitApply(obj("b", "1"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(obj("a", "1"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(obj("a", "1"))),
            Ok(watcher::Event::InitDone),
        ]);
        let out: Vec<_> = reflect_views(events, store.clone()).collect().await;
        let names: Vec<String> = out
            .iter()
            .map(|r| match r {
                // A controller's trigger makes an ObjectRef of each (it panics on a nameless one).
                Ok(o) => kube::runtime::reflector::ObjectRef::from_obj(o).to_string(),
                Err(_) => "(error)".into(),
            })
            .collect();
        assert_eq!(
            names,
            [
                "ConfigMap.v1./a.ns",
                "ConfigMap.v1./b.ns",
                "(error)",
                "ConfigMap.v1./b.ns"
            ],
            "the relist's end names what it dropped"
        );
        assert_eq!(held(&store), ["1"]);
    }
}
