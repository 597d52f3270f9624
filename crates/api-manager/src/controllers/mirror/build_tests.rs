//! Unit tests of the mirror statuses built from StorageOS nodes and volumes.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::controllers::volume_claims::{pvc_of, pvc_of_in};
use crate::storageos::models::{LABEL_CSI_PVC_NAME, LABEL_CSI_PVC_NAMESPACE, Master, Replica};
use std::collections::BTreeMap;

fn node(health: Health) -> Node {
    serde_json::from_value(serde_json::json!({
        "id": "id-a", "name": "a", "health": health.as_str(), "version": "v1",
        "capacity": {"total": 100u64 << 30, "free": (90u64 << 30) + 12345, "available": 5u64 << 20},
        "labels": {"zone": "z1"}, "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"
    }))
    .unwrap()
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

#[test]
fn node_health_since_and_last_online_change_only_on_transitions() {
    let t1 = at("2026-02-01T10:00:00.5Z");
    let first = node_status(&node(Health::Online), None, t1, Some(t1), Drain::UNKNOWN);
    assert_eq!(first.health, "online");
    assert_eq!(first.health_since.as_deref(), Some("2026-02-01T10:00:00Z"));
    assert_eq!(first.last_seen_online, None);
    let cap = first.capacity.clone().unwrap();
    assert_eq!(
        (cap.total.as_str(), cap.free.as_str(), cap.available.as_str()),
        ("100Gi", "90Gi", "5Mi")
    );

    // A later poll with nothing changed builds the very same status (no write).
    let t2 = at("2026-02-01T10:00:05Z");
    assert_eq!(
        node_status(
            &node(Health::Online),
            Some(&NodeSeen::of(&first)),
            t2,
            Some(t2),
            Drain::UNKNOWN
        ),
        first
    );

    // Offline: since moves, the last online poll is recorded, and then stays.
    let t3 = at("2026-02-01T10:00:10Z");
    let off = node_status(
        &node(Health::Offline),
        Some(&NodeSeen::of(&first)),
        t3,
        Some(t2),
        Drain::UNKNOWN,
    );
    assert_eq!(off.health_since.as_deref(), Some("2026-02-01T10:00:10Z"));
    assert_eq!(off.last_seen_online.as_deref(), Some("2026-02-01T10:00:05Z"));
    let t4 = at("2026-02-01T10:00:15Z");
    assert_eq!(
        node_status(
            &node(Health::Offline),
            Some(&NodeSeen::of(&off)),
            t4,
            Some(t2),
            Drain::UNKNOWN
        ),
        off
    );
}

#[test]
fn eligibility_comes_from_the_nodes_os_and_arch_labels_once_the_node_is_known() {
    let t = at("2026-01-01T00:00:00Z");
    let status = node_status(&node(Health::Online), None, t, Some(t), Drain::UNKNOWN);
    let labels = |arch: &str| {
        Labels::from(BTreeMap::from([
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            ("kubernetes.io/arch".to_string(), arch.to_string()),
        ]))
    };
    let amd = with_eligibility(status.clone(), Some(&labels("amd64")));
    assert_eq!((amd.eligible, amd.ineligible_because), (Some(true), None));
    let arm = with_eligibility(status.clone(), Some(&labels("arm64")));
    assert_eq!(arm.eligible, Some(false));
    assert_eq!(arm.ineligible_because.as_deref(), Some("architecture arm64"));
    let unknown = with_eligibility(status, None);
    assert_eq!((unknown.eligible, unknown.ineligible_because), (None, None));
}

#[test]
fn a_node_holding_the_last_copy_of_a_volume_is_not_safe_to_drain() {
    let t = at("2026-02-01T10:00:00Z");
    let policy = DrainPolicy::BlockIfReplicatedVolumeAtRisk;
    let status = |of_node| node_status(&node(Health::Online), None, t, Some(t), Drain { policy, of_node });
    let unknown = status(None);
    assert_eq!((unknown.safe_to_drain, unknown.drain_blocked_count), (None, None));
    assert_eq!(unknown.drain_policy.as_deref(), Some("BlockIfReplicatedVolumeAtRisk"));
    let nothing = NodeDrain::default();
    let safe = status(Some(&nothing));
    assert_eq!((safe.safe_to_drain, safe.unprotected_count), (Some(true), Some(0)));
    assert!(safe.drain_blocked_by.is_empty());
    let many: BTreeSet<String> = (0..30).rev().map(|i| format!("app/data-{i:02}")).collect();
    let by_node = by_node(
        BTreeMap::from([("node-id".to_string(), many)]),
        BTreeMap::from([("node-id".to_string(), BTreeSet::from(["app/scratch".to_string()]))]),
        BTreeMap::from([("node-id".to_string(), BTreeSet::from(["pvc-gone".to_string()]))]),
    );
    let blocked = status(Some(&by_node["node-id"]));
    assert_eq!(blocked.safe_to_drain, Some(false));
    assert_eq!(blocked.drain_blocked_count, Some(30));
    assert_eq!(blocked.drain_blocked_by.len(), DRAIN_BLOCKED_SHOWN, "capped");
    assert_eq!(blocked.drain_blocked_by[0], "app/data-00", "sorted");
    assert_eq!(
        (blocked.unprotected_count, blocked.unprotected.as_slice()),
        (Some(1), ["app/scratch".to_string()].as_slice())
    );
    assert_eq!(
        (blocked.orphaned_count, blocked.orphaned.as_slice()),
        (Some(1), ["pvc-gone".to_string()].as_slice())
    );
}

#[test]
fn a_node_with_only_unprotected_volumes_is_safe_to_drain_and_shows_them() {
    let t = at("2026-02-01T10:00:00Z");
    let unprotected = BTreeMap::from([("node-id".to_string(), BTreeSet::from(["app/scratch".to_string()]))]);
    let by_node = by_node(BTreeMap::new(), unprotected, BTreeMap::new());
    let drain = Drain {
        policy: DrainPolicy::BlockIfReplicatedVolumeAtRisk,
        of_node: Some(&by_node["node-id"]),
    };
    let s = node_status(&node(Health::Online), None, t, Some(t), drain);
    assert_eq!(s.safe_to_drain, Some(true));
    assert_eq!(s.unprotected_count, Some(1));
    assert_eq!(s.drain_blocked_count, None);
}

fn volume() -> Volume {
    let mut v = Volume {
        id: "vol-1".into(),
        name: "pvc-123".into(),
        attachment_type: "nfs".into(),
        attached_on: "id-a".into(),
        size_bytes: 5 << 30,
        master: Master {
            id: "m".into(),
            node_id: "id-a".into(),
            promotable: true,
            health: Health::Online,
        },
        replicas: vec![Replica {
            id: "r".into(),
            node_id: "id-b".into(),
            promotable: true,
            health: "ready".into(),
            sync_progress: Default::default(),
        }],
        ..Volume::default()
    };
    v.labels.insert(LABEL_CSI_PVC_NAMESPACE.into(), "apps".into());
    v.labels.insert(LABEL_CSI_PVC_NAME.into(), "data".into());
    v.labels.insert(LABEL_REPLICAS.into(), "2".into());
    v.labels
        .insert(LABEL_NFS_MOUNT_ENDPOINT.into(), "10.96.0.7:2049".into());
    v.nfs.service_endpoint = Some("10.0.0.1:25000".into());
    v
}

#[test]
fn a_volume_shows_health_master_replicas_and_attachment_by_node_name() {
    let names = HashMap::from([("id-a".to_string(), "a".to_string())]);
    let v = volume();
    assert_eq!(pvc_of(&v), Some(("apps".into(), "data".into())));
    let s = volume_status(&v, "data", &names);
    assert_eq!(s.health, "degraded", "one of two replicas ready");
    assert_eq!(s.replicas_ready, "1/2");
    assert_eq!(s.master.node, "a");
    assert_eq!(s.replicas[0].node, "id-b", "an unknown node shows its ID");
    assert_eq!(s.attachment.type_, "nfs");
    assert_eq!(s.attachment.node.as_deref(), Some("a"));
    assert_eq!(s.nfs.unwrap().mount_endpoint.as_deref(), Some("10.96.0.7:2049"));
    assert_eq!(s.size, "5Gi");

    let mut syncing = volume();
    syncing.replicas[0].health = "syncing".into();
    syncing.replicas[0].sync_progress.bytes_remaining = 10;
    assert_eq!(volume_status(&syncing, "data", &names).health, "syncing");

    let mut lost = volume();
    lost.master.health = Health::Offline;
    assert_eq!(volume_status(&lost, "data", &names).health, "unavailable");

    let mut fine = volume();
    fine.labels.insert(LABEL_REPLICAS.into(), "1".into());
    fine.attachment_type = Default::default();
    fine.attached_on = String::new();
    let s = volume_status(&fine, "data", &names);
    assert_eq!(
        (s.health.as_str(), s.attachment.type_.as_str()),
        ("healthy", "detached")
    );
    assert_eq!(s.attachment.node, None);

    let mut foreign = volume();
    foreign.labels.remove(LABEL_CSI_PVC_NAME);
    assert_eq!(pvc_of(&foreign), None);
}

fn owner(uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "PersistentVolumeClaim".into(),
        name: "data".into(),
        uid: uid.into(),
        ..OwnerReference::default()
    }
}

/// A cached mirror at `version`, owned by `owner`, showing `status`.
fn mirror<S: Clone>(version: &str, owner: Option<&OwnerReference>, status: Option<&S>) -> CachedMirror<S> {
    CachedMirror {
        uid: "u".into(),
        version: version.into(),
        owners: OwnersDigest::of(owner.map(std::slice::from_ref).unwrap_or_default()),
        status: status.cloned(),
    }
}

#[test]
fn only_what_differs_is_written_and_a_changed_status_is_one_request() {
    let (a, b) = (owner("uid-a"), owner("uid-b"));
    let now = Instant::now();
    let (s1, s2) = ("one".to_string(), "two".to_string());
    let with = |status| mirror("7", Some(&a), Some(status));
    let (m1, m2) = (with(&s1), with(&s2));
    let cached = |m| known(Some(m), None, now);
    assert_eq!(
        writes::<String>(None, Some(&a), &s1),
        Writes {
            object: true,
            status: true
        },
        "a new mirror"
    );
    assert!(!writes(cached(&m1), Some(&a), &s1).any(), "nothing changed");
    assert_eq!(
        writes(cached(&m1), Some(&a), &s2),
        Writes {
            object: false,
            status: true
        },
        "the status alone"
    );
    assert_eq!(
        writes(cached(&m1), Some(&b), &s1),
        Writes {
            object: true,
            status: false
        },
        "the owner alone"
    );
    assert!(writes(cached(&m1), None, &s1).object, "an owner to drop");
    assert!(!writes(cached(&m2), Some(&a), &s2).any());
    let bare = mirror::<String>("7", Some(&a), None);
    let no_status = known(Some(&bare), None, now);
    assert_eq!(
        writes(no_status, Some(&a), &s1),
        Writes {
            object: false,
            status: true
        }
    );
}

#[test]
fn a_write_the_cache_does_not_show_yet_is_not_made_again() {
    let a = owner("uid-a");
    let t0 = Instant::now();
    let (old, new) = ("old".to_string(), "new".to_string());
    let written = Written {
        older_versions: vec![Some("7".into())],
        owner: Some(a.clone()),
        status: new.clone(),
        at: t0,
    };
    // The next poll, the watch still behind: the write stands, nothing is written again.
    let before = mirror("7", Some(&a), Some(&old));
    let lagging = known(Some(&before), Some(&written), t0 + Duration::from_secs(5));
    assert!(!writes(lagging, Some(&a), &new).any());
    // The cache caught up (another version): the cache is the truth again.
    let after = mirror("8", Some(&a), Some(&new));
    let caught_up = known(Some(&after), Some(&written), t0 + Duration::from_secs(5));
    assert!(!writes(caught_up, Some(&a), &new).any());
    // Someone changed it after our write: written again.
    let after_changed = mirror("8", Some(&a), Some(&old));
    let changed = known(Some(&after_changed), Some(&written), t0 + Duration::from_secs(5));
    assert!(writes(changed, Some(&a), &new).status);
    // A write the cache never shows stands for WRITTEN_STANDS only.
    let stale = known(Some(&before), Some(&written), t0 + WRITTEN_STANDS);
    assert!(writes(stale, Some(&a), &new).status);
    // A new object written, not yet cached: not created again meanwhile.
    let created = Written {
        older_versions: vec![None, Some("1".into())],
        ..written.clone()
    };
    assert!(!writes(known(None, Some(&created), t0), Some(&a), &new).any());
    assert!(writes(known(None, Some(&created), t0 + WRITTEN_STANDS), Some(&a), &new).object);
    // The cache shows the object write and not yet the status write that followed it.
    let halfway = mirror::<String>("1", Some(&a), None);
    assert!(!writes(known(Some(&halfway), Some(&created), t0), Some(&a), &new).any());
}

/// The 1,000-node bench's flaps wrote every volume mirror; the build step must leave every
/// volume whose master is not on the flapped node as it was, however many there are.
#[test]
fn a_node_flap_changes_only_the_volumes_on_that_node() {
    let nodes = 50;
    let names: HashMap<String, String> = (0..nodes).map(|i| (format!("id-{i}"), format!("n{i}"))).collect();
    let volumes: Vec<Volume> = (0..nodes * 3)
        .map(|j| {
            let mut v = volume();
            v.name = format!("pv-{j}");
            v.master.node_id = format!("id-{}", j % nodes);
            v.replicas.clear();
            v.labels.insert(LABEL_REPLICAS.into(), "0".into());
            v
        })
        .collect();
    let before: Vec<_> = volumes.iter().map(|v| volume_status(v, "data", &names)).collect();
    let flapped = volumes.iter().map(|v| {
        let mut v = v.clone();
        if v.master.node_id == "id-7" {
            v.master.health = Health::Offline;
        }
        v
    });
    let a = owner("uid");
    let rewritten = flapped
        .zip(&before)
        .filter(|(v, old)| {
            let m = mirror("1", Some(&a), Some(*old));
            writes(
                known(Some(&m), None, Instant::now()),
                Some(&a),
                &volume_status(v, "data", &names),
            )
            .any()
        })
        .count();
    assert_eq!(rewritten, 3, "the three volumes whose master is on the flapped node");
}

/// A StorageOS write the mirror does not show (the PVC label sync setting a label bumps the
/// volume's version) leaves the mirror as it is.
#[test]
fn a_new_storageos_version_alone_is_no_change() {
    let names = HashMap::from([("id-a".to_string(), "a".to_string())]);
    let v = volume();
    let mut relabelled = v.clone();
    relabelled.version = "next".into();
    relabelled.labels.insert("team".into(), "data".into());
    assert_eq!(
        volume_status(&v, "data", &names),
        volume_status(&relabelled, "data", &names)
    );
}

#[test]
fn a_volume_whose_labels_name_another_namespace_gets_no_mirror() {
    let v = volume();
    assert_eq!(pvc_of_in(&v, Some("apps")), Some(("apps".into(), "data".into())));
    assert_eq!(pvc_of_in(&v, Some("other")), None);
    assert_eq!(pvc_of_in(&v, None), None);
}
