//! Watch caches: one reflector per kind, holding objects slimmed by [`slim`] (no
//! `managedFields`, no `kubectl apply` copy), kept going forever with backoff; and lists read
//! a page at a time.

use std::collections::HashSet;
use std::future::{Future, ready};
use std::sync::{Arc, OnceLock};

use futures::{Stream, StreamExt};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

/// Objects per list request, for a watch's (re-)list and for [`names`]: a page is parsed whole,
/// `managedFields` included, before anything is dropped, and its peak stays in the allocator
/// afterwards. A smaller page than kube's default 500 keeps that peak low for a few more requests
/// at start-up (docs/benchmarks.md).
pub const LIST_PAGE: u32 = 100;

/// A watch of every object of a kind, listed [`LIST_PAGE`] at a time.
pub fn every() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// The names of every object of `api`'s kind, read [`LIST_PAGE`] metadata at a time. `Err` if
/// any page fails: the caller must not act on a partial list.
pub async fn names<K>(api: &Api<K>) -> Result<HashSet<String>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    names_in_pages(api, LIST_PAGE).await
}

/// [`names`], `page` at a time.
pub async fn names_in_pages<K>(api: &Api<K>, page: u32) -> Result<HashSet<String>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut names = HashSet::new();
    let mut params = ListParams::default().limit(page);
    loop {
        let page = api.list_metadata(&params).await?;
        names.extend(page.items.iter().map(ResourceExt::name_any));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(names),
        }
    }
}

/// What `pick` makes of every object of `api`'s kind, read [`LIST_PAGE`] objects at a time, so
/// only what `pick` keeps is held, never the whole list at once. `Err` if any page fails: the
/// caller must not act on a partial list.
pub async fn pick_in_pages<K, T>(
    api: &Api<K>,
    page: u32,
    pick: impl FnMut(Vec<K>) -> Vec<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    pick_selected_in_pages(api, ListParams::default(), page, pick).await
}

/// [`pick_in_pages`] over the objects `params` selects (by label or field).
pub async fn pick_selected_in_pages<K, T>(
    api: &Api<K>,
    params: ListParams,
    page: u32,
    mut pick: impl FnMut(Vec<K>) -> Vec<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut kept = Vec::new();
    let mut params = params.limit(page);
    loop {
        let page = api.list(&params).await?;
        let token = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        kept.extend(pick(page.items));
        match token {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(kept),
        }
    }
}

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
    reflect_into(owner, events, None)
}

/// Where a [`Shared`] cache tells its readers what it took in.
struct Feed<K> {
    changes: broadcast::Sender<watcher::Event<Arc<K>>>,
    filled: watch::Sender<bool>,
}

/// [`reflect_events`], passing each event the cache has taken in on to `feed` (when anyone
/// listens) and saying there once the first list is in.
fn reflect_into<K>(
    owner: &'static str,
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    feed: Option<Feed<K>>,
) -> (Store<K>, impl Future<Output = ()>)
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let kind = K::kind(&()).to_string();
    let events = events.modify(slim);
    let drive = reflector::reflector(writer, events)
        .default_backoff()
        .for_each(move |event| {
            match event {
                Err(e) => tracing::warn!(owner, %kind, error = %e, "watch failed; retrying"),
                Ok(event) => {
                    if let Some(feed) = &feed {
                        if matches!(event, watcher::Event::InitDone) {
                            feed.filled.send_if_modified(|filled| !std::mem::replace(filled, true));
                        }
                        if feed.changes.receiver_count() > 0 {
                            // No receiver left is not an error: nobody listens right now.
                            let _ = feed.changes.send(share(event));
                        }
                    }
                }
            }
            ready(())
        });
    (store, drive)
}

fn share<K>(event: watcher::Event<K>) -> watcher::Event<Arc<K>> {
    use watcher::Event as E;
    match event {
        E::Apply(o) => E::Apply(Arc::new(o)),
        E::Delete(o) => E::Delete(Arc::new(o)),
        E::InitApply(o) => E::InitApply(Arc::new(o)),
        E::Init => E::Init,
        E::InitDone => E::InitDone,
    }
}

/// How many changes a reader of a [`Shared`] cache may fall behind before it is handed the
/// whole cache again instead.
const CHANGES_BUFFER: usize = 256;

struct Cache<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    changes: broadcast::Sender<watcher::Event<Arc<K>>>,
    /// Whether the first list is in. kube's `Store::wait_until_ready` wakes only the last of
    /// several tasks waiting at once, and a shared cache has several readers.
    filled: watch::Receiver<bool>,
}

/// A cache of every object of a kind that several parts of a process read, so the kind is
/// watched and held once: started by the first reader ([`Shared::get`]) and kept filled for the
/// life of the process. A controller that needs the changes as a watch would give them reads
/// them from the cache ([`Shared::changes`]) instead of watching and caching the kind again.
pub struct Shared<K: Resource<DynamicType = ()> + 'static> {
    cache: Arc<OnceLock<Cache<K>>>,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for Shared<K> {
    fn clone(&self) -> Self {
        Self {
            cache: self.cache.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + 'static> Default for Shared<K> {
    fn default() -> Self {
        Self {
            cache: Arc::new(OnceLock::new()),
        }
    }
}

impl<K> Shared<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    fn cache(&self, client: &Client, owner: &'static str) -> &Cache<K> {
        self.cache.get_or_init(|| {
            let (changes, _) = broadcast::channel(CHANGES_BUFFER);
            let (filled_tx, filled) = watch::channel(false);
            let feed = Feed {
                changes: changes.clone(),
                filled: filled_tx,
            };
            let events = watcher(Api::<K>::all(client.clone()), every());
            let (store, drive) = reflect_into(owner, events, Some(feed));
            tokio::spawn(drive);
            Cache { store, changes, filled }
        })
    }

    /// The cache; the first call starts it (every object of the kind, through `client`, watch
    /// errors logged under `owner`). Needs a Tokio runtime.
    pub fn get(&self, client: &Client, owner: &'static str) -> Store<K> {
        self.cache(client, owner).store.clone()
    }

    /// Waits until the cache (started by [`Shared::get`]) holds its first complete list; at once
    /// if it was never started. Use this, not the store's `wait_until_ready`, from any task.
    pub async fn ready(&self) {
        if let Some(cache) = self.cache.get() {
            let _ = cache.filled.clone().wait_for(|filled| *filled).await;
        }
    }

    /// The cache as a watch stream: once the cache is filled, its whole content as a list
    /// (`Init`, `InitApply` each, `InitDone`), then every change it takes in. Whenever the cache
    /// re-lists, and whenever this reader fell more than [`CHANGES_BUFFER`] changes behind, it
    /// is handed the whole (new) content as a list again, as a watch re-lists after a gap.
    pub fn changes(
        &self,
        client: &Client,
        owner: &'static str,
    ) -> impl Stream<Item = watcher::Event<K>> + Send + 'static {
        let cache = self.cache(client, owner);
        replay(cache.store.clone(), cache.changes.subscribe(), cache.filled.clone())
    }
}

/// Where a [`replay`] stands.
enum Replay<K> {
    /// Hand over the whole store next.
    List,
    /// Handing over the store's objects.
    Listing(std::vec::IntoIter<Arc<K>>),
    /// Passing on changes.
    Live,
}

/// The watch stream of `store` fed by `changes` (see [`Shared::changes`]). The list the cache's
/// own watch makes after a gap is not passed on object by object: the store holds the new list
/// once that watch says it is done, and is handed over whole then.
fn replay<K>(
    store: Store<K>,
    changes: broadcast::Receiver<watcher::Event<Arc<K>>>,
    ready: watch::Receiver<bool>,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    use watcher::Event as E;
    let start = (store, changes, ready, Replay::<K>::List);
    futures::stream::unfold(start, |(store, mut rx, mut ready, mut at)| async move {
        loop {
            match at {
                Replay::List => {
                    ready.wait_for(|filled| *filled).await.ok()?;
                    let objects = store.state().into_iter();
                    return Some((E::Init, (store, rx, ready, Replay::Listing(objects))));
                }
                Replay::Listing(ref mut objects) => {
                    let event = match objects.next() {
                        Some(obj) => E::InitApply(obj.as_ref().clone()),
                        None => {
                            at = Replay::Live;
                            E::InitDone
                        }
                    };
                    return Some((event, (store, rx, ready, at)));
                }
                Replay::Live => match rx.recv().await {
                    Ok(E::Apply(obj)) => return Some((E::Apply(unshared(obj)), (store, rx, ready, at))),
                    Ok(E::Delete(obj)) => return Some((E::Delete(unshared(obj)), (store, rx, ready, at))),
                    Ok(E::Init | E::InitApply(_)) => {}
                    Ok(E::InitDone) | Err(broadcast::error::RecvError::Lagged(_)) => at = Replay::List,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            }
        }
    })
}

fn unshared<K: Clone>(obj: Arc<K>) -> K {
    Arc::try_unwrap(obj).unwrap_or_else(|shared| shared.as_ref().clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    use super::*;

    /// A Pod list served in two pages; the server's task returns each request's first line.
    async fn two_pages() -> (
        Api<k8s_openapi::api::core::v1::Pod>,
        tokio::task::JoinHandle<Vec<String>>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for body in [
                r#"{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"next"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"keep-b"}}]}"#,
                r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"keep-c"}}]}"#,
            ] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut head = vec![0u8; 4096];
                let n = s.read(&mut head).await.unwrap();
                seen.push(
                    String::from_utf8_lossy(&head[..n])
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                );
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(answer.as_bytes()).await.unwrap();
            }
            seen
        });
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        (Api::all(client), server)
    }

    #[tokio::test]
    async fn lists_go_a_page_at_a_time_and_keep_only_what_is_picked() {
        let (api, server) = two_pages().await;
        let kept = pick_in_pages(&api, 2, |page| {
            page.into_iter()
                .map(|p| p.name_any())
                .filter(|n| n.starts_with("keep-"))
                .collect()
        })
        .await
        .unwrap();
        assert_eq!(kept, ["keep-b", "keep-c"]);
        let seen = server.await.unwrap();
        assert!(
            seen[0].contains("limit=2") && !seen[0].contains("continue="),
            "{seen:?}"
        );
        assert!(seen[1].contains("continue=next"), "{seen:?}");
    }

    #[tokio::test]
    async fn a_selected_list_keeps_its_selector_on_every_page() {
        let (api, server) = two_pages().await;
        let params = ListParams::default().labels("app=storageos");
        let kept = pick_selected_in_pages(&api, params, 2, |page| page).await.unwrap();
        assert_eq!(kept.len(), 3);
        let seen = server.await.unwrap();
        for request in &seen {
            assert!(
                request.contains("labelSelector=app%3Dstorageos") && request.contains("limit=2"),
                "{seen:?}"
            );
        }
        assert!(seen[1].contains("continue=next"), "{seen:?}");
    }

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

    fn cm(name: &str, v: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "labels": {"v": v}}})).unwrap()
    }

    /// Events as "Init", "InitApply a=1", "Apply b=2", … (a list's objects sorted).
    fn show(events: Vec<watcher::Event<k8s_openapi::api::core::v1::ConfigMap>>) -> Vec<String> {
        use watcher::Event as E;
        let obj = |o: &k8s_openapi::api::core::v1::ConfigMap| format!("{}={}", o.name_any(), o.labels()["v"]);
        let mut shown: Vec<String> = events
            .iter()
            .map(|e| match e {
                E::Init => "Init".to_string(),
                E::InitDone => "InitDone".to_string(),
                E::InitApply(o) => format!("InitApply {}", obj(o)),
                E::Apply(o) => format!("Apply {}", obj(o)),
                E::Delete(o) => format!("Delete {}", obj(o)),
            })
            .collect();
        // A list's objects come in the store's order.
        if shown.first().is_some_and(|s| s == "Init") {
            let last = shown.len() - 1;
            shown[1..last].sort();
        }
        shown
    }

    #[tokio::test]
    async fn changes_hand_over_the_cache_then_its_changes_and_the_cache_again_after_a_relist_or_a_lag() {
        use watcher::Event as E;
        let (store, mut writer) = reflector::store();
        let (tx, rx) = broadcast::channel(3);
        let (filled, ready) = watch::channel(false);
        // What the drive does: the store takes the event in, then it is sent on.
        let mut take = |event: E<k8s_openapi::api::core::v1::ConfigMap>| {
            writer.apply_watcher_event(&event);
            if matches!(event, E::InitDone) {
                filled.send_replace(true);
            }
            let _ = tx.send(share(event));
        };
        take(E::Init);
        take(E::InitApply(cm("a", "1")));
        take(E::InitDone);
        let mut changes = Box::pin(replay(store, rx, ready));
        let mut next = async |n: usize| {
            let mut got = Vec::new();
            for _ in 0..n {
                got.push(changes.next().await.unwrap());
            }
            show(got)
        };
        // The cache's first list went by before anyone read: the store is handed over whole.
        // (The buffered Init/InitApply are skipped; the buffered InitDone hands it over again.)
        assert_eq!(next(3).await, ["Init", "InitApply a=1", "InitDone"]);
        assert_eq!(next(3).await, ["Init", "InitApply a=1", "InitDone"]);
        take(E::Apply(cm("b", "1")));
        take(E::Delete(cm("a", "1")));
        assert_eq!(next(2).await, ["Apply b=1", "Delete a=1"]);
        // A relist of the cache's watch: nothing until it is done, then the new content.
        take(E::Init);
        take(E::InitApply(cm("b", "2")));
        take(E::InitApply(cm("c", "1")));
        take(E::InitDone);
        assert_eq!(next(4).await, ["Init", "InitApply b=2", "InitApply c=1", "InitDone"]);
        // More changes than the buffer holds: the reader is handed the whole cache instead.
        for v in ["3", "4", "5", "6", "7"] {
            take(E::Apply(cm("c", v)));
        }
        assert_eq!(next(4).await, ["Init", "InitApply b=2", "InitApply c=7", "InitDone"]);
    }
}
