//! One StorageOS poll for every api-manager controller (docs/observability.md).
//!
//! The nodes are read every `-node-poll-interval` and the volumes every `-volume-poll-interval`,
//! once for all consumers, and each read is published as a snapshot on a `watch` channel; a
//! consumer reacts to every new snapshot. A snapshot says whether its read was complete: a
//! failed or partial read must never lead to anything destructive (fencing, deletes).
//!
//! StorageOS has no cluster-wide volume list, so a volume read is one namespace list plus one
//! volume list per namespace. Namespaces that held no volumes at their last read are read again
//! only every [`EMPTY_NAMESPACE_RECHECK`] (their earlier, empty answer stands meanwhile): the
//! steady cost grows with the namespaces that hold volumes, not with every namespace StorageOS
//! ever created. The namespace list itself is read again every [`NAMESPACE_RELIST`], or at the
//! next poll when a PVC (not another provisioner's) lies in a namespace the last list did not have
//! (StorageOS creates a namespace with the first volume in it): a new namespace is still read at
//! the first poll after its first volume is made, and an idle cluster does not list namespaces
//! every few seconds.
//!
//! The process builds the poll and runs it (`apimanager::polls`), for as long as it leads; the
//! controllers hold only [`Subscriptions`], which cannot drive it. A kind nobody subscribed to
//! is not read.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use tokio::sync::watch;
use tokio::time::Instant;

use super::metrics::ApiManagerMetrics;
use crate::cached_pvc::CachedPvc;
use crate::storageos;
use crate::storageos::models::{Namespace, Node, Volume};

/// How often the namespace list is read again when no PVC lies outside it.
pub const NAMESPACE_RELIST: Duration = Duration::from_secs(60);

/// How often a namespace that held no volumes at its last read is read again.
pub const EMPTY_NAMESPACE_RECHECK: Duration = Duration::from_secs(60);
/// The shortest volume poll interval (`-volume-poll-interval 0s` would otherwise spin).
pub const MIN_VOLUME_POLL: Duration = Duration::from_secs(1);

/// One read of something from StorageOS.
#[derive(Debug, Clone)]
pub struct Snapshot<T> {
    /// When the read started.
    pub taken: DateTime<Utc>,
    /// What was read, or why nothing was (shared by every subscriber).
    pub read: Result<T, Arc<storageos::Error>>,
}

/// Every StorageOS node, from one `GET /nodes` (always complete when `Ok`).
pub type NodeSnapshot = Snapshot<Vec<Node>>;
/// Every StorageOS volume the read could see.
pub type VolumeSnapshot = Snapshot<VolumeList>;

/// The volumes of every namespace, and the namespaces whose volumes could not be read.
#[derive(Debug, Clone, Default)]
pub struct VolumeList {
    pub namespaces: Vec<Namespace>,
    /// The volumes of each namespace that holds some. A namespace whose volumes read the same as
    /// at the poll before keeps the same allocation: an idle cluster's poll parses and drops one
    /// namespace's volumes at a time instead of building a second copy of them all.
    by_namespace: Vec<Arc<[Volume]>>,
    /// `(namespace name, error)` of each namespace whose volumes could not be read (absent from [`VolumeList::volumes`]).
    pub failed: Vec<(String, Arc<storageos::Error>)>,
}

impl VolumeList {
    /// Every volume read.
    pub fn volumes(&self) -> impl Iterator<Item = &Volume> {
        self.by_namespace.iter().flat_map(|v| v.iter())
    }

    /// Every volume read, with the name of the StorageOS namespace that holds it (None when
    /// that namespace is not in the list): the namespace a volume's labels must agree with.
    pub fn volumes_with_namespace(&self) -> impl Iterator<Item = (&Volume, Option<&str>)> {
        let names: HashMap<&str, &str> = self
            .namespaces
            .iter()
            .map(|n| (n.id.as_str(), n.name.as_str()))
            .collect();
        self.volumes()
            .map(move |v| (v, names.get(v.namespace_id.as_str()).copied()))
    }

    /// A complete read of `volumes` in `namespaces` (for tests of what reads the list).
    pub fn of(namespaces: Vec<Namespace>, volumes: Vec<Volume>) -> Self {
        Self {
            namespaces,
            by_namespace: vec![volumes.into()],
            failed: Vec::new(),
        }
    }

    /// Whether every namespace was read: only then may absence mean "gone".
    pub fn complete(&self) -> bool {
        self.failed.is_empty()
    }
}

impl<T> Snapshot<T> {
    /// The data, when the read worked.
    pub fn ok(&self) -> Option<&T> {
        self.read.as_ref().ok()
    }
}

impl VolumeSnapshot {
    /// The volume list when the read was complete (every namespace read).
    pub fn complete(&self) -> Option<&VolumeList> {
        self.ok().filter(|l| l.complete())
    }
}

type Slot<T> = watch::Sender<Option<Arc<Snapshot<T>>>>;
/// A subscription to snapshots; `None` until the first read.
pub type Receiver<T> = watch::Receiver<Option<Arc<Snapshot<T>>>>;

/// The StorageOS reads the poll makes, and the PVCs it looks at to notice a new namespace:
/// [`ApiSource`] in the process, a fake in the unit tests.
pub trait Source: Send + Sync {
    /// `GET /nodes`.
    fn list_nodes(&self) -> impl Future<Output = Result<Vec<Node>, storageos::Error>> + Send;
    /// `GET /namespaces`.
    fn list_namespaces(&self) -> impl Future<Output = Result<Vec<Namespace>, storageos::Error>> + Send;
    /// `GET /namespaces/{id}/volumes`.
    fn list_volumes(&self, namespace_id: &str) -> impl Future<Output = Result<Vec<Volume>, storageos::Error>> + Send;
    /// The process's PVC cache.
    fn pvcs(&self) -> &Store<CachedPvc>;
}

/// The StorageOS API, each call timed in the api-manager's helper metrics.
pub struct ApiSource {
    pub api: storageos::Client,
    pub metrics: ApiManagerMetrics,
    pub pvcs: Store<CachedPvc>,
}

impl Source for ApiSource {
    async fn list_nodes(&self) -> Result<Vec<Node>, storageos::Error> {
        self.metrics.track("list_nodes", self.api.list_nodes()).await
    }

    async fn list_namespaces(&self) -> Result<Vec<Namespace>, storageos::Error> {
        self.metrics.track("list_namespaces", self.api.list_namespaces()).await
    }

    async fn list_volumes(&self, namespace_id: &str) -> Result<Vec<Volume>, storageos::Error> {
        self.metrics
            .track("list_volumes", self.api.list_volumes(namespace_id))
            .await
    }

    fn pvcs(&self) -> &Store<CachedPvc> {
        &self.pvcs
    }
}

/// How often the poll reads each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollConfig {
    /// `-node-poll-interval` (with its floor).
    pub nodes: Duration,
    /// `-volume-poll-interval`, at least [`MIN_VOLUME_POLL`].
    pub volumes: Duration,
}

/// The latest snapshots, shared by the controllers of one api-manager: the poll publishes them,
/// the controllers subscribe. Cloning gives another handle on the same channels.
#[derive(Clone)]
pub struct StorageOSPoll {
    nodes: Arc<Slot<Vec<Node>>>,
    volumes: Arc<Slot<VolumeList>>,
}

impl Default for StorageOSPoll {
    fn default() -> Self {
        Self {
            nodes: Arc::new(watch::channel(None).0),
            volumes: Arc::new(watch::channel(None).0),
        }
    }
}

impl std::fmt::Debug for StorageOSPoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageOSPoll").finish_non_exhaustive()
    }
}

/// Waits for the next snapshot after the ones seen; `None` when the channel closed.
pub async fn next<T>(rx: &mut Receiver<T>) -> Option<Arc<Snapshot<T>>> {
    loop {
        rx.changed().await.ok()?;
        if let Some(s) = rx.borrow_and_update().clone() {
            return Some(s);
        }
    }
}

/// What a controller holds of the poll: the snapshots it publishes, and no way to run it.
#[derive(Clone)]
pub struct Subscriptions {
    nodes: Arc<Slot<Vec<Node>>>,
    volumes: Arc<Slot<VolumeList>>,
}

impl std::fmt::Debug for Subscriptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriptions").finish_non_exhaustive()
    }
}

impl Subscriptions {
    /// Node snapshots from now on (the latest one, if any, counts as seen).
    pub fn nodes(&self) -> Receiver<Vec<Node>> {
        self.nodes.subscribe()
    }

    /// Volume snapshots from now on.
    pub fn volumes(&self) -> Receiver<VolumeList> {
        self.volumes.subscribe()
    }

    /// The latest node snapshot, if a read happened.
    pub fn latest_nodes(&self) -> Option<Arc<NodeSnapshot>> {
        self.nodes.borrow().clone()
    }
}

impl StorageOSPoll {
    /// What the controllers are handed: the snapshots this poll publishes.
    pub fn subscriptions(&self) -> Subscriptions {
        Subscriptions {
            nodes: self.nodes.clone(),
            volumes: self.volumes.clone(),
        }
    }

    /// Reads the nodes every `every.nodes` until the future is dropped. Nothing else waits in
    /// this loop: a volume read of many namespaces never delays a node read (the fencer's input).
    pub async fn run_nodes(&self, source: &impl Source, every: PollConfig) {
        // Lets consumers started together subscribe before the first tick.
        tokio::task::yield_now().await;
        tracing::debug!(node_every = ?every.nodes, "polling StorageOS nodes for every controller");
        let mut tick = tokio::time::interval(every.nodes);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.nodes.receiver_count() > 0 {
                let taken = Utc::now();
                let read = source.list_nodes().await;
                if let Err(e) = &read {
                    tracing::warn!(error = %e, "cannot list StorageOS nodes; trying again at the next poll");
                }
                let read = read.map_err(Arc::new);
                self.nodes.send_replace(Some(Arc::new(Snapshot { taken, read })));
            }
        }
    }

    /// Reads the volumes every `every.volumes` (at least [`MIN_VOLUME_POLL`]) until the future
    /// is dropped.
    pub async fn run_volumes(&self, source: &impl Source, every: PollConfig) {
        tokio::task::yield_now().await;
        tracing::debug!(volume_every = ?every.volumes, "polling StorageOS volumes for every controller");
        let mut tick = tokio::time::interval(every.volumes.max(MIN_VOLUME_POLL));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut known = Namespaces::default();
        loop {
            tick.tick().await;
            if self.volumes.receiver_count() > 0 {
                let taken = Utc::now();
                let read = known.read(source, Instant::now()).await;
                self.volumes.send_replace(Some(Arc::new(Snapshot { taken, read })));
            }
        }
    }
}

/// What the volume poll remembers of each namespace between reads.
#[derive(Default)]
struct Namespaces {
    /// By namespace ID: when its volumes were last read, found empty.
    empty_since_read: HashMap<String, Instant>,
    /// The last namespace list, and when it was read.
    listed: Option<(Instant, Vec<Namespace>)>,
    /// By namespace ID: its volumes at the last read that found some.
    last_read: HashMap<String, Arc<[Volume]>>,
}

/// Whether `pvc` lies in a namespace missing from `known` (the names the last list had): its
/// volume may be in a namespace StorageOS created since. A claim another provisioner makes (the
/// annotation names it) is not StorageOS's and asks for nothing.
fn unlisted_claim(pvc: &CachedPvc, known: &HashSet<&str>) -> bool {
    !pvc.annotated.by_another && pvc.namespace().is_some_and(|ns| !known.contains(ns.as_str()))
}

/// Whether the last namespace list still stands: younger than [`NAMESPACE_RELIST`], and no
/// claim in `pvcs` lies outside it.
fn list_stands(listed_at: Instant, list: &[Namespace], now: Instant, pvcs: &Store<CachedPvc>) -> bool {
    if now.duration_since(listed_at) >= NAMESPACE_RELIST {
        return false;
    }
    let known: HashSet<&str> = list.iter().map(|n| n.name.as_str()).collect();
    pvcs.find(|pvc| unlisted_claim(pvc, &known)).is_none()
}

/// The volumes `read`, as the `last` read's allocation when they are the same.
fn unless_unchanged(last: Option<Arc<[Volume]>>, read: Vec<Volume>) -> Arc<[Volume]> {
    match last {
        Some(same) if *same == *read => same,
        _ => Arc::from(read),
    }
}

impl Namespaces {
    /// Lists the namespaces (or keeps the last list, see [`NAMESPACE_RELIST`]), then the volumes
    /// of each one that held volumes, is new, or was last read empty at least
    /// [`EMPTY_NAMESPACE_RECHECK`] ago.
    async fn read(&mut self, source: &impl Source, now: Instant) -> Result<VolumeList, Arc<storageos::Error>> {
        let (listed_at, namespaces) = match self.listed.take() {
            Some((at, list)) if list_stands(at, &list, now, source.pvcs()) => (at, list),
            _ => match source.list_namespaces().await {
                Ok(list) => (now, list),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list StorageOS namespaces; trying again at the next poll");
                    return Err(Arc::new(e));
                }
            },
        };
        self.empty_since_read
            .retain(|id, _| namespaces.iter().any(|n| n.id == *id));
        let mut last_read = std::mem::take(&mut self.last_read);
        let mut list = VolumeList::default();
        for ns in &namespaces {
            if self.skip(&ns.id, now) {
                continue;
            }
            match source.list_volumes(&ns.id).await {
                Ok(v) if v.is_empty() => {
                    self.empty_since_read.insert(ns.id.clone(), now);
                }
                Ok(v) => {
                    self.empty_since_read.remove(&ns.id);
                    let volumes = unless_unchanged(last_read.remove(&ns.id), v);
                    self.last_read.insert(ns.id.clone(), volumes.clone());
                    list.by_namespace.push(volumes);
                }
                Err(e) if e.is_not_found() => {} // deleted since it was listed
                Err(e) => {
                    tracing::warn!(namespace = %ns.name, error = %e, "cannot list the volumes of a StorageOS namespace; trying again at the next poll");
                    self.empty_since_read.remove(&ns.id);
                    list.failed.push((ns.name.clone(), Arc::new(e)));
                }
            }
        }
        list.namespaces = namespaces.clone();
        self.listed = Some((listed_at, namespaces));
        Ok(list)
    }

    /// Whether the namespace's earlier empty answer still stands.
    fn skip(&self, id: &str, now: Instant) -> bool {
        self.empty_since_read
            .get(id)
            .is_some_and(|read| now.duration_since(*read) < EMPTY_NAMESPACE_RECHECK)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storageos::kube::{CSI_DRIVER, PROVISIONER_ANNOTATIONS};

    #[test]
    fn an_empty_namespace_is_read_again_only_after_the_recheck_interval() {
        let mut n = Namespaces::default();
        let t0 = Instant::now();
        assert!(!n.skip("a", t0), "a namespace never read is read");
        n.empty_since_read.insert("a".into(), t0);
        assert!(n.skip("a", t0 + Duration::from_secs(5)));
        assert!(!n.skip("a", t0 + EMPTY_NAMESPACE_RECHECK));
    }

    fn namespace(name: &str) -> Namespace {
        serde_json::from_value(serde_json::json!({
            "id": format!("id-{name}"), "name": name, "labels": {},
            "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z", "version": "1"
        }))
        .unwrap()
    }

    fn claim(namespace: &str, volume: Option<&str>, provisioner: Option<&str>) -> CachedPvc {
        let annotations: serde_json::Value = provisioner
            .map(|p| serde_json::json!({PROVISIONER_ANNOTATIONS[0]: p}))
            .unwrap_or_default();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "namespace": namespace, "annotations": annotations},
            "spec": {"volumeName": volume},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_storageos_claim_outside_the_list_asks_for_a_new_namespace_list() {
        let listed = [namespace("app")];
        let known: HashSet<&str> = listed.iter().map(|n| n.name.as_str()).collect();
        assert!(!unlisted_claim(&claim("app", Some("pv1"), None), &known), "listed");
        assert!(
            unlisted_claim(&claim("new", None, Some(CSI_DRIVER)), &known),
            "being provisioned"
        );
        assert!(
            !unlisted_claim(&claim("new", Some("pv2"), Some("ebs.csi.aws.com")), &known),
            "another provisioner's"
        );
        assert!(unlisted_claim(&claim("new", Some("pv2"), Some(CSI_DRIVER)), &known));
        assert!(unlisted_claim(&claim("new", Some("pv2"), None), &known), "pre-bound");
    }

    #[test]
    fn the_last_list_stands_for_a_minute_unless_a_claim_lies_outside_it() {
        let listed = [namespace("app")];
        let (store, mut writer) = kube::runtime::reflector::store::<CachedPvc>();
        let t0 = Instant::now();
        assert!(list_stands(t0, &listed, t0, &store), "no claims");
        assert!(!list_stands(t0, &listed, t0 + NAMESPACE_RELIST, &store), "a minute old");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(claim("app", Some("pv1"), None)));
        assert!(list_stands(t0, &listed, t0, &store), "a claim in a listed namespace");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(claim(
            "new",
            None,
            Some(CSI_DRIVER),
        )));
        assert!(!list_stands(t0, &listed, t0, &store), "a claim outside it");
    }

    #[test]
    fn volumes_read_as_before_keep_their_allocation_and_any_change_makes_a_new_one() {
        let volume = |name: &str| Volume {
            name: name.into(),
            ..Volume::default()
        };
        let first = unless_unchanged(None, vec![volume("pv1"), volume("pv2")]);
        let same = unless_unchanged(Some(first.clone()), vec![volume("pv1"), volume("pv2")]);
        assert!(Arc::ptr_eq(&first, &same));
        let changed = unless_unchanged(Some(first.clone()), vec![volume("pv1")]);
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed.len(), 1);
        let list = VolumeList {
            by_namespace: vec![first, changed],
            ..VolumeList::default()
        };
        let names: Vec<_> = list.volumes().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["pv1", "pv2", "pv1"]);
    }

    fn down() -> storageos::Error {
        storageos::Error::from_status(500, "GET", "/v2/namespaces", "down".into())
    }

    #[test]
    fn only_a_read_of_every_namespace_is_complete() {
        let mut list = VolumeList::default();
        let snap = |l: &VolumeList| Snapshot {
            taken: Utc::now(),
            read: Ok(l.clone()),
        };
        assert!(snap(&list).complete().is_some());
        list.failed.push(("ns".into(), Arc::new(down())));
        assert!(snap(&list).complete().is_none());
        let failed: VolumeSnapshot = Snapshot {
            taken: Utc::now(),
            read: Err(Arc::new(down())),
        };
        assert!(failed.complete().is_none());
    }

    /// Counts each read; answers with what it is told.
    struct Fake {
        calls: std::sync::Mutex<HashMap<&'static str, usize>>,
        nodes_fail: std::sync::atomic::AtomicBool,
        namespaces: Vec<Namespace>,
        pvcs: Store<CachedPvc>,
    }

    impl Fake {
        fn new(namespaces: Vec<Namespace>) -> Arc<Self> {
            Arc::new(Self {
                calls: Default::default(),
                nodes_fail: Default::default(),
                namespaces,
                pvcs: kube::runtime::reflector::store().0,
            })
        }

        fn count(&self, route: &'static str) {
            *self.calls.lock().unwrap().entry(route).or_default() += 1;
        }

        fn calls(&self, route: &str) -> usize {
            self.calls.lock().unwrap().get(route).copied().unwrap_or(0)
        }
    }

    impl Source for Fake {
        async fn list_nodes(&self) -> Result<Vec<Node>, storageos::Error> {
            self.count("nodes");
            if self.nodes_fail.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(down());
            }
            Ok(vec![Node {
                name: "n1".into(),
                ..Node::default()
            }])
        }

        async fn list_namespaces(&self) -> Result<Vec<Namespace>, storageos::Error> {
            self.count("namespaces");
            Ok(self.namespaces.clone())
        }

        async fn list_volumes(&self, _namespace_id: &str) -> Result<Vec<Volume>, storageos::Error> {
            self.count("volumes");
            Ok(vec![Volume {
                name: "pv1".into(),
                ..Volume::default()
            }])
        }

        fn pvcs(&self) -> &Store<CachedPvc> {
            &self.pvcs
        }
    }

    const EVERY: PollConfig = PollConfig {
        nodes: Duration::from_secs(5),
        volumes: Duration::from_secs(2),
    };

    fn start(poll: &StorageOSPoll, source: &Arc<Fake>) -> tokio::task::JoinHandle<()> {
        let (poll, source) = (poll.clone(), source.clone());
        tokio::spawn(async move {
            let source = source.as_ref();
            tokio::join!(poll.run_nodes(source, EVERY), poll.run_volumes(source, EVERY));
        })
    }

    #[tokio::test(start_paused = true)]
    async fn nodes_are_read_at_once_then_every_interval_and_an_unwatched_kind_is_never_read() {
        let source = Fake::new(vec![namespace("app")]);
        let poll = StorageOSPoll::default();
        let mut nodes = poll.subscriptions().nodes();
        let task = start(&poll, &source);
        let t0 = Instant::now();
        let first = next(&mut nodes).await.unwrap();
        assert_eq!(t0.elapsed(), Duration::ZERO, "the first read is at once");
        assert_eq!(first.ok().map(Vec::len), Some(1));
        next(&mut nodes).await.unwrap();
        assert_eq!(t0.elapsed(), EVERY.nodes);
        tokio::time::sleep(EVERY.nodes * 3 + Duration::from_secs(1)).await;
        assert_eq!(source.calls("nodes"), 5, "reads at 0, 5, 10, 15, 20 s");
        assert_eq!(
            source.calls("namespaces") + source.calls("volumes"),
            0,
            "nobody watches volumes"
        );
        assert!(poll.subscriptions().latest_nodes().is_some());
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_is_published_with_its_error_and_the_next_poll_tries_again() {
        let source = Fake::new(Vec::new());
        source.nodes_fail.store(true, std::sync::atomic::Ordering::SeqCst);
        let poll = StorageOSPoll::default();
        let mut nodes = poll.subscriptions().nodes();
        let task = start(&poll, &source);
        let failed = next(&mut nodes).await.unwrap();
        let e = failed.read.as_ref().unwrap_err();
        assert_eq!(e.status(), Some(500), "the typed error reaches the subscriber: {e}");
        source.nodes_fail.store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(next(&mut nodes).await.unwrap().ok().is_some());
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn volumes_are_read_every_poll_but_the_namespace_list_only_every_relist_interval() {
        let source = Fake::new(vec![namespace("app"), namespace("db")]);
        let poll = StorageOSPoll::default();
        let mut volumes = poll.subscriptions().volumes();
        let task = start(&poll, &source);
        let first = next(&mut volumes).await.unwrap();
        assert_eq!(first.complete().map(|l| l.volumes().count()), Some(2));
        for _ in 0..4 {
            next(&mut volumes).await.unwrap();
        }
        assert_eq!(source.calls("volumes"), 10, "two namespaces, five polls");
        assert_eq!(source.calls("namespaces"), 1, "listed once");
        tokio::time::sleep(NAMESPACE_RELIST).await;
        assert_eq!(source.calls("namespaces"), 2, "listed again after a minute");
        assert_eq!(source.calls("nodes"), 0, "nobody watches nodes");
        task.abort();
    }
}
