//! The rule: which node holds the last copy of which volume, and which of those copies a
//! drain must wait for under the cluster's [`DrainPolicy`] (pure).

use std::collections::{BTreeMap, BTreeSet};

use crate::controllers::volume_claims::pvc_of_in;
use crate::crd::DrainPolicy;
use crate::storageos::models::{Health, LABEL_REPLICAS, Volume};
use crate::storageos_poll::VolumeList;

/// The replica health StorageOS reports for an up-to-date replica.
const READY: &str = "ready";

/// What one volume read says about draining each node, by StorageOS node ID. A node absent from
/// a map has nothing of that kind. Only a complete volume read may say a node is safe: the
/// caller must not use a partial one.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DrainView {
    /// The volumes (`namespace/pvc`, or `namespace/volume` for a volume without a PVC) whose
    /// last copy is on the node and that the policy protects: a drain of the node waits for
    /// them (`AllowAlways` apart: then they are only shown). `Safe-To-Drain` is false for a
    /// node listed here.
    pub at_risk: BTreeMap<String, BTreeSet<String>>,
    /// Volumes with 0 replicas whose only copy is on the node: unprotected (a drain or the loss
    /// of the node takes them offline); they make a drain wait only under `BlockLastCopy`.
    pub unprotected: BTreeMap<String, BTreeSet<String>>,
    /// Volumes that no PVC uses any more (their PVC deleted, their PV released or deleted)
    /// whose last copy is on the node, by volume (PV) name: they never make a drain wait.
    pub orphaned: BTreeMap<String, BTreeSet<String>>,
}

/// The drain view of a volume read under `policy`. `in_use(namespace, pvc, pv)` says whether
/// PVC `namespace/pvc` exists and is bound to PV `pv` (a volume CSI made names its PVC in its
/// labels; one that names none is never taken for an orphan).
pub fn view(list: &VolumeList, policy: DrainPolicy, in_use: impl Fn(&str, &str, &str) -> bool) -> DrainView {
    let mut out = DrainView::default();
    for (v, namespace) in list.volumes_with_namespace() {
        let Some(node) = last_copy(v) else { continue };
        let add = |map: &mut BTreeMap<String, BTreeSet<String>>, name: String| {
            map.entry(node.to_string()).or_default().insert(name);
        };
        let name = match pvc_of_in(v, namespace) {
            Some((ns, pvc)) if !in_use(&ns, &pvc, &v.name) => {
                add(&mut out.orphaned, v.name.clone());
                continue;
            }
            Some((ns, pvc)) => format!("{ns}/{pvc}"),
            None => format!("{}/{}", namespace.unwrap_or("?"), v.name),
        };
        if replicas_wanted(v) == 0 {
            add(&mut out.unprotected, name.clone());
            if policy == DrainPolicy::BlockLastCopy {
                add(&mut out.at_risk, name);
            }
        } else {
            add(&mut out.at_risk, name);
        }
    }
    out
}

/// Whether guards enforce the policy's view (`AllowAlways` only shows it).
pub fn guards(policy: DrainPolicy) -> bool {
    policy != DrainPolicy::AllowAlways
}

/// The replicas a volume asked for: its `storageos.com/replicas` label, or as many as it has
/// when that is higher (a label edited down while replicas remain).
pub fn replicas_wanted(v: &Volume) -> usize {
    let labelled = v.labels.get(LABEL_REPLICAS).and_then(|r| r.parse().ok()).unwrap_or(0);
    labelled.max(v.replicas.len())
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
