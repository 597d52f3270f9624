//! The rule: which node holds the last online copy of which volume (pure).

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
