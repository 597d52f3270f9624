//! The mirrors as the mirror's watch caches keep them: identity, a digest of the owners, and a
//! digest of the status.
//!
//! The mirror reads a cached mirror for three things only: its UID and version (to delete an
//! orphan, and to tell whether the cache shows a write yet), and whether its owner and status
//! are what it would write. Digests answer the last two as well as the objects do. A status is
//! ten strings and a replica list, an owner reference four strings, and an `ObjectMeta` 360
//! bytes however little of it is set: at 5,000 volumes and nodes, cached with their metadata
//! in kube's store, the mirrors were ~14 MB of the api-manager's heap (docs/benchmarks.md).
//! A node mirror's next status is made from its previous one (since when it has had its
//! health, when it was last online), so a cached node mirror keeps those three fields beside
//! the digest, not its labels, capacity and drain details.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use smol_str::SmolStr;

use crate::crd::{NodeMirrorStatus, StorageOSNode, StorageOSVolume, VolumeMirrorStatus};
use crate::runtime::kube::view;
use crate::runtime::kube::view_store::{Listed, View};

/// A mirror as cached: its UID, version and owners' digest, and what its status says (`S`).
#[derive(Clone, Debug, PartialEq)]
pub struct CachedMirror<S> {
    pub uid: SmolStr,
    pub version: SmolStr,
    pub owners: OwnersDigest,
    /// `None` when it has no status, or one the mirror's own type cannot read (it writes it
    /// again).
    pub status: Option<S>,
}

/// A volume mirror as cached: its status's digest.
pub type CachedVolume = CachedMirror<StatusDigest>;
/// A node mirror as cached: what its status says ([`NodeSeen`]).
pub type CachedNodeMirror = CachedMirror<NodeSeen>;

/// What a cached mirror keeps of a status of its kind.
pub trait Shown: Clone + PartialEq + Send + Sync + std::fmt::Debug + 'static {
    /// The mirror's kind.
    type Of: Resource<DynamicType = ()>;
    /// The mirror's own status type, which the status is parsed as (so that a digest is of what
    /// the mirror would write).
    type Status: DeserializeOwned;
    fn of(status: &Self::Status) -> Self;
}

impl Shown for StatusDigest {
    type Of = StorageOSVolume;
    type Status = VolumeMirrorStatus;
    fn of(status: &VolumeMirrorStatus) -> Self {
        StatusDigest::of(status)
    }
}

impl Shown for NodeSeen {
    type Of = StorageOSNode;
    type Status = NodeMirrorStatus;
    fn of(status: &NodeMirrorStatus) -> Self {
        NodeSeen::of(status)
    }
}

impl<S: Shown> View for CachedMirror<S> {
    type Of = S::Of;
    fn listed<'de, D: Deserializer<'de>>(d: D) -> Result<Listed<Self>, D::Error> {
        let shape = MirrorShape::deserialize(d)?;
        let meta = &shape.metadata;
        let view = CachedMirror {
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            version: meta.resource_version.as_deref().unwrap_or_default().into(),
            owners: OwnersDigest::of(meta.owner_references.as_deref().unwrap_or_default()),
            status: shape
                .status
                .and_then(|s| serde_json::from_value::<S::Status>(s).ok())
                .map(|s| S::of(&s)),
        };
        Ok(Listed {
            metadata: shape.metadata,
            view,
        })
    }
}

/// The view alone (what the store keeps of the object parsed).
impl<'de, S: Shown> Deserialize<'de> for CachedMirror<S> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::listed(d).map(|listed| listed.view)
    }
}

/// A mirror as its watch parses it.
#[derive(Deserialize)]
struct MirrorShape {
    #[serde(default, deserialize_with = "view::meta")]
    metadata: ObjectMeta,
    /// Parsed as the mirror's own type once read whole; one it cannot read has no digest.
    status: Option<serde_json::Value>,
}

/// A digest of a mirror's status ([`VolumeMirrorStatus`], [`NodeMirrorStatus`]): equal digests
/// are equal statuses (a collision, 1 in 2^64, would leave one mirror unwritten until its
/// status changes again).
///
/// Made by this process for the statuses it compares, never stored: `DefaultHasher::new()`
/// is fixed within one build, which is all a digest is compared across.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusDigest(u64);

impl StatusDigest {
    pub fn of(status: &impl Hash) -> Self {
        let mut h = DefaultHasher::new();
        status.hash(&mut h);
        StatusDigest(h.finish())
    }
}

/// A digest of a mirror's owner references, every field of each, in order: equal digests are
/// equal owners (made and compared within this process, as [`StatusDigest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnersDigest(u64);

impl OwnersDigest {
    pub fn of(owners: &[OwnerReference]) -> Self {
        let mut h = DefaultHasher::new();
        owners.len().hash(&mut h);
        for o in owners {
            (&o.api_version, &o.kind, &o.name, &o.uid).hash(&mut h);
            (o.controller, o.block_owner_deletion).hash(&mut h);
        }
        OwnersDigest(h.finish())
    }
}

/// Of a node mirror's status, what the next one is made from, and its digest. Two are equal
/// when their digests are: when the statuses are.
#[derive(Clone, Debug)]
pub struct NodeSeen {
    pub digest: StatusDigest,
    /// `online`, `offline` or `unknown`.
    pub health: SmolStr,
    /// Since when it has had that health (RFC 3339).
    pub health_since: Option<SmolStr>,
    /// The last poll that saw it online, once it is not (RFC 3339).
    pub last_seen_online: Option<SmolStr>,
}

impl PartialEq for NodeSeen {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl NodeSeen {
    pub fn of(status: &NodeMirrorStatus) -> Self {
        NodeSeen {
            digest: StatusDigest::of(status),
            health: status.health.as_str().into(),
            health_since: status.health_since.as_deref().map(SmolStr::from),
            last_seen_online: status.last_seen_online.as_deref().map(SmolStr::from),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    fn status() -> serde_json::Value {
        json!({"id": "v1", "pvc": "data", "health": "healthy", "size": "1Gi", "sizeBytes": 1073741824,
            "master": {"node": "n1", "health": "online"}, "replicasWanted": 1, "replicasReady": "1/1",
            "replicas": [{"node": "n2", "health": "ready", "promotable": true}],
            "attachment": {"type": "host", "node": "n1"}})
    }

    fn cached(status: serde_json::Value) -> CachedVolume {
        serde_json::from_value(json!({
            "apiVersion": "api.storageos.com/v1", "kind": "Volume",
            "metadata": {"name": "pvc-1", "namespace": "app", "uid": "u", "resourceVersion": "5",
                "ownerReferences": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": "data", "uid": "pu"}],
                "managedFields": [{"manager": "storageos-api-manager"}]},
            "spec": {}, "status": status
        }))
        .unwrap()
    }

    #[test]
    fn a_cached_mirror_keeps_its_identity_and_the_digests_of_its_owners_and_what_it_shows() {
        let c = cached(status());
        assert_eq!((c.uid.as_str(), c.version.as_str()), ("u", "5"));
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "PersistentVolumeClaim".into(),
            name: "data".into(),
            uid: "pu".into(),
            ..OwnerReference::default()
        };
        assert_eq!(c.owners, OwnersDigest::of(std::slice::from_ref(&owner)));
        let other_owner = OwnerReference {
            uid: "pu2".into(),
            ..owner.clone()
        };
        assert_ne!(c.owners, OwnersDigest::of(&[other_owner]));
        assert_ne!(c.owners, OwnersDigest::of(&[]));
        assert_ne!(c.owners, OwnersDigest::of(&[owner.clone(), owner]));
        let want: VolumeMirrorStatus = serde_json::from_value(status()).unwrap();
        assert_eq!(c.status, Some(StatusDigest::of(&want)));
        // Any change shows: a replica's health, a field the mirror adds.
        let mut other = want.clone();
        other.replicas[0].health = "syncing".into();
        assert_ne!(c.status, Some(StatusDigest::of(&other)));
        let mut nfs = want;
        nfs.nfs = Some(Default::default());
        assert_ne!(c.status, Some(StatusDigest::of(&nfs)));
    }

    #[test]
    fn the_watch_reads_a_mirror_with_the_identity_it_needs() {
        let listed: Listed<CachedVolume> = serde_json::from_value(json!({
            "metadata": {"name": "pvc-1", "namespace": "app", "uid": "u", "resourceVersion": "5"},
            "status": status()
        }))
        .unwrap();
        assert_eq!(
            (listed.name_any(), listed.namespace(), listed.resource_version()),
            ("pvc-1".into(), Some("app".into()), Some("5".into()))
        );
        assert_eq!(listed.view.uid, "u");
        assert_eq!(listed.view.status, cached(status()).status);
    }

    #[test]
    fn no_status_or_one_the_mirror_cannot_read_has_no_digest() {
        assert_eq!(cached(json!(null)).status, None);
        assert_eq!(cached(json!({"health": 7})).status, None);
    }

    #[test]
    fn a_cached_node_mirror_keeps_what_the_next_status_is_made_from_and_a_digest() {
        let status = json!({"id": "n1", "health": "offline", "healthSince": "2026-01-01T00:00:00Z",
            "lastSeenOnline": "2025-12-31T23:59:00Z", "capacity": {"total": "10Gi", "free": "9Gi", "available": "9Gi"},
            "labels": {"storageos.com/computeonly": "false"}, "version": "3", "createdAt": "2025-01-01T00:00:00Z",
            "safeToDrain": false, "drainBlockedBy": ["app/data"], "drainBlockedCount": 1, "eligible": true});
        let c: CachedNodeMirror = serde_json::from_value(json!({
            "apiVersion": "api.storageos.com/v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "u", "resourceVersion": "5",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "nu"}]},
            "spec": {}, "status": status
        }))
        .unwrap();
        assert_eq!((c.uid.as_str(), c.version.as_str()), ("u", "5"));
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "n1".into(),
            uid: "nu".into(),
            ..OwnerReference::default()
        };
        assert_eq!(c.owners, OwnersDigest::of(&[owner]));
        let want: NodeMirrorStatus = serde_json::from_value(status).unwrap();
        let seen = c.status.clone().unwrap();
        assert_eq!(seen, NodeSeen::of(&want));
        assert_eq!(
            (
                seen.health.as_str(),
                seen.health_since.as_deref(),
                seen.last_seen_online.as_deref()
            ),
            ("offline", Some("2026-01-01T00:00:00Z"), Some("2025-12-31T23:59:00Z"))
        );
        // Any change shows, also in what is not kept beside the digest.
        let mut other = want.clone();
        other.drain_blocked_by.clear();
        assert_ne!(seen, NodeSeen::of(&other));
        let mut labels = want;
        labels.labels.clear();
        assert_ne!(seen, NodeSeen::of(&labels));
        let none: CachedNodeMirror =
            serde_json::from_value(json!({"metadata": {"name": "n"}, "status": {"health": 7}})).unwrap();
        assert!(none.status.is_none(), "a status the type cannot read has none");
    }
}
