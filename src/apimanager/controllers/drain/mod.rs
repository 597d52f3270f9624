//! Whether a node may be drained or rebooted without taking the last online copy of a volume
//! (docs/api-manager.md). The decision is made from each complete volume snapshot of the shared
//! poll and shown on `nodes.api.storageos.com` (`Safe-To-Drain`, and the PVCs that block it).
//! Enforcing it (a guard pod and a PodDisruptionBudget on each unsafe node) is not done yet.

use std::collections::{BTreeMap, BTreeSet};

use crate::apimanager::controllers::mirror::build::pvc_of_in;
use crate::apimanager::storageos_poll::VolumeList;
use crate::storageos::models::{Health, Volume};

/// The replica health StorageOS reports for an up-to-date replica.
const READY: &str = "ready";

/// By StorageOS node ID: the volumes (as `namespace/pvc`, or `namespace/pv` for a volume
/// without a PVC) whose last online copy is on that node. A node absent from the map is safe.
/// Only a complete volume read may say a node is safe: the caller must not use a partial one.
pub fn blocking(list: &VolumeList) -> BTreeMap<String, BTreeSet<String>> {
    let mut unsafe_nodes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (v, namespace) in list.volumes_with_namespace() {
        if let Some(node) = last_copy(v) {
            let name = match pvc_of_in(v, namespace) {
                Some((ns, pvc)) => format!("{ns}/{pvc}"),
                None => format!("{}/{}", namespace.unwrap_or("?"), v.name),
            };
            unsafe_nodes.entry(node.to_string()).or_default().insert(name);
        }
    }
    unsafe_nodes
}

/// The node holding the volume's last online copy, if one node does: the master's node when
/// the master is online and no replica on another node is ready (a replica still syncing is not
/// a copy yet); when the master is not online, the node of the only ready replica.
pub fn last_copy(v: &Volume) -> Option<&str> {
    let ready = |r: &&crate::storageos::models::Replica| r.health == READY;
    if v.master.health == Health::Online {
        let master = v.master.node_id.as_str();
        let elsewhere = v.replicas.iter().filter(ready).any(|r| r.node_id != master);
        return (!master.is_empty() && !elsewhere).then_some(master);
    }
    let mut copies = v.replicas.iter().filter(ready);
    match (copies.next(), copies.next()) {
        (Some(only), None) => Some(only.node_id.as_str()),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storageos::models::Replica;

    fn volume(master: &str, health: Health, replicas: &[(&str, &str)]) -> Volume {
        let mut v = Volume {
            name: "pv1".into(),
            ..Volume::default()
        };
        v.master.node_id = master.into();
        v.master.health = health;
        v.replicas = replicas
            .iter()
            .map(|(node, health)| Replica {
                node_id: (*node).into(),
                health: (*health).into(),
                ..Replica::default()
            })
            .collect();
        v
    }

    #[test]
    fn the_master_node_holds_the_last_copy_until_a_replica_elsewhere_is_ready() {
        assert_eq!(last_copy(&volume("a", Health::Online, &[])), Some("a"), "no replicas");
        assert_eq!(last_copy(&volume("a", Health::Online, &[("b", "syncing")])), Some("a"));
        assert_eq!(last_copy(&volume("a", Health::Online, &[("b", "ready")])), None);
        assert_eq!(
            last_copy(&volume("a", Health::Online, &[("b", "failed"), ("c", "ready")])),
            None
        );
    }

    #[test]
    fn with_the_master_down_the_only_ready_replica_is_the_last_copy() {
        assert_eq!(last_copy(&volume("a", Health::Offline, &[("b", "ready")])), Some("b"));
        assert_eq!(
            last_copy(&volume("a", Health::Offline, &[("b", "ready"), ("c", "ready")])),
            None,
            "two copies: either node may go"
        );
        assert_eq!(
            last_copy(&volume("a", Health::Offline, &[("b", "syncing")])),
            None,
            "no online copy to lose"
        );
    }
}
