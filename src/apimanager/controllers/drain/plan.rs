//! Which guards to place and which to remove, from one volume read (pure).
//!
//! Removing a guard is the dangerous direction: a guard removed on stale or partial data lets a
//! drain take the last copy of a volume. So only a complete volume read with a known
//! maintenance state removes guards; a partial read only adds guards for the nodes it shows
//! unsafe, and leaves every existing guard as it is.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::guard;

/// Whether an upgrade holds the cluster in maintenance, as the controller could tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upgrade {
    /// No upgrade under way.
    Off,
    /// This upgrade is under way: every StorageOS node is guarded.
    On(String),
    /// The state could not be read: guards are added, none removed.
    Unknown,
}

/// What one volume read says.
pub struct Inputs<'a> {
    /// By StorageOS node ID, the volumes whose last online copy it holds (`super::blocking`).
    pub blocking: &'a BTreeMap<String, BTreeSet<String>>,
    /// Whether the volume read covered every namespace.
    pub complete: bool,
    /// StorageOS node ID → node name (= Kubernetes node name), from the last node list.
    pub node_names: &'a HashMap<String, String>,
    /// The Kubernetes nodes that exist (a guard is bound to one).
    pub k8s_nodes: &'a BTreeSet<String>,
    /// The maintenance state.
    pub upgrade: &'a Upgrade,
    /// The guards in place, by node name: their `blocked-by` annotation, or `None` for a guard
    /// half there (its pod or its budget missing, or the two disagree).
    pub guarded: &'a BTreeMap<String, Option<String>>,
}

/// The guards to write and the ones to delete.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// By node name, the blockers of a guard to place or update.
    pub apply: BTreeMap<String, Vec<String>>,
    /// The nodes whose guard goes.
    pub remove: BTreeSet<String>,
    /// StorageOS node IDs that block but have no name yet (no node list has named them).
    pub unnamed: Vec<String>,
}

/// The blockers of every node that must be guarded now, by node name.
pub fn wanted(inputs: &Inputs) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unnamed = Vec::new();
    for (id, volumes) in inputs.blocking {
        match inputs.node_names.get(id) {
            Some(name) => want.entry(name.clone()).or_default().extend(volumes.iter().cloned()),
            None => unnamed.push(id.clone()),
        }
    }
    if let Upgrade::On(upgrade) = inputs.upgrade {
        for name in inputs.node_names.values() {
            want.entry(name.clone())
                .or_default()
                .push(format!("StorageOSUpgrade {upgrade} (under way)"));
        }
    }
    want.retain(|node, _| inputs.k8s_nodes.contains(node));
    (want, unnamed)
}

/// The plan for one volume read.
pub fn plan(inputs: &Inputs) -> Plan {
    let (want, unnamed) = wanted(inputs);
    let may_remove = inputs.complete && *inputs.upgrade != Upgrade::Unknown;
    let apply = want
        .iter()
        .filter(|(node, blockers)| match inputs.guarded.get(*node) {
            None | Some(None) => true,
            // A partial read may miss some of a guard's volumes: it does not rewrite one.
            Some(Some(shown)) => may_remove && *shown != guard::blocked_by(blockers),
        })
        .map(|(node, blockers)| (node.clone(), blockers.clone()))
        .collect();
    let remove = if may_remove {
        inputs
            .guarded
            .keys()
            .filter(|node| !want.contains_key(*node))
            .cloned()
            .collect()
    } else {
        BTreeSet::new()
    };
    Plan { apply, remove, unnamed }
}
