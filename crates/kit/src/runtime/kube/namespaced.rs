//! Watches of a namespaced kind in the trusted namespaces only: one watch per namespace, merged
//! into one event stream a single reflector can keep, so objects elsewhere (however many or large)
//! are never sent to the operator, let alone cached.
//!
//! A reflector expects one source: `Init`, `InitApply`…, `InitDone` replace its whole store. Here
//! the first listing of every source is gathered and handed on as one; afterwards a source that
//! lists again (a watch that expired) is handed on as `Apply` of what it lists and `Delete` of what
//! the store held from it and it no longer lists, so the other sources' objects are never touched.
//!
//! Optionally one more source follows, across every namespace *outside* the trusted ones, only the
//! objects with a given label: objects the operator put its finalizer on while their namespace was
//! trusted, so deleting one after trust was withdrawn still reaches the controller.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::sync::Arc;

use futures::stream::{self, BoxStream, SelectAll};
use futures::{Stream, StreamExt};

use kube::runtime::reflector::Store;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::lenient;
use super::trusted::TrustedNamespaces;

type Key = (String, String);

fn key<K: Resource>(obj: &K) -> Key {
    (obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Which objects of the store a source lists.
type Owns<K> = Arc<dyn Fn(&K) -> bool + Send + Sync>;

/// A namespaced kind a controller can watch and cache.
pub trait Watched:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// One watch, and which stored objects are its own.
pub struct Source<K> {
    pub events: BoxStream<'static, watcher::Result<Event<K>>>,
    pub owns: Owns<K>,
}

/// The event stream of `K` in the namespaces `trusted` allows (plus, with `elsewhere_labelled`,
/// the objects with that label in every other namespace), for a reflector writing the store
/// `reader` reads. `*` is one watch of every namespace.
pub fn watch<K: Watched>(
    client: &Client,
    trusted: &TrustedNamespaces,
    config: &watcher::Config,
    elsewhere_labelled: Option<&str>,
    reader: Store<K>,
) -> BoxStream<'static, watcher::Result<Event<K>>> {
    let names = match trusted {
        TrustedNamespaces::Any => {
            return lenient::watcher(client, lenient::api::<K>(client, None), config.clone(), reader).boxed();
        }
        TrustedNamespaces::Only(names) => names.clone(),
    };
    let mut sources: Vec<Source<K>> = names
        .iter()
        .map(|ns| {
            let ns = ns.clone();
            Source {
                events: lenient::watcher(
                    client,
                    lenient::api::<K>(client, Some(&ns)),
                    config.clone(),
                    reader.clone(),
                )
                .boxed(),
                owns: Arc::new(move |o: &K| o.namespace().as_deref() == Some(ns.as_str())),
            }
        })
        .collect();
    if let Some(label) = elsewhere_labelled {
        // Field selectors are ANDed: "none of the trusted namespaces".
        let outside: Vec<String> = names.iter().map(|ns| format!("metadata.namespace!={ns}")).collect();
        let config = config.clone().labels(label).fields(&outside.join(","));
        let trusted = trusted.clone();
        sources.push(Source {
            events: lenient::watcher(client, lenient::api::<K>(client, None), config, reader.clone()).boxed(),
            owns: Arc::new(move |o: &K| !trusted.allows(&o.namespace().unwrap_or_default())),
        });
    }
    merge(sources, reader).boxed()
}

/// The first listing of every source, gathered before anything is handed on.
struct First<K> {
    done: Vec<bool>,
    listed: Vec<HashMap<Key, K>>,
}

struct Merge<K: Resource<DynamicType = ()> + 'static> {
    inner: SelectAll<BoxStream<'static, (usize, watcher::Result<Event<K>>)>>,
    owns: Vec<Owns<K>>,
    first: Option<First<K>>,
    relisting: HashMap<usize, HashSet<Key>>,
    queue: VecDeque<watcher::Result<Event<K>>>,
    reader: Store<K>,
}

impl<K> Merge<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    fn take(&mut self, i: usize, event: Event<K>) {
        if let Some(first) = &mut self.first {
            match event {
                Event::Init => {
                    first.done[i] = false;
                    first.listed[i].clear();
                }
                Event::InitApply(o) | Event::Apply(o) => {
                    first.listed[i].insert(key(&o), o);
                }
                Event::Delete(o) => {
                    first.listed[i].remove(&key(&o));
                }
                Event::InitDone => first.done[i] = true,
            }
            if first.done.iter().all(|d| *d) {
                self.queue.push_back(Ok(Event::Init));
                for listed in first.listed.drain(..) {
                    self.queue.extend(listed.into_values().map(|o| Ok(Event::InitApply(o))));
                }
                self.queue.push_back(Ok(Event::InitDone));
                self.first = None;
            }
            return;
        }
        match event {
            Event::Init => {
                self.relisting.insert(i, HashSet::new());
            }
            Event::InitApply(o) => {
                self.relisting.entry(i).or_default().insert(key(&o));
                self.queue.push_back(Ok(Event::Apply(o)));
            }
            Event::InitDone => {
                let seen = self.relisting.remove(&i).unwrap_or_default();
                let owns = &self.owns[i];
                let gone = self
                    .reader
                    .state()
                    .into_iter()
                    .filter(|o| owns(o) && !seen.contains(&key(o.as_ref())))
                    .map(|o| Ok(Event::Delete(o.as_ref().clone())));
                self.queue.extend(gone);
            }
            e @ (Event::Apply(_) | Event::Delete(_)) => self.queue.push_back(Ok(e)),
        }
    }
}

/// Merges `sources` (whose objects never overlap) into one stream for the reflector `reader`
/// reads.
pub fn merge<K>(sources: Vec<Source<K>>, reader: Store<K>) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let n = sources.len();
    let mut inner = SelectAll::new();
    let mut owns = Vec::with_capacity(n);
    for (i, s) in sources.into_iter().enumerate() {
        inner.push(s.events.map(move |e| (i, e)).boxed());
        owns.push(s.owns);
    }
    let state = Merge {
        inner,
        owns,
        first: Some(First {
            done: vec![false; n],
            listed: (0..n).map(|_| HashMap::new()).collect(),
        }),
        relisting: HashMap::new(),
        queue: VecDeque::new(),
        reader,
    };
    stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.queue.pop_front() {
                return Some((item, state));
            }
            match state.inner.next().await? {
                (_, Err(e)) => return Some((Err(e), state)),
                (i, Ok(event)) => state.take(i, event),
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    use super::*;

    fn cm(ns: &str, name: &str, v: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns}, "data": {"v": v}
        }))
        .unwrap()
    }

    type Tx = mpsc::UnboundedSender<watcher::Result<Event<ConfigMap>>>;

    fn source(ns: &'static str) -> (Tx, Source<ConfigMap>) {
        let (tx, rx) = mpsc::unbounded();
        let source = Source {
            events: rx.boxed(),
            owns: Arc::new(move |o: &ConfigMap| o.namespace().as_deref() == Some(ns)),
        };
        (tx, source)
    }

    fn send(tx: &Tx, events: Vec<Event<ConfigMap>>) {
        for e in events {
            tx.unbounded_send(Ok(e)).unwrap();
        }
    }

    /// A whole listing of `objects`.
    fn list(tx: &Tx, objects: Vec<ConfigMap>) {
        send(tx, vec![Event::Init]);
        send(tx, objects.into_iter().map(Event::InitApply).collect());
        send(tx, vec![Event::InitDone]);
    }

    type Merged = std::pin::Pin<Box<dyn Stream<Item = watcher::Result<Event<ConfigMap>>> + Send>>;

    /// The store, its writer, the senders of sources `a` and `b` and their merged stream.
    fn two_sources() -> (Store<ConfigMap>, reflector::store::Writer<ConfigMap>, Tx, Tx, Merged) {
        let (reader, writer) = reflector::store::<ConfigMap>();
        let (a, source_a) = source("a");
        let (b, source_b) = source("b");
        let merged = Box::pin(merge(vec![source_a, source_b], reader.clone()));
        (reader, writer, a, b, merged)
    }

    fn contents(store: &Store<ConfigMap>) -> Vec<String> {
        let mut v: Vec<String> = store
            .state()
            .iter()
            .map(|c| {
                format!(
                    "{}/{}={}",
                    c.namespace().unwrap(),
                    c.name_any(),
                    c.data.as_ref().unwrap()["v"]
                )
            })
            .collect();
        v.sort();
        v
    }

    /// Feeds what the reflector gets until the merged stream has nothing ready.
    async fn drain(
        stream: &mut (impl Stream<Item = watcher::Result<Event<ConfigMap>>> + Unpin),
        writer: &mut reflector::store::Writer<ConfigMap>,
    ) {
        while let Ok(Some(event)) = tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await {
            writer.apply_watcher_event(&event.unwrap());
        }
    }

    #[tokio::test]
    async fn the_store_is_ready_only_once_every_namespace_is_listed_and_a_relist_touches_only_its_own() {
        let (reader, mut writer, a, b, mut merged) = two_sources();

        send(
            &a,
            vec![Event::Init, Event::InitApply(cm("a", "one", "1")), Event::InitDone],
        );
        send(&a, vec![Event::Apply(cm("a", "two", "2"))]);
        drain(&mut merged, &mut writer).await;
        assert!(contents(&reader).is_empty(), "nothing before b is listed");

        send(
            &b,
            vec![Event::Init, Event::InitApply(cm("b", "x", "1")), Event::InitDone],
        );
        drain(&mut merged, &mut writer).await;
        assert_eq!(contents(&reader), ["a/one=1", "a/two=2", "b/x=1"]);
        tokio::time::timeout(std::time::Duration::from_secs(1), reader.wait_until_ready())
            .await
            .expect("ready after the first listing")
            .unwrap();

        // a's watch expires and lists again: "one" changed, "two" is gone; b's object stays.
        send(
            &a,
            vec![Event::Init, Event::InitApply(cm("a", "one", "9")), Event::InitDone],
        );
        send(&b, vec![Event::Apply(cm("b", "y", "1"))]);
        drain(&mut merged, &mut writer).await;
        assert_eq!(contents(&reader), ["a/one=9", "b/x=1", "b/y=1"]);

        send(&b, vec![Event::Delete(cm("b", "x", "1"))]);
        drain(&mut merged, &mut writer).await;
        assert_eq!(contents(&reader), ["a/one=9", "b/y=1"]);
    }

    #[tokio::test]
    async fn a_source_that_lists_again_before_the_others_are_done_starts_over() {
        let (reader, mut writer, a, b, mut merged) = two_sources();
        send(
            &a,
            vec![Event::Init, Event::InitApply(cm("a", "old", "1")), Event::InitDone],
        );
        send(&a, vec![Event::Init, Event::InitApply(cm("a", "new", "1"))]);
        drain(&mut merged, &mut writer).await;
        list(&b, vec![]);
        drain(&mut merged, &mut writer).await;
        assert!(contents(&reader).is_empty(), "a is listing again");
        send(&a, vec![Event::InitDone]);
        drain(&mut merged, &mut writer).await;
        assert_eq!(contents(&reader), ["a/new=1"]);
    }

    #[tokio::test]
    async fn a_watch_error_is_handed_on() {
        let (reader, _writer) = reflector::store::<ConfigMap>();
        let (a, source_a) = source("a");
        let mut merged = Box::pin(merge(vec![source_a], reader));
        a.unbounded_send(Err(watcher::Error::NoResourceVersion)).unwrap();
        assert!(merged.next().await.unwrap().is_err());
    }
}
