//! Which guards to place, hold, release or remove, from one volume read (pure).
//!
//! Removing a guard is the dangerous direction: a guard removed on stale or partial data lets a
//! drain take the last copy of a volume. So only a complete volume read with a known
//! maintenance state removes or rewrites guards; a partial read only adds guards for the nodes it
//! shows unsafe, and leaves every existing guard as it is.
//!
//! A hold has an end when the cluster sets one: a guarded node is "waiting" from the first read
//! that sees it cordoned (drains, kured and managed node upgrades cordon before they evict); once
//! it has waited the maximum hold, its guard is "released" (its budget then allows the eviction)
//! and stays so until the node is uncordoned. Both times are kept on the guard's budget, so a
//! restart or a new leader neither restarts nor forgets a hold.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::guard;
pub use super::guard::Want;

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

/// A guard in place, as its budget (and pod) show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    /// The `blocked-by` annotation its pod and budget both show; `None` for a guard half there
    /// (its budget or, unless released, its pod missing, or the two disagree).
    pub blocked_by: Option<String>,
    /// Since when a drain of the node has waited on it.
    pub waiting_since: Option<DateTime<Utc>>,
    /// When its hold ended (its budget allows the eviction since).
    pub released: Option<DateTime<Utc>>,
}

/// What one volume read says.
pub struct Inputs<'a> {
    /// By StorageOS node ID, the volumes a drain of it must wait for (the rule's `at_risk`, or
    /// nothing when the policy places no guards).
    pub blocking: &'a BTreeMap<String, BTreeSet<String>>,
    /// Whether the volume read covered every namespace.
    pub complete: bool,
    /// StorageOS node ID → node name (= Kubernetes node name), from the last node list.
    pub node_names: &'a HashMap<String, String>,
    /// The Kubernetes nodes that exist (a guard is bound to one).
    pub k8s_nodes: &'a BTreeSet<String>,
    /// The Kubernetes nodes that are cordoned.
    pub cordoned: &'a BTreeSet<String>,
    /// The maintenance state.
    pub upgrade: &'a Upgrade,
    /// The guards in place, by node name.
    pub guarded: &'a BTreeMap<String, Placed>,
    /// The longest a drain waits; `None`: until it is safe.
    pub max_hold: Option<Duration>,
    /// Whether guards are placed at all (`AllowAlways` places none, upgrade or not).
    pub enforce: bool,
    /// This read's time (whole seconds, as the annotations keep it).
    pub now: DateTime<Utc>,
}

/// The guards to write and the ones to delete.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// By node name, the guards to place or update.
    pub apply: BTreeMap<String, Want>,
    /// The nodes whose guard goes.
    pub remove: BTreeSet<String>,
    /// StorageOS node IDs that block but have no name yet (no node list has named them).
    pub unnamed: Vec<String>,
    /// Nodes whose drain starts waiting with this plan.
    pub now_waiting: BTreeSet<String>,
    /// Nodes whose hold ends with this plan.
    pub now_released: BTreeSet<String>,
}

/// The blockers of every node that must be guarded now, by node name.
pub fn wanted(inputs: &Inputs) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unnamed = Vec::new();
    if !inputs.enforce {
        return (want, unnamed);
    }
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

/// The hold of a guard on `node` with `placed` in place: since when its drain waits, and when
/// the hold ended.
fn hold(inputs: &Inputs, node: &str, placed: Option<&Placed>) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    if !inputs.cordoned.contains(node) {
        return (None, None);
    }
    let since = placed.and_then(|p| p.waiting_since).unwrap_or(inputs.now);
    let over = inputs
        .max_hold
        .and_then(|max| chrono::Duration::from_std(max).ok())
        .is_some_and(|max| inputs.now >= since + max);
    let released = over.then(|| placed.and_then(|p| p.released).unwrap_or(inputs.now));
    (Some(since), released)
}

/// The plan for one volume read.
pub fn plan(inputs: &Inputs) -> Plan {
    let (want, unnamed) = wanted(inputs);
    let may_rewrite = inputs.complete && *inputs.upgrade != Upgrade::Unknown;
    let mut out = Plan {
        unnamed,
        ..Plan::default()
    };
    for (node, blockers) in want.iter() {
        let placed = inputs.guarded.get(node);
        let (waiting_since, released) = hold(inputs, node, placed);
        let wanted = Want {
            blockers: blockers.clone(),
            waiting_since,
            released,
        };
        let write = match placed {
            None => true,
            Some(p) if p.blocked_by.is_none() && p.released.is_none() => true,
            // A partial read may miss some of a guard's volumes: it does not rewrite one.
            Some(p) => {
                may_rewrite
                    && (p.blocked_by.as_deref() != Some(guard::blocked_by(blockers).as_str())
                        || p.waiting_since != waiting_since
                        || p.released != released)
            }
        };
        if !write {
            continue;
        }
        let before = placed.cloned().unwrap_or_default();
        if waiting_since.is_some() && before.waiting_since.is_none() {
            out.now_waiting.insert(node.clone());
        }
        if released.is_some() && before.released.is_none() {
            out.now_released.insert(node.clone());
        }
        out.apply.insert(node.clone(), wanted);
    }
    if may_rewrite {
        out.remove = inputs
            .guarded
            .keys()
            .filter(|node| !want.contains_key(*node))
            .cloned()
            .collect();
    }
    out
}

/// The drains that wait on a guard now, and for how long (for the metric): guards whose node is
/// cordoned and whose hold has not ended.
pub fn waiting(guards: &BTreeMap<String, Want>, now: DateTime<Utc>) -> Vec<(String, i64)> {
    guards
        .iter()
        .filter(|(_, w)| w.released.is_none())
        .filter_map(|(node, w)| Some((node.clone(), (now - w.waiting_since?).num_seconds().max(0))))
        .collect()
}
