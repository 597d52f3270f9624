//! The StorageOS state mirror ("storageos-mirror"): `nodes.api.storageos.com` and
//! `volumes.api.storageos.com` objects that show in kubectl what the StorageOS API reports
//! (docs/observability.md).
//!
//! - Every node and volume snapshot of the shared poll is compared with the mirror objects, read
//!   from a watch cache; only a difference is written (server-side apply, status through its
//!   subresource), so an idle cluster costs no writes. The object itself is applied only when it
//!   is new or its owner changed; a changed status is one request. What was written and the
//!   cache does not show yet counts as written ([`build::Written`]): a watch that lags behind a
//!   pass over thousands of mirrors does not make the next poll write them all again.
//! - The node mirrors are first written once the volumes have been read (or their read failed),
//!   so that their first write already says whether each node is safe to drain; a pass that
//!   wrote every node twice (first without, then with it) would double a first install's writes.
//! - A node's mirror is owned by the Kubernetes Node of its name, a volume's (named after its PV,
//!   in its PVC's namespace) by its PVC: Kubernetes deletes them with their owner.
//! - Mirrors whose StorageOS object is gone are deleted, only after a complete read (a failed
//!   node list, or a volume read that missed a namespace, deletes nothing).
//! - Volumes without a PVC (not made by CSI, or whose PVC is not there) are not mirrored.

pub mod build;
pub mod cached;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde_json::json;

use super::Context;
use super::drain::rule as drain;
use super::node_state::NodeState;
use super::snapshot::{OnSnapshot, Subscription};
use super::volume_claims::{FIELD_MANAGER, owner_of, pvc_of_in};
use crate::cached_pvc::CachedPvc;
use crate::metrics::MirrorStep;
use crate::runtime::kube::view_store::{self, Listed, View, ViewStore};
use crate::storageos::models::Health;
use crate::storageos_poll::{NodeSnapshot, VolumeSnapshot};
use build::{Drain, MirrorPlace, NodeDrain, Writes, Written};
use cached::{CachedMirror, CachedNodeMirror, CachedVolume, NodeSeen, StatusDigest};

/// The controller name in logs.
pub const CONTROLLER: &str = "storageos-mirror";
/// Mirror writes in flight at once: a first pass over thousands of volumes finishes in seconds,
/// not minutes, without flooding the apiserver.
const WRITES_IN_FLIGHT: usize = 8;

/// Why one mirror object was not written or deleted; retried at the next snapshot.
#[derive(Debug, thiserror::Error)]
#[error("Kubernetes API: {}; retried at the next StorageOS poll (check the api-manager's RBAC on api.storageos.com)", brief(.0))]
pub struct Error(#[from] kube::Error);

/// The apiserver's message alone (the whole status is noise in a log line).
fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

/// Runs the mirror until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    let subscription = Subscription::to::<Mirror>(&ctx);
    let (caches, watches) = Caches::start(&ctx);
    let work = async {
        caches.ready(&ctx).await;
        tracing::info!(controller = CONTROLLER, "mirroring StorageOS nodes and volumes");
        let mut mirror = Mirror {
            ctx: &ctx,
            caches: &caches,
            last_online: HashMap::new(),
            node_names: None,
            drain: None,
            volumes_read: false,
            waiting_nodes: None,
            written_nodes: HashMap::new(),
            written_volumes: HashMap::new(),
        };
        subscription.follow(&mut mirror).await;
    };
    tokio::join!(watches, work);
}

/// What the mirror reads from Kubernetes: its own objects, and the owners' UIDs.
struct Caches {
    /// The node mirrors, each with what its status says ([`cached`]).
    nodes: ViewStore<CachedNodeMirror>,
    /// The volume mirrors, each with a digest of its status ([`cached`]).
    volumes: ViewStore<CachedVolume>,
    /// The process's Node cache (`Context::nodes`): the node mirrors' owners.
    k8s_nodes: Store<NodeState>,
    /// The process's PVC cache (`Context::pvcs`).
    pvcs: Store<CachedPvc>,
}

impl Caches {
    fn start(ctx: &Context) -> (Self, impl Future<Output = ()>) {
        let client = &ctx.kube;
        let (nodes, volumes) = (ViewStore::default(), ViewStore::default());
        let a = follow(Api::all(client.clone()), nodes.clone());
        let b = follow(Api::all(client.clone()), volumes.clone());
        let k8s_nodes = ctx.nodes.get(client, CONTROLLER);
        let pvcs = ctx.pvcs.get(client, CONTROLLER);
        let drive = async move {
            tokio::join!(a, b);
        };
        (
            Self {
                nodes,
                volumes,
                k8s_nodes,
                pvcs,
            },
            drive,
        )
    }

    /// Waits until every cache holds its first full list (the process's shared caches through
    /// `ctx`: they have other readers).
    async fn ready(&self, ctx: &Context) {
        let _ = tokio::join!(
            self.nodes.wait_until_ready(),
            self.volumes.wait_until_ready(),
            ctx.nodes.ready(),
            ctx.pvcs.ready()
        );
    }
}

/// Keeps `store` filled from a watch of every object of `api`'s kind, for ever; watch errors are
/// logged and retried with backoff.
async fn follow<V: View + std::fmt::Debug>(api: Api<Listed<V>>, store: ViewStore<V>)
where
    V::Of: Resource<DynamicType = ()>,
{
    let kind = V::Of::kind(&()).to_string();
    let events = watcher(api, crate::runtime::kube::cache::every()).default_backoff();
    view_store::reflect_views(events, store)
        .for_each(|result| {
            if let Err(e) = result {
                tracing::warn!(controller = CONTROLLER, %kind, error = %e, "watch failed; retrying");
            }
            std::future::ready(())
        })
        .await;
}

/// A mirror to write: where, its name (and key in the written map), its owner and status, what
/// of it to write, its `resourceVersion` in the cache, and what to remember of the status once
/// written (what the cache's view of it is compared with: the status, or its digest).
struct Stale<K, S, W, Key> {
    api: Api<K>,
    key: Key,
    name: String,
    owner: Option<OwnerReference>,
    status: S,
    remember: W,
    writes: Writes,
    cached_version: Option<String>,
}

/// What to write of the mirror `cached` (from the watch cache) to give it `owner` and `want`,
/// given what this process has `written` to it.
fn plan<S: PartialEq>(
    cached: Option<&CachedMirror<S>>,
    written: Option<&Written<S>>,
    owner: Option<&OwnerReference>,
    want: &S,
) -> Writes {
    build::writes(build::known(cached, written, Instant::now()), owner, want)
}

struct Mirror<'a> {
    ctx: &'a Context,
    caches: &'a Caches,
    /// By node name: the last poll that saw it online.
    last_online: HashMap<String, DateTime<Utc>>,
    /// StorageOS node ID → name, from the last node list read (volumes wait for one).
    node_names: Option<HashMap<String, String>>,
    /// By StorageOS node ID, the volumes whose last copy it holds (as many as a mirror shows),
    /// from the last complete volume read (`None` before one).
    drain: Option<HashMap<String, NodeDrain>>,
    /// Whether a volume snapshot (complete, partial or failed) has been handled.
    volumes_read: bool,
    /// A node snapshot that came before any volume snapshot: written after the first one.
    waiting_nodes: Option<Arc<NodeSnapshot>>,
    /// What was written to each node mirror (by name) and the cache may not show yet.
    written_nodes: HashMap<String, Written<NodeSeen>>,
    /// The same for the volume mirrors (their status's digest).
    written_volumes: HashMap<MirrorPlace, Written<StatusDigest>>,
}

impl OnSnapshot for Mirror<'_> {
    const NODES: bool = true;
    const VOLUMES: bool = true;

    async fn nodes(&mut self, snapshot: &NodeSnapshot) {
        if let (false, Some(nodes)) = (self.volumes_read, snapshot.ok()) {
            // The node list is kept for its names (volumes show node names), and its mirrors
            // are written after the first volume read says what each node holds.
            self.node_names = Some(nodes.iter().map(|n| (n.id.clone(), n.name.to_string())).collect());
            self.waiting_nodes = Some(Arc::new(snapshot.clone()));
            return;
        }
        self.write_nodes(snapshot).await;
    }

    async fn volumes(&mut self, snapshot: &VolumeSnapshot) {
        self.write_volumes(snapshot).await;
        self.volumes_read = true;
        if let Some(nodes) = self.waiting_nodes.take() {
            self.write_nodes(&nodes).await;
        }
    }
}

impl Mirror<'_> {
    async fn write_nodes(&mut self, snapshot: &NodeSnapshot) {
        // A failed read says nothing: nothing is written or deleted.
        let Some(nodes) = snapshot.ok() else { return };
        let started = Instant::now();
        self.ctx.metrics.set_nodes(nodes.iter().map(|n| n.health.as_str()));
        self.node_names = Some(nodes.iter().map(|n| (n.id.clone(), n.name.to_string())).collect());
        for n in nodes.iter().filter(|n| n.health == Health::Online) {
            self.last_online.insert(n.name.to_string(), snapshot.taken);
        }
        self.last_online.retain(|name, _| nodes.iter().any(|n| n.name == *name));
        let api: Api<Listed<CachedNodeMirror>> = Api::all(self.ctx.kube.clone());
        let mut stale = Vec::new();
        for n in nodes {
            let cached = self.caches.nodes.get("", &n.name);
            let written = self.written_nodes.get(n.name.as_str());
            // The status it has, as far as known (written and not yet in the cache included).
            let previous = build::known(cached.as_deref(), written, Instant::now()).and_then(|k| k.status);
            let nothing = NodeDrain::default();
            let drain = Drain {
                policy: self.ctx.config.drain.policy,
                of_node: self
                    .drain
                    .as_ref()
                    .map(|by_node| by_node.get(&n.id).unwrap_or(&nothing)),
            };
            let k8s_node = self.caches.k8s_nodes.get(&ObjectRef::new(&n.name));
            let want = build::with_eligibility(
                build::node_status(
                    n,
                    previous,
                    snapshot.taken,
                    self.last_online.get(n.name.as_str()).copied(),
                    drain,
                ),
                k8s_node.as_ref().map(|k| &k.labels),
            );
            let owner = k8s_node.and_then(|k| owner_of(k.as_ref()));
            let seen = NodeSeen::of(&want);
            let writes = plan(cached.as_deref(), written, owner.as_ref(), &seen);
            if writes.any() {
                stale.push(Stale {
                    api: api.clone(),
                    key: n.name.to_string(),
                    name: n.name.to_string(),
                    owner,
                    remember: seen,
                    status: want,
                    writes,
                    cached_version: cached.map(|c| c.version.to_string()),
                });
            }
        }
        let saved = self.save_all(stale, "Node", MirrorStep::SaveNode).await;
        // Only writes the cache does not show yet are kept (a few, not a copy of every mirror).
        let (cache, now) = (&self.caches.nodes, Instant::now());
        self.written_nodes.retain(|name, w| {
            let cached = cache.get("", name);
            w.stands(cached.as_deref().map(|c| c.version.as_str()), now)
        });
        // A first pass fills it with every mirror; the room is not kept once the cache caught up.
        self.written_nodes.shrink_to_fit();
        self.written_nodes.extend(saved);
        let known: HashSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        for (_, name, orphan) in self.caches.nodes.entries() {
            if !known.contains(name.as_str()) {
                let deleted = Instant::now();
                remove(&api, &name, &orphan.uid).await;
                self.observe(MirrorStep::DeleteNode, deleted);
            }
        }
        self.observe(MirrorStep::SyncNode, started);
    }

    async fn write_volumes(&mut self, snapshot: &VolumeSnapshot) {
        let Some(list) = snapshot.ok() else { return };
        // Shown on the node mirrors at the next node poll; only a complete read may say safe.
        if list.complete() {
            let pvcs = &self.caches.pvcs;
            let view = drain::view(list, self.ctx.config.drain.policy, |ns, pvc, pv| {
                pvcs.get(&ObjectRef::new(pvc).within(ns))
                    .is_some_and(|p| p.bound_pv() == Some(pv))
            });
            self.drain = Some(build::by_node(view.at_risk, view.unprotected, view.orphaned));
        }
        let Some(node_names) = self.node_names.as_ref() else {
            tracing::debug!(controller = CONTROLLER, "volume mirrors wait for a node list");
            return;
        };
        let started = Instant::now();
        let mut wanted: HashSet<MirrorPlace> = HashSet::new();
        let mut stale = Vec::new();
        let mut healths = Vec::new();
        for (v, storageos_namespace) in list.volumes_with_namespace() {
            let Some((namespace, pvc)) = pvc_of_in(v, storageos_namespace) else {
                continue;
            };
            // Owned by the PVC only when it is bound to this volume's PV (never an unbound PVC
            // that happens to have the name in the volume's labels).
            let Some(owner) = self
                .caches
                .pvcs
                .get(&ObjectRef::new(&pvc).within(&namespace))
                .filter(|p| p.bound_pv() == Some(v.name.as_str()))
                .and_then(|p| owner_of(p.as_ref()))
            else {
                continue;
            };
            let key = MirrorPlace {
                namespace,
                name: v.name.clone(),
            };
            let want = build::volume_status(v, &pvc, node_names);
            let digest = StatusDigest::of(&want);
            healths.push(want.health.clone());
            let cached = self.caches.volumes.get(&key.namespace, &key.name);
            let writes = plan(cached.as_deref(), self.written_volumes.get(&key), Some(&owner), &digest);
            if writes.any() {
                stale.push(Stale {
                    api: Api::<Listed<CachedVolume>>::namespaced(self.ctx.kube.clone(), &key.namespace),
                    key: key.clone(),
                    name: key.name.clone(),
                    owner: Some(owner),
                    status: want,
                    remember: digest,
                    writes,
                    cached_version: cached.map(|c| c.version.to_string()),
                });
            }
            wanted.insert(key);
        }
        let saved = self.save_all(stale, "Volume", MirrorStep::SaveVolume).await;
        let (cache, now) = (&self.caches.volumes, Instant::now());
        self.written_volumes.retain(|key, w| {
            let cached = cache.get(&key.namespace, &key.name);
            w.stands(cached.as_deref().map(|c| c.version.as_str()), now)
        });
        self.written_volumes.shrink_to_fit();
        self.written_volumes.extend(saved);
        if list.complete() {
            // A partial read would under-count: the counts stand until a complete one.
            self.ctx.metrics.set_volumes(healths.iter().map(String::as_str));
            for (namespace, name, orphan) in self.caches.volumes.entries() {
                let key = MirrorPlace {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                };
                if !wanted.contains(&key) {
                    let api: Api<Listed<CachedVolume>> = Api::namespaced(self.ctx.kube.clone(), &key.namespace);
                    let deleted = Instant::now();
                    remove(&api, &key.name, &orphan.uid).await;
                    self.observe(MirrorStep::DeleteVolume, deleted);
                }
            }
        }
        self.observe(MirrorStep::SyncVolume, started);
    }

    /// Writes the `stale` mirrors of `kind`, [`WRITES_IN_FLIGHT`] at once; a failure is logged
    /// and retried at the next snapshot. Returns what was written, by key.
    async fn save_all<K, S, W, Key>(
        &self,
        stale: Vec<Stale<K, S, W, Key>>,
        kind: &str,
        step: MirrorStep,
    ) -> Vec<(Key, Written<W>)>
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        S: Serialize,
    {
        stream::iter(stale)
            .map(|m| async move {
                let saved = Instant::now();
                let namespace = m.api.namespace().unwrap_or_default();
                let result = save(&m.api, &m.name, &m.owner, kind, &m.status, m.writes).await;
                let result = result.map(|made| std::iter::once(m.cached_version).chain(made).collect());
                self.observe(step, saved);
                match result {
                    Ok(older_versions) => {
                        tracing::debug!(controller = CONTROLLER, %kind, name = %m.name, %namespace, object = m.writes.object, "mirror written");
                        Some((
                            m.key,
                            Written {
                                older_versions,
                                owner: m.owner,
                                status: m.remember,
                                at: saved,
                            },
                        ))
                    }
                    Err(e) => {
                        tracing::warn!(controller = CONTROLLER, %kind, name = %m.name, %namespace, error = %e, "cannot write the mirror");
                        None
                    }
                }
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .filter_map(std::future::ready)
            .collect()
            .await
    }

    fn observe(&self, step: MirrorStep, since: Instant) {
        self.ctx.metrics.observe_mirror(step, since.elapsed().as_secs_f64());
    }
}

/// Writes one mirror: its metadata (owner) and empty spec, then its status, each only when
/// `writes` says so. A status write that finds no object (deleted since the cache saw it)
/// writes the object first. Returns the `resourceVersion`s of the object writes that a status
/// write followed (the cache may show them before it shows the status).
async fn save<K, S>(
    api: &Api<K>,
    name: &str,
    owner: &Option<OwnerReference>,
    kind: &str,
    status: &S,
    writes: Writes,
) -> Result<Vec<Option<String>>, Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: Serialize,
{
    let api_version = K::api_version(&());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let object = json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "ownerReferences": owner.iter().collect::<Vec<_>>()},
        "spec": {},
    });
    let version = |o: K| o.meta().resource_version.clone();
    let mut before_status = Vec::new();
    if writes.object {
        before_status.push(version(api.patch(name, &params, &Patch::Apply(&object)).await?));
    }
    if writes.status {
        let status = json!({"apiVersion": api_version, "kind": kind, "status": status});
        match api.patch_status(name, &params, &Patch::Apply(&status)).await {
            Err(kube::Error::Api(e)) if e.code == 404 && !writes.object => {
                before_status.push(version(api.patch(name, &params, &Patch::Apply(&object)).await?));
                api.patch_status(name, &params, &Patch::Apply(&status)).await?;
            }
            other => {
                other?;
            }
        }
    } else {
        // The object write is the last one: the cache showing it shows the write.
        before_status.clear();
    }
    Ok(before_status)
}

/// Deletes the orphaned mirror `name` with this `uid` (only this very object: a newer one of
/// the same name stays).
async fn remove<K>(api: &Api<K>, name: &str, uid: &str)
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            tracing::info!(controller = CONTROLLER, kind = %K::kind(&()), %name, "StorageOS no longer reports it: mirror deleted")
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => {
            tracing::warn!(controller = CONTROLLER, kind = %K::kind(&()), %name, error = %Error(e), "cannot delete the orphaned mirror; retried at the next poll")
        }
    }
}
