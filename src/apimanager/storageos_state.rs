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
//! ever created. A namespace StorageOS creates for a new volume is read at the first poll that
//! sees it.
//!
//! Whoever consumes a snapshot also drives the poll ([`StorageOSState::drive`]); only one driver
//! polls at a time, the others wait and take over if it stops. A kind nobody subscribed to is
//! not read.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Mutex, watch};
use tokio::time::Instant;

use super::controllers::Context;
use crate::storageos::models::{Namespace, Node, Volume};

/// How often a namespace that held no volumes at its last read is read again.
pub const EMPTY_NAMESPACE_RECHECK: Duration = Duration::from_secs(60);
/// The shortest volume poll interval (`-volume-poll-interval 0s` would otherwise spin).
pub const MIN_VOLUME_POLL: Duration = Duration::from_secs(1);

/// One read of something from StorageOS.
#[derive(Debug, Clone)]
pub struct Snapshot<T> {
    /// When the read started.
    pub taken: DateTime<Utc>,
    /// What was read, or why nothing was.
    pub read: Result<T, String>,
}

/// Every StorageOS node, from one `GET /nodes` (always complete when `Ok`).
pub type NodeSnapshot = Snapshot<Vec<Node>>;
/// Every StorageOS volume the read could see.
pub type VolumeSnapshot = Snapshot<VolumeList>;

/// The volumes of every namespace, and the namespaces whose volumes could not be read.
#[derive(Debug, Clone, Default)]
pub struct VolumeList {
    pub namespaces: Vec<Namespace>,
    pub volumes: Vec<Volume>,
    /// `(namespace name, error)` of each namespace whose volumes are missing from `volumes`.
    pub failed: Vec<(String, String)>,
}

impl VolumeList {
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

/// The latest snapshots, shared by the controllers of one api-manager.
pub struct StorageOSState {
    nodes: Slot<Vec<Node>>,
    volumes: Slot<VolumeList>,
    driver: Mutex<()>,
}

impl Default for StorageOSState {
    fn default() -> Self {
        Self {
            nodes: watch::channel(None).0,
            volumes: watch::channel(None).0,
            driver: Mutex::new(()),
        }
    }
}

impl std::fmt::Debug for StorageOSState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageOSState").finish_non_exhaustive()
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

impl StorageOSState {
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

    /// Polls StorageOS for as long as it runs, unless another driver already does (then it
    /// waits to take over). Every consumer runs it next to its own work.
    pub async fn drive(&self, ctx: &Context) {
        // Lets consumers started together subscribe before the first tick.
        tokio::task::yield_now().await;
        let _driving = self.driver.lock().await;
        let node_every = ctx.args.node_poll();
        let volume_every = ctx.args.volume_poll_interval.max(MIN_VOLUME_POLL);
        tracing::debug!(node_every = ?node_every, volume_every = ?volume_every, "polling StorageOS for every controller");
        let mut node_tick = tokio::time::interval(node_every);
        node_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut volume_tick = tokio::time::interval(volume_every);
        volume_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut known = Namespaces::default();
        loop {
            tokio::select! {
                _ = node_tick.tick() => {
                    if self.nodes.receiver_count() > 0 {
                        let taken = Utc::now();
                        let read = ctx.metrics.track("list_nodes", ctx.api.list_nodes()).await;
                        if let Err(e) = &read {
                            tracing::warn!(error = %e, "cannot list StorageOS nodes; trying again at the next poll");
                        }
                        let read = read.map_err(|e| e.to_string());
                        self.nodes.send_replace(Some(Arc::new(Snapshot { taken, read })));
                    }
                }
                _ = volume_tick.tick() => {
                    if self.volumes.receiver_count() > 0 {
                        let taken = Utc::now();
                        let read = known.read(ctx, Instant::now()).await;
                        self.volumes.send_replace(Some(Arc::new(Snapshot { taken, read })));
                    }
                }
            }
        }
    }
}

/// What the volume poll remembers of each namespace between reads.
#[derive(Default)]
struct Namespaces {
    /// By namespace ID: when its volumes were last read, found empty.
    empty_since_read: HashMap<String, Instant>,
}

impl Namespaces {
    /// Lists the namespaces, then the volumes of each one that held volumes, is new, or was
    /// last read empty at least [`EMPTY_NAMESPACE_RECHECK`] ago.
    async fn read(&mut self, ctx: &Context, now: Instant) -> Result<VolumeList, String> {
        let namespaces = match ctx.metrics.track("list_namespaces", ctx.api.list_namespaces()).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list StorageOS namespaces; trying again at the next poll");
                return Err(e.to_string());
            }
        };
        self.empty_since_read
            .retain(|id, _| namespaces.iter().any(|n| n.id == *id));
        let mut list = VolumeList::default();
        for ns in &namespaces {
            if self.skip(&ns.id, now) {
                continue;
            }
            match ctx.metrics.track("list_volumes", ctx.api.list_volumes(&ns.id)).await {
                Ok(v) if v.is_empty() => {
                    self.empty_since_read.insert(ns.id.clone(), now);
                }
                Ok(v) => {
                    self.empty_since_read.remove(&ns.id);
                    list.volumes.extend(v);
                }
                Err(e) if e.is_not_found() => {} // deleted since it was listed
                Err(e) => {
                    tracing::warn!(namespace = %ns.name, error = %e, "cannot list the volumes of a StorageOS namespace; trying again at the next poll");
                    self.empty_since_read.remove(&ns.id);
                    list.failed.push((ns.name.clone(), e.to_string()));
                }
            }
        }
        list.namespaces = namespaces;
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
mod tests {
    use super::*;

    #[test]
    fn an_empty_namespace_is_read_again_only_after_the_recheck_interval() {
        let mut n = Namespaces::default();
        let t0 = Instant::now();
        assert!(!n.skip("a", t0), "a namespace never read is read");
        n.empty_since_read.insert("a".into(), t0);
        assert!(n.skip("a", t0 + Duration::from_secs(5)));
        assert!(!n.skip("a", t0 + EMPTY_NAMESPACE_RECHECK));
    }

    #[test]
    fn only_a_read_of_every_namespace_is_complete() {
        let mut list = VolumeList::default();
        let snap = |l: &VolumeList| Snapshot {
            taken: Utc::now(),
            read: Ok(l.clone()),
        };
        assert!(snap(&list).complete().is_some());
        list.failed.push(("ns".into(), "500".into()));
        assert!(snap(&list).complete().is_none());
        let failed: VolumeSnapshot = Snapshot {
            taken: Utc::now(),
            read: Err("down".into()),
        };
        assert!(failed.complete().is_none());
    }
}
