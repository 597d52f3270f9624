//! What StorageOS says about the cluster's health, as the upgrade judges it (pure): whether it
//! is safe to start (docs/upgrading.md, "Safe to start"), and whether the restarted nodes are
//! healthy (the health gate).
//!
//! An offline upgrade restarts every node at once. While a replica syncs, or a volume is short
//! of a copy, its only up-to-date data may sit on one node; restarting every node then risks
//! that volume on that node's return. So the upgrade starts only from a cluster where every
//! volume has all the copies it asks for, each in sync, and only on a complete read: a read that
//! failed or missed a namespace cannot tell, and "cannot tell" waits.

use std::collections::HashMap;

use super::nodes::NodePod;
use crate::storageos::models::{
    Health, LABEL_CSI_PVC_NAME, LABEL_CSI_PVC_NAMESPACE, LABEL_REPLICAS, Namespace, Node, Volume,
};

/// The replica health StorageOS reports for an up-to-date replica.
const READY: &str = "ready";
/// At most this many volumes are named in a message.
const NAMED: usize = 5;

/// One read of StorageOS: every node and every volume, or why not.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum StorageOSRead {
    /// Not read (the phase does not need it).
    #[default]
    NotRead,
    /// The read failed or was partial: nothing can be told from it.
    Failed(String),
    /// A complete read.
    Read {
        nodes: Vec<Node>,
        namespaces: Vec<Namespace>,
        volumes: Vec<Volume>,
    },
}

/// Why an upgrade may not start yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotSafe {
    /// The volumes could not all be read.
    Unknown(String),
    /// These volumes (named, with what is wrong) are not fully in sync.
    NotReady(String),
}

/// What is wrong with `v` for an offline restart, if anything: its master not online, a
/// replica not ready (syncing, lost), or fewer replicas than its replicas label asks for.
pub fn unready(v: &Volume) -> Option<String> {
    if v.master.health != Health::Online {
        return Some(format!("master {}", v.master.health.as_str()));
    }
    if let Some(r) = v.replicas.iter().find(|r| r.health != READY) {
        let health = if r.health.is_empty() {
            "unknown"
        } else {
            r.health.as_str()
        };
        return Some(format!("a replica is {health}"));
    }
    let wanted = v
        .labels
        .get(LABEL_REPLICAS)
        .and_then(|r| r.parse::<usize>().ok())
        .unwrap_or(0);
    (v.replicas.len() < wanted).then(|| format!("{} of {wanted} replicas", v.replicas.len()))
}

/// `namespace/pvc` of a volume, else `namespace/volume` with the StorageOS namespace's name.
fn volume_name(v: &Volume, namespaces: &HashMap<&str, &str>) -> String {
    match (v.labels.get(LABEL_CSI_PVC_NAMESPACE), v.labels.get(LABEL_CSI_PVC_NAME)) {
        (Some(ns), Some(pvc)) => format!("{ns}/{pvc}"),
        _ => format!(
            "{}/{}",
            namespaces.get(v.namespace_id.as_str()).copied().unwrap_or("?"),
            v.name
        ),
    }
}

/// "a (why), b (why) and 3 more".
fn list(items: Vec<String>) -> String {
    let more = items.len().saturating_sub(NAMED);
    let mut shown = items.into_iter().take(NAMED).collect::<Vec<_>>().join(", ");
    if more > 0 {
        shown.push_str(&format!(" and {more} more"));
    }
    shown
}

fn unready_volumes(namespaces: &[Namespace], volumes: &[Volume]) -> Vec<String> {
    let names: HashMap<&str, &str> = namespaces.iter().map(|n| (n.id.as_str(), n.name.as_str())).collect();
    let mut out: Vec<String> = volumes
        .iter()
        .filter_map(|v| unready(v).map(|why| format!("{} ({why})", volume_name(v, &names))))
        .collect();
    out.sort();
    out
}

/// Whether an upgrade may start: only from a complete read where every volume is in sync.
pub fn safe_to_start(read: &StorageOSRead) -> Result<(), NotSafe> {
    match read {
        StorageOSRead::NotRead => Err(NotSafe::Unknown("the StorageOS volumes were not read".into())),
        StorageOSRead::Failed(why) => Err(NotSafe::Unknown(why.clone())),
        StorageOSRead::Read {
            namespaces, volumes, ..
        } => {
            let bad = unready_volumes(namespaces, volumes);
            if bad.is_empty() {
                Ok(())
            } else {
                Err(NotSafe::NotReady(list(bad)))
            }
        }
    }
}

/// The health gate after the node pods restarted on `image`: Ok when every StorageOS node of a
/// node pod is online and every volume's master is online; else what is still wrong. (That
/// every pod runs `image` and is Ready is [`super::nodes::NodeView::upgraded`].)
pub fn gate(read: &StorageOSRead, pods: &[NodePod]) -> Result<(), String> {
    let (nodes, namespaces, volumes) = match read {
        StorageOSRead::NotRead => return Err("StorageOS was not read".into()),
        StorageOSRead::Failed(why) => return Err(format!("StorageOS cannot be read: {why}")),
        StorageOSRead::Read {
            nodes,
            namespaces,
            volumes,
        } => (nodes, namespaces, volumes),
    };
    let health: HashMap<&str, Health> = nodes.iter().map(|n| (n.name.as_str(), n.health)).collect();
    let mut offline: Vec<String> = pods
        .iter()
        .filter(|p| !p.terminating)
        .filter_map(|p| match health.get(p.node_name.as_str()) {
            Some(Health::Online) => None,
            Some(h) => Some(format!("{} ({})", p.node_name, h.as_str())),
            None => Some(format!("{} (not registered)", p.node_name)),
        })
        .collect();
    offline.sort();
    if !offline.is_empty() {
        return Err(format!("StorageOS nodes not online: {}", list(offline)));
    }
    let names: HashMap<&str, &str> = namespaces.iter().map(|n| (n.id.as_str(), n.name.as_str())).collect();
    let mut masters: Vec<String> = volumes
        .iter()
        .filter(|v| v.master.health != Health::Online)
        .map(|v| format!("{} ({})", volume_name(v, &names), v.master.health.as_str()))
        .collect();
    masters.sort();
    if masters.is_empty() {
        Ok(())
    } else {
        Err(format!("volume masters not online: {}", list(masters)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storageos::models::Replica;

    fn volume(name: &str, master: Health, replicas: &[&str], wanted: Option<&str>) -> Volume {
        let mut v = Volume {
            name: name.into(),
            namespace_id: "ns-id".into(),
            ..Volume::default()
        };
        v.master.health = master;
        v.replicas = replicas
            .iter()
            .map(|h| Replica {
                node_id: "n".into(),
                health: (*h).into(),
                ..Replica::default()
            })
            .collect();
        if let Some(w) = wanted {
            v.labels.insert(LABEL_REPLICAS.into(), w.into());
        }
        v
    }

    fn read(volumes: Vec<Volume>) -> StorageOSRead {
        StorageOSRead::Read {
            nodes: Vec::new(),
            namespaces: vec![Namespace {
                id: "ns-id".into(),
                name: "default".into(),
                ..Namespace::default()
            }],
            volumes,
        }
    }

    #[test]
    fn only_a_complete_read_of_volumes_all_in_sync_is_safe_to_start() {
        assert_eq!(safe_to_start(&read(vec![])), Ok(()));
        assert_eq!(
            safe_to_start(&read(vec![volume("a", Health::Online, &["ready"], Some("1"))])),
            Ok(())
        );
        let cases = [
            (
                volume("a", Health::Online, &["syncing"], Some("1")),
                "default/a (a replica is syncing)",
            ),
            (volume("a", Health::Offline, &[], None), "default/a (master offline)"),
            (
                volume("a", Health::Online, &["ready"], Some("2")),
                "default/a (1 of 2 replicas)",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(safe_to_start(&read(vec![v])), Err(NotSafe::NotReady(want.into())));
        }
        assert!(matches!(
            safe_to_start(&StorageOSRead::Failed("down".into())),
            Err(NotSafe::Unknown(_))
        ));
        assert!(matches!(
            safe_to_start(&StorageOSRead::NotRead),
            Err(NotSafe::Unknown(_))
        ));
    }

    #[test]
    fn a_volume_is_named_by_its_claim_and_long_lists_are_cut() {
        let mut v = volume("pv-1", Health::Online, &["syncing"], None);
        v.labels.insert(LABEL_CSI_PVC_NAMESPACE.into(), "app".into());
        v.labels.insert(LABEL_CSI_PVC_NAME.into(), "data".into());
        let many: Vec<Volume> = (0..7)
            .map(|i| volume(&format!("v{i}"), Health::Offline, &[], None))
            .collect();
        assert_eq!(
            safe_to_start(&read(vec![v])),
            Err(NotSafe::NotReady("app/data (a replica is syncing)".into()))
        );
        let Err(NotSafe::NotReady(text)) = safe_to_start(&read(many)) else {
            panic!("not safe")
        };
        assert!(text.ends_with(" and 2 more"), "{text}");
    }

    fn pod(node: &str) -> NodePod {
        NodePod {
            name: format!("pod-{node}"),
            node_name: node.into(),
            image: Some("i".into()),
            ready: true,
            terminating: false,
        }
    }

    fn node(name: &str, health: Health) -> Node {
        Node {
            name: name.into(),
            health,
            ..Node::default()
        }
    }

    #[test]
    fn the_gate_wants_every_pods_node_online_and_every_master_online() {
        let with = |nodes: Vec<Node>, volumes: Vec<Volume>| StorageOSRead::Read {
            nodes,
            namespaces: Vec::new(),
            volumes,
        };
        let pods = [pod("a"), pod("b")];
        let online = vec![node("a", Health::Online), node("b", Health::Online)];
        assert_eq!(gate(&with(online.clone(), vec![]), &pods), Ok(()));
        // A syncing replica does not hold the gate: replicas resync after every restart.
        assert_eq!(
            gate(
                &with(online.clone(), vec![volume("v", Health::Online, &["syncing"], None)]),
                &pods
            ),
            Ok(())
        );
        let err = gate(
            &with(vec![node("a", Health::Online), node("b", Health::Offline)], vec![]),
            &pods,
        )
        .unwrap_err();
        assert_eq!(err, "StorageOS nodes not online: b (offline)");
        let err = gate(&with(vec![node("a", Health::Online)], vec![]), &pods).unwrap_err();
        assert!(err.contains("b (not registered)"), "{err}");
        let err = gate(&with(online, vec![volume("v", Health::Offline, &[], None)]), &pods).unwrap_err();
        assert_eq!(err, "volume masters not online: ?/v (offline)");
        assert!(gate(&StorageOSRead::Failed("down".into()), &pods).is_err());
    }
}
