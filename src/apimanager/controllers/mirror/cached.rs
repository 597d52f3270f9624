//! The mirrors as the mirror's watch caches keep them: identity, owners and a digest of the
//! status.
//!
//! The mirror reads a cached volume mirror for two things only: whether its owner and status
//! are what it would write. A digest answers the second as well as the status does, and a
//! status is ten strings and a replica list: at 10,000 volumes the whole cached mirrors were
//! most of the mirror's ~20 MB (docs/benchmarks.md). A node mirror's next status is made from
//! its previous one (since when it has had its health, when it was last online), so a cached
//! node mirror keeps those three fields beside the digest, not its labels, capacity and
//! drain details.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::crd::{NodeMirrorStatus, StorageOSNode, StorageOSVolume, VolumeMirrorStatus};
use crate::runtime::kube::view;

/// A volume mirror as cached: name, namespace, UID, version, owners, and its status's digest.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedVolume {
    #[serde(default, deserialize_with = "view::meta")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "digest_of_status")]
    pub status: Option<StatusDigest>,
}
crate::view_of!(CachedVolume, StorageOSVolume);

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

/// A node mirror as cached: name, UID, version, owners, and what its status says
/// ([`NodeSeen`]).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedNodeMirror {
    #[serde(default, deserialize_with = "view::meta")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "seen_of_status")]
    pub status: Option<NodeSeen>,
}
crate::view_of!(CachedNodeMirror, StorageOSNode);

/// Of a node mirror's status, what the next one is made from, and its digest. Two are equal
/// when their digests are: when the statuses are.
#[derive(Clone, Debug)]
pub struct NodeSeen {
    pub digest: StatusDigest,
    /// `online`, `offline` or `unknown`.
    pub health: String,
    /// Since when it has had that health (RFC 3339).
    pub health_since: Option<String>,
    /// The last poll that saw it online, once it is not (RFC 3339).
    pub last_seen_online: Option<String>,
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
            health: status.health.clone(),
            health_since: status.health_since.clone(),
            last_seen_online: status.last_seen_online.clone(),
        }
    }
}

/// [`digest_of_status`] for a node mirror: the status parsed as the mirror's own type, kept as
/// [`NodeSeen`].
fn seen_of_status<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NodeSeen>, D::Error> {
    Ok(status_as::<NodeMirrorStatus, _>(d)?.map(|s| NodeSeen::of(&s)))
}

/// The status parsed as the mirror's own type (so that the digest is of what the mirror would
/// write), then dropped for its digest. A status the type cannot read has no digest, like no
/// status: the mirror writes it again.
fn digest_of_status<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StatusDigest>, D::Error> {
    Ok(status_as::<VolumeMirrorStatus, _>(d)?.map(|s| StatusDigest::of(&s)))
}

/// The status as the mirror's own type `T`; `None` when there is none or `T` cannot read it.
fn status_as<'de, T: serde::de::DeserializeOwned, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
    let status = Option::<serde_json::Value>::deserialize(d)?;
    Ok(status.and_then(|s| serde_json::from_value(s).ok()))
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
    fn a_cached_mirror_keeps_its_owner_and_the_digest_of_what_it_shows() {
        let c = cached(status());
        assert_eq!(
            (c.name_any(), c.namespace(), c.resource_version()),
            ("pvc-1".into(), Some("app".into()), Some("5".into()))
        );
        assert_eq!(c.owner_references()[0].uid, "pu");
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
        assert_eq!((c.name_any(), c.resource_version()), ("n1".into(), Some("5".into())));
        assert_eq!(c.owner_references()[0].uid, "nu");
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
