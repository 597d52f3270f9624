//! The build step of the mirror (pure): the status of each `api.storageos.com` object from a
//! StorageOS node or volume, and which objects to write or delete.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::cached::{CachedMirror, NodeSeen, OwnersDigest};
use crate::crd::{DRAIN_BLOCKED_SHOWN, DrainPolicy};
use crate::crd::{
    NodeCapacity, NodeMirrorStatus, SyncProgress, VolumeAttachment, VolumeMaster, VolumeMirrorStatus, VolumeNfs,
    VolumeReplica,
};
use crate::storageos::LabelSet as Labels;
use crate::storageos::models::{Health, LABEL_NFS_MOUNT_ENDPOINT, LABEL_REPLICAS, Node, Volume};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A time as the mirror writes it (whole seconds, so that a read-back compares equal).
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Bytes as a Kubernetes quantity, rounded down to whole GiB (whole MiB below 1 GiB).
pub fn quantity(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{}Gi", bytes / GIB)
    } else {
        format!("{}Mi", bytes / MIB)
    }
}

/// `status` with the eligibility of its Kubernetes Node, from that Node's `labels` (None while
/// the Node is not known: then nothing is said).
pub fn with_eligibility(mut status: NodeMirrorStatus, labels: Option<&Labels>) -> NodeMirrorStatus {
    let why = labels.and_then(|l| {
        crate::crd::contract::ineligible_os_arch(
            l.get("kubernetes.io/os").unwrap_or_default(),
            l.get("kubernetes.io/arch").unwrap_or_default(),
        )
    });
    status.eligible = labels.map(|_| why.is_none());
    status.ineligible_because = why;
    status
}

/// The status of the mirror of StorageOS node `n`, seen by the poll `taken`. `previous` is the
/// mirror's current status; `last_online` the last poll that saw the node online.
pub fn node_status(
    n: &Node,
    previous: Option<&NodeSeen>,
    taken: DateTime<Utc>,
    last_online: Option<DateTime<Utc>>,
    drain: Drain<'_>,
) -> NodeMirrorStatus {
    let health = n.health.as_str().to_string();
    let same = previous.filter(|p| p.health == health);
    let health_since = same
        .and_then(|p| p.health_since.as_deref().map(str::to_owned))
        .unwrap_or_else(|| timestamp(taken));
    let last_seen_online = match n.health {
        Health::Online => None,
        _ => same
            .and_then(|p| p.last_seen_online.as_deref().map(str::to_owned))
            .or_else(|| last_online.map(timestamp)),
    };
    NodeMirrorStatus {
        id: n.id.clone(),
        health,
        health_since: Some(health_since),
        last_seen_online,
        capacity: Some(NodeCapacity {
            total: quantity(n.capacity.total),
            free: quantity(n.capacity.free),
            available: quantity(n.capacity.available),
        }),
        labels: n.labels.to_map(),
        version: n.version.to_string(),
        created_at: Some(timestamp(n.created_at)),
        drain_policy: Some(drain.policy.to_string()),
        safe_to_drain: drain.of_node.map(|d| d.at_risk.count == 0),
        drain_blocked_by: drain.of_node.map(|d| d.at_risk.shown.to_vec()).unwrap_or_default(),
        drain_blocked_count: drain
            .of_node
            .filter(|d| d.at_risk.count > 0)
            .map(|d| d.at_risk.count_i64()),
        unprotected: drain.of_node.map(|d| d.unprotected.shown.to_vec()).unwrap_or_default(),
        unprotected_count: drain.of_node.map(|d| d.unprotected.count_i64()),
        orphaned: drain.of_node.map(|d| d.orphaned.shown.to_vec()).unwrap_or_default(),
        orphaned_count: drain
            .of_node
            .filter(|d| d.orphaned.count > 0)
            .map(|d| d.orphaned.count_i64()),
        // Set from the Kubernetes Node by [`with_eligibility`].
        eligible: None,
        ineligible_because: None,
    }
}

/// What the last complete volume read says about draining a node, under the cluster's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain<'a> {
    /// The cluster's drain policy (shown on every node mirror).
    pub policy: DrainPolicy,
    /// `None` before a complete volume read; then what the node holds.
    pub of_node: Option<&'a NodeDrain>,
}

#[cfg(test)]
impl Drain<'static> {
    /// Before any complete volume read, under the default policy.
    pub const UNKNOWN: Drain<'static> = Drain {
        policy: DrainPolicy::BlockIfReplicatedVolumeAtRisk,
        of_node: None,
    };
}

/// What a node mirror shows of the volumes whose last copy a node holds: how many of each kind,
/// and the first [`DRAIN_BLOCKED_SHOWN`] by name. The mirror keeps this between polls, not the
/// whole sets: a `BTreeSet` per node (a ~0.3 KiB B-tree node even for one volume) and every
/// volume's name were ~2 MB at 5,000 volumes, held for these figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeDrain {
    /// Volumes the policy protects (a drain waits for them).
    pub at_risk: Summary,
    /// Volumes with 0 replicas.
    pub unprotected: Summary,
    /// Volumes no PVC uses any more.
    pub orphaned: Summary,
}

/// How many, and the first few names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub count: usize,
    pub shown: Box<[String]>,
}

impl Summary {
    fn of(names: BTreeSet<String>) -> Self {
        Summary {
            count: names.len(),
            shown: names.into_iter().take(DRAIN_BLOCKED_SHOWN).collect(),
        }
    }

    fn count_i64(&self) -> i64 {
        i64::try_from(self.count).unwrap_or(i64::MAX)
    }
}

/// By StorageOS node ID, volume names (as the drain rule's view has them).
pub type ByNode = std::collections::BTreeMap<String, BTreeSet<String>>;

/// The state of every node of the drain rule's view (its `at_risk`, `unprotected` and
/// `orphaned`), by StorageOS node ID; a node absent from the map holds nothing
/// ([`NodeDrain::default`]).
pub fn by_node(at_risk: ByNode, unprotected: ByNode, orphaned: ByNode) -> HashMap<String, NodeDrain> {
    let mut out: HashMap<String, NodeDrain> = HashMap::new();
    for (id, names) in at_risk {
        out.entry(id).or_default().at_risk = Summary::of(names);
    }
    for (id, names) in unprotected {
        out.entry(id).or_default().unprotected = Summary::of(names);
    }
    for (id, names) in orphaned {
        out.entry(id).or_default().orphaned = Summary::of(names);
    }
    out
}

/// Where a volume's mirror lives: its PVC's namespace and name, and the PV (object) name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MirrorPlace {
    pub namespace: String,
    pub name: String,
}

/// What of one mirror must be written: the object itself (it does not exist, or its owner
/// changed) and its status (it differs from the one wanted). A mirror whose status changed costs
/// one request, not two; one whose nothing changed costs none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Writes {
    /// Apply the object (metadata: owner).
    pub object: bool,
    /// Apply the status subresource.
    pub status: bool,
}

impl Writes {
    /// Whether anything is written.
    pub fn any(self) -> bool {
        self.object || self.status
    }
}

/// A mirror as it stands, as far as the mirror knows: its owners and status.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Known<'a, S> {
    pub owners: OwnersDigest,
    pub status: Option<&'a S>,
}

/// What the mirror wrote to one object and the watch cache did not show yet. The cache follows
/// the apiserver's watch, which lags behind the writes by up to seconds on a busy control plane
/// (a first pass over thousands of mirrors); without this, the next poll would find the cache
/// still old and write the same status again (the requests succeed and change nothing, but they
/// are writes, counted in the audit log, that grow with the number of mirrors).
#[derive(Debug, Clone, PartialEq)]
pub struct Written<S> {
    /// The object's `resourceVersion`s older than this write that the cache may still show:
    /// the cached one when it was written (None: not cached), and the one its object write made
    /// when a status write followed (the watch shows both, one after the other).
    pub older_versions: Vec<Option<String>>,
    pub owner: Option<OwnerReference>,
    pub status: S,
    pub at: Instant,
}

impl<S> Written<S> {
    /// Whether this write still stands for the cache's view of its object, whose cached
    /// `resourceVersion` is `cached_version` (None: not cached): the cache shows a version older
    /// than the write, for at most [`WRITTEN_STANDS`]. Once not, it is forgotten.
    pub fn stands(&self, cached_version: Option<&str>, now: Instant) -> bool {
        self.older_versions.iter().any(|v| v.as_deref() == cached_version)
            && now.duration_since(self.at) < WRITTEN_STANDS
    }
}

/// How long a write stands for the cache's view of its object while the cache shows the object
/// as it was before: long enough for a slow watch, short enough that a write lost in between (an
/// object deleted before the cache saw it) is made again soon.
pub const WRITTEN_STANDS: Duration = Duration::from_secs(30);

/// The mirror as it stands: what this process last `written`, while the cache still shows the
/// very version it had when that was written (and for at most [`WRITTEN_STANDS`]), else the
/// `cached` object (None: no such object).
pub fn known<'a, S>(
    cached: Option<&'a CachedMirror<S>>,
    written: Option<&'a Written<S>>,
    now: Instant,
) -> Option<Known<'a, S>> {
    let cached_version = cached.map(|c| c.version.as_str());
    let pending = written.filter(|w| w.stands(cached_version, now));
    match (pending, cached) {
        (Some(w), _) => Some(Known {
            owners: OwnersDigest::of(w.owner.as_slice()),
            status: Some(&w.status),
        }),
        (None, Some(c)) => Some(Known {
            owners: c.owners,
            status: c.status.as_ref(),
        }),
        (None, None) => None,
    }
}

/// What to write so that the mirror `known` has `owner` and status `want`.
pub fn writes<S: PartialEq>(known: Option<Known<'_, S>>, owner: Option<&OwnerReference>, want: &S) -> Writes {
    match known {
        None => Writes {
            object: true,
            status: true,
        },
        Some(k) => Writes {
            object: k.owners != OwnersDigest::of(owner.map(std::slice::from_ref).unwrap_or_default()),
            status: k.status != Some(want),
        },
    }
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The status of the mirror of volume `v`; `node_names` maps StorageOS node IDs to names.
pub fn volume_status(v: &Volume, pvc: &str, node_names: &HashMap<String, String>) -> VolumeMirrorStatus {
    let name_of = |id: &str| node_names.get(id).cloned().unwrap_or_else(|| id.to_string());
    let wanted: i32 = v.labels.get(LABEL_REPLICAS).and_then(|r| r.parse().ok()).unwrap_or(0);
    let replicas: Vec<VolumeReplica> = v
        .replicas
        .iter()
        .map(|r| VolumeReplica {
            node: name_of(&r.node_id),
            health: r.health.to_string(),
            promotable: r.promotable,
            sync: (r.sync_progress.bytes_remaining > 0).then(|| SyncProgress {
                bytes_remaining: i64_of(r.sync_progress.bytes_remaining),
                throughput_bytes: i64_of(r.sync_progress.throughput_bytes),
                estimated_seconds_remaining: i64_of(r.sync_progress.estimated_seconds_remaining),
            }),
        })
        .collect();
    let ready = i32::try_from(replicas.iter().filter(|r| r.health == "ready").count()).unwrap_or(i32::MAX);
    let syncing = replicas.iter().any(|r| r.health == "syncing" || r.sync.is_some());
    let health = if v.master.health != Health::Online {
        "unavailable"
    } else if ready < wanted && syncing {
        "syncing"
    } else if ready < wanted {
        "degraded"
    } else {
        "healthy"
    };
    let attachment = match v.attachment_type.as_str() {
        "" => "detached",
        other => other,
    };
    let nfs = VolumeNfs {
        service_endpoint: v.nfs.service_endpoint.clone().filter(|e| !e.is_empty()),
        mount_endpoint: v.labels.get(LABEL_NFS_MOUNT_ENDPOINT).map(str::to_string),
    };
    VolumeMirrorStatus {
        id: v.id.clone(),
        pvc: pvc.to_string(),
        health: health.into(),
        size: quantity(v.size_bytes),
        size_bytes: i64_of(v.size_bytes),
        master: VolumeMaster {
            node: name_of(&v.master.node_id),
            health: v.master.health.as_str().into(),
        },
        replicas_wanted: wanted,
        unprotected: wanted == 0 && v.replicas.is_empty(),
        replicas_ready: format!("{ready}/{wanted}"),
        replicas,
        attachment: VolumeAttachment {
            type_: attachment.into(),
            node: (!v.attached_on.is_empty()).then(|| name_of(&v.attached_on)),
        },
        nfs: (nfs.service_endpoint.is_some() || nfs.mount_endpoint.is_some()).then_some(nfs),
    }
}

#[cfg(test)]
#[path = "build_tests.rs"]
mod tests;
