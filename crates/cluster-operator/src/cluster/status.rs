//! Pure status computation: which selected nodes are ready, the phase, every condition, and the
//! events a change calls for. [`compute`] reads nothing but its [`ClusterObservation`], so each
//! condition and event decision is unit-tested (`status_tests.rs`); `status_write` observes and
//! writes.
//!
//! A member is ready when its node DaemonSet pod is Ready *and* the StorageOS API reports the
//! node `online` (the Go operator only dialled a TCP port). `0/0` is not Running. A cluster that
//! was Running and lost a node is Degraded, not Creating.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::events::EventType;

use super::adopt;
use super::kv_backend;
use super::node_cache::NodePod;
use super::settings_push::ClientError;
use crate::crd::{ContainerImages, MembersStatus, StorageOSClusterStatus};
use crate::reasons::{self, Reason};
use crate::runtime::kube::conditions;
use crate::storageos::models::{Health, NodeHealth};

/// The condition that says a cluster is paused: nothing is applied or repaired meanwhile.
pub const PAUSED: &str = "Paused";

/// The condition that says whether StorageOS can run on every selected node.
pub const NODES_ELIGIBLE: &str = "NodesEligible";

/// The condition type saying whether the cluster runs a Kubernetes this release was tested on.
pub const KUBERNETES_SUPPORTED: &str = "KubernetesSupported";

/// Phases of a cluster.
pub mod phase {
    /// Installing; not every node is ready yet.
    pub const CREATING: &str = "Creating";
    /// Every selected node is ready.
    pub const RUNNING: &str = "Running";
    /// Was Running; a node is no longer ready.
    pub const DEGRADED: &str = "Degraded";
    /// Another cluster is active.
    pub const PENDING: &str = "Pending";
    /// Being deleted.
    pub const TERMINATING: &str = "Terminating";
}

/// Everything the status of an applied cluster is computed from, read by the pass.
pub struct ClusterObservation {
    /// Names of the selected nodes StorageOS can run on.
    pub selected: Vec<String>,
    /// Selected nodes StorageOS cannot run on, and why: named, not counted, never waited for.
    pub ineligible: BTreeMap<String, String>,
    /// Nodes whose node DaemonSet pod is Ready ([`pod_ready_nodes`]).
    pub pods_ready_on: BTreeSet<String>,
    /// StorageOS nodes, or why they could not be read (typed: a caller may ask
    /// `is_not_found()` or the status of a StorageOS answer).
    pub api_nodes: Result<Vec<NodeHealth>, ClientError>,
    /// The status before this reconcile.
    pub previous: StorageOSClusterStatus,
    /// `metadata.generation` of the cluster.
    pub generation: Option<i64>,
    /// Images in use.
    pub images: ContainerImages,
    /// The image fields that held Go defaults and were replaced, said in a sentence; None when
    /// none were.
    pub replaced_images: Option<String>,
    /// The kv backend check (at most once a minute; shown beside Ready, it does not change it).
    pub kv: kv_backend::Outcome,
    /// The Kubernetes the operator connected to; None when unknown.
    pub kubernetes_version: Option<semver::Version>,
    /// Now, for condition transition times.
    pub now: Time,
}

/// An event a change of status calls for, as data: the write step publishes it.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusEvent {
    pub type_: EventType,
    pub reason: Reason,
    pub message: String,
}

impl StatusEvent {
    fn normal(reason: Reason, message: String) -> Self {
        Self {
            type_: EventType::Normal,
            reason,
            message,
        }
    }

    fn warning(reason: Reason, message: String) -> Self {
        Self {
            type_: EventType::Warning,
            reason,
            message,
        }
    }
}

/// One condition as this pass sees it, built by [`holds`], [`fails`] or [`condition`] and set
/// by [`Conditions::set`] (which keeps the transition time of a status that did not flip).
struct ConditionUpdate {
    type_: &'static str,
    status: bool,
    reason: Reason,
    message: String,
}

fn condition(type_: &'static str, status: bool, reason: Reason, message: impl Into<String>) -> ConditionUpdate {
    ConditionUpdate {
        type_,
        status,
        reason,
        message: message.into(),
    }
}

fn holds(type_: &'static str, reason: Reason, message: impl Into<String>) -> ConditionUpdate {
    condition(type_, true, reason, message)
}

fn fails(type_: &'static str, reason: Reason, message: impl Into<String>) -> ConditionUpdate {
    condition(type_, false, reason, message)
}

/// The conditions being computed: the previous ones, each update stamped with the pass's
/// generation and time.
struct Conditions<'a> {
    list: Vec<Condition>,
    generation: Option<i64>,
    now: &'a Time,
}

impl Conditions<'_> {
    fn set(&mut self, c: ConditionUpdate) {
        conditions::set(
            &mut self.list,
            c.type_,
            c.status,
            c.reason,
            c.message,
            self.generation,
            self.now,
        );
    }
}

/// The nodes of the Ready, not deleted, pods among `pods`.
pub fn pod_ready_nodes<'a>(pods: impl IntoIterator<Item = &'a NodePod>) -> BTreeSet<String> {
    pods.into_iter()
        .filter(|p| !p.deleting && p.ready)
        .filter_map(|p| p.node_name.as_deref().map(str::to_owned))
        .collect()
}

fn summarise(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}

/// The status for `obs`, and the events its changes call for (each once: none when nothing
/// changed).
pub fn compute(obs: &ClusterObservation) -> (StorageOSClusterStatus, Vec<StatusEvent>) {
    let m = members(obs);
    let mut conds = Conditions {
        list: obs.previous.conditions.clone().unwrap_or_default(),
        generation: obs.generation,
        now: &obs.now,
    };
    let ready = ready(obs, &m);
    let (progressing, degraded) = (progressing(&m, &ready.message), degraded(&m, &ready.message));
    conds.set(ready);
    conds.set(progressing);
    conds.set(degraded);
    let replaced = adopt::note_replaced_images(&mut conds.list, obs.replaced_images.clone(), obs.generation, &obs.now);
    let mut events: Vec<StatusEvent> = replaced
        .map(|message| StatusEvent::normal(reasons::GO_DEFAULT_IMAGES_REPLACED, message))
        .into_iter()
        .collect();
    if let Some(resumed) = resumed(&obs.previous) {
        conds.set(resumed);
    }
    for (update, event) in [
        Some(nodes_eligible(obs)),
        Some(kv_backend(obs)),
        kubernetes_supported(obs),
    ]
    .into_iter()
    .flatten()
    {
        conds.set(update);
        events.extend(event);
    }
    let status = StorageOSClusterStatus {
        phase: Some(m.phase.into()),
        node_health_status: None,
        nodes: Some(obs.selected.clone()),
        ready: Some(m.count()),
        members: Some(MembersStatus {
            ready: Some(m.ready),
            unready: Some(m.unready),
        }),
        conditions: Some(conds.list),
        observed_generation: obs.generation,
        images: Some(obs.images.clone()),
    };
    events.extend(changed_status(&obs.previous, &status));
    (status, events)
}

/// The selected nodes split into ready and not, and the phase that makes.
struct Members {
    ready: Vec<String>,
    unready: Vec<String>,
    phase: &'static str,
}

impl Members {
    /// `ready/selected`, as `status.ready` shows it.
    fn count(&self) -> String {
        format!("{}/{}", self.ready.len(), self.ready.len() + self.unready.len())
    }
}

fn members(obs: &ClusterObservation) -> Members {
    let online: BTreeMap<&str, Health> = match &obs.api_nodes {
        Ok(nodes) => nodes.iter().map(|n| (n.name.as_str(), n.health)).collect(),
        Err(_) => BTreeMap::new(),
    };
    let (ready, unready): (Vec<String>, Vec<String>) = obs
        .selected
        .iter()
        .cloned()
        .partition(|n| obs.pods_ready_on.contains(n) && online.get(n.as_str()) == Some(&Health::Online));
    let was_running = obs
        .previous
        .phase
        .as_deref()
        .is_some_and(|p| p == phase::RUNNING || p == phase::DEGRADED);
    let phase = match (ready.len(), unready.len()) {
        (0, 0) => phase::CREATING,
        (_, 0) => phase::RUNNING,
        _ if was_running => phase::DEGRADED,
        _ => phase::CREATING,
    };
    Members { ready, unready, phase }
}

fn ready(obs: &ClusterObservation, m: &Members) -> ConditionUpdate {
    let count = m.count();
    if obs.selected.is_empty() {
        let message =
            "no node matches spec.nodeSelectorTerms with tolerated taints; check the selector and tolerations";
        return fails("Ready", reasons::NO_NODES_SELECTED, message);
    }
    if m.unready.is_empty() {
        return holds(
            "Ready",
            reasons::CLUSTER_READY,
            format!("{count} StorageOS nodes are functional"),
        );
    }
    if let Err(e) = &obs.api_nodes {
        let message = format!("{count} nodes ready; cannot read node health from the StorageOS API: {e}");
        return fails("Ready", reasons::STORAGEOS_API_UNAVAILABLE, message);
    }
    let message = format!(
        "{count} StorageOS nodes are functional; not ready: {}",
        summarise(&m.unready)
    );
    fails("Ready", reasons::NODES_NOT_READY, message)
}

/// True while creating, with Ready's message.
fn progressing(m: &Members, ready_message: &str) -> ConditionUpdate {
    if m.phase == phase::CREATING {
        holds("Progressing", reasons::CREATING, ready_message)
    } else {
        fails("Progressing", reasons::STABLE, "every object is applied")
    }
}

/// True once a Running cluster lost a node, with Ready's message.
fn degraded(m: &Members, ready_message: &str) -> ConditionUpdate {
    if m.phase == phase::DEGRADED {
        holds("Degraded", reasons::NODES_LOST, ready_message)
    } else {
        fails("Degraded", reasons::AS_EXPECTED, "")
    }
}

/// Only a cluster that was paused carries the condition; it now says it is not.
fn resumed(previous: &StorageOSClusterStatus) -> Option<ConditionUpdate> {
    conditions::find(previous.conditions.as_deref(), PAUSED)?;
    Some(fails(PAUSED, reasons::RESUMED, "the cluster is reconciled again"))
}

/// The condition `type_` of the previous status.
fn before<'a>(obs: &'a ClusterObservation, type_: &str) -> Option<&'a Condition> {
    conditions::find(obs.previous.conditions.as_deref(), type_)
}

/// Names the selected nodes StorageOS cannot run on (at most ten); a Warning when the list
/// is new or changed.
fn nodes_eligible(obs: &ClusterObservation) -> (ConditionUpdate, Option<StatusEvent>) {
    if obs.ineligible.is_empty() {
        let message = "StorageOS can run on every selected node";
        return (holds(NODES_ELIGIBLE, reasons::ALL_NODES_ELIGIBLE, message), None);
    }
    let shown: Vec<String> = obs
        .ineligible
        .iter()
        .take(10)
        .map(|(n, why)| format!("{n} ({why})"))
        .collect();
    let more = match obs.ineligible.len() - shown.len() {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    let message = format!(
        "StorageOS cannot run on {}{more}: they are not counted; keep StorageOS off them with spec.nodeSelectorTerms (kubernetes.io/arch In [amd64], kubernetes.io/os In [linux])",
        shown.join(", ")
    );
    let said = before(obs, NODES_ELIGIBLE).is_some_and(|c| c.status == "False" && c.message == message);
    let event = (!said).then(|| StatusEvent::warning(reasons::NODES_INELIGIBLE, message.clone()));
    (fails(NODES_ELIGIBLE, reasons::NODES_INELIGIBLE, message), event)
}

/// The kv backend check; a Warning when it turns unreachable or fails for another reason.
fn kv_backend(obs: &ClusterObservation) -> (ConditionUpdate, Option<StatusEvent>) {
    let kv = &obs.kv;
    let said = before(obs, kv_backend::CONDITION).is_some_and(|c| c.status == "False" && c.reason == kv.reason);
    let event = (!kv.reachable && !said).then(|| StatusEvent::warning(kv.reason, kv.message.clone()));
    let update = condition(kv_backend::CONDITION, kv.reachable, kv.reason, kv.message.clone());
    (update, event)
}

/// The Kubernetes the operator connected to (an older one than supported stops it at start); a
/// Warning when it is newer than the newest tested, once per version. None when unknown.
fn kubernetes_supported(obs: &ClusterObservation) -> Option<(ConditionUpdate, Option<StatusEvent>)> {
    let v = obs.kubernetes_version.as_ref()?;
    let (major, minor) = crate::checks::TESTED_KUBERNETES;
    let newer = (v.major, v.minor) > (major, minor);
    let (reason, message) = if newer {
        (
            reasons::KUBERNETES_NEWER_THAN_TESTED,
            format!(
                "Kubernetes {v} is newer than the newest tested, {major}.{minor}: expect it to work, and report anything that does not"
            ),
        )
    } else {
        (
            reasons::KUBERNETES_TESTED,
            format!("Kubernetes {v} is within the tested range"),
        )
    };
    let said = before(obs, KUBERNETES_SUPPORTED).is_some_and(|c| c.message == message);
    let event = (newer && !said).then(|| StatusEvent::warning(reason, message.clone()));
    Some((holds(KUBERNETES_SUPPORTED, reason, message), event))
}

/// `ChangedStatus` when the count of functional nodes changed: a Warning only when it fell.
fn changed_status(previous: &StorageOSClusterStatus, status: &StorageOSClusterStatus) -> Option<StatusEvent> {
    if status.ready == previous.ready {
        return None;
    }
    let ready = status.ready.clone().unwrap_or_default();
    let message = if status.phase.as_deref() == Some(phase::RUNNING) {
        format!("{ready} StorageOS nodes are functional. Cluster healthy")
    } else {
        format!("{ready} StorageOS nodes are functional")
    };
    Some(if fewer_functional(previous.ready.as_deref(), &ready) {
        StatusEvent::warning(reasons::CHANGED_STATUS, message)
    } else {
        StatusEvent::normal(reasons::CHANGED_STATUS, message)
    })
}

/// Whether the `ready/desired` count went down: nodes stopped being functional. A cluster coming
/// up (0/3, 1/3, …) or growing is no cause for a Warning.
fn fewer_functional(before: Option<&str>, now: &str) -> bool {
    let count = |s: &str| s.split('/').next().and_then(|n| n.trim().parse::<u32>().ok());
    match (before.and_then(count), count(now)) {
        (Some(b), Some(n)) => n < b,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::fewer_functional;

    #[test]
    fn only_a_falling_count_of_functional_nodes_is_a_warning() {
        assert!(!fewer_functional(None, "0/3"), "a new cluster");
        assert!(!fewer_functional(Some("0/3"), "1/3"), "coming up");
        assert!(!fewer_functional(Some("2/3"), "3/3"));
        assert!(!fewer_functional(Some("3/3"), "3/4"), "a node added");
        assert!(fewer_functional(Some("3/3"), "2/3"), "a node lost");
        assert!(fewer_functional(Some("3/3"), ""), "no count any more");
    }
}
