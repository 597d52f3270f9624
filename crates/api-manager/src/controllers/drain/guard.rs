//! What a guard is: one pod pinned to an unsafe node and one PodDisruptionBudget that lets no
//! eviction take it, in the api-manager's namespace. Pure: names, labels and the objects as
//! server-side apply documents. The label constants are public so that other controllers (the
//! upgrade, a `plan`) can find guards without knowing how they are made.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};

use sha2::{Digest, Sha256};

/// What the upgrade finds the guards by (a contract, named once in `crd`).
pub use crate::crd::{
    DRAIN_GUARD_COMPONENT as COMPONENT, DRAIN_GUARD_NODE_ANNOTATION as NODE_ANNOTATION,
    DRAIN_GUARD_NODE_LABEL as NODE_LABEL, drain_guard_selector as guard_selector,
};
/// The annotation listing why the node is guarded: the PVCs whose last online copy it holds, or
/// the upgrade under way.
pub const BLOCKED_BY_ANNOTATION: &str = "storageos.com/drain-blocked-by";
/// The field manager of the guards (the api-manager's).
pub use crate::controllers::volume_claims::FIELD_MANAGER;
/// The budget's annotation saying since when a drain of the node has waited on the guard (RFC
/// 3339), set from the first read that sees the node cordoned.
pub const WAITING_SINCE_ANNOTATION: &str = "storageos.com/drain-waiting-since";
/// The budget's annotation saying when the guard's hold ended (the cluster's maximum hold): the
/// budget allows the eviction from then until the node is uncordoned.
pub const RELEASED_ANNOTATION: &str = "storageos.com/drain-hold-released";
/// How many blockers an annotation lists before "(+N more)".
const ANNOTATED: usize = 20;
/// The longest node name used as it is in names and labels (a label value holds 63).
const MAX_PLAIN: usize = 40;

/// A guard as it should be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Want {
    /// Why the node is guarded: PVCs (`namespace/name`) or the upgrade under way.
    pub blockers: Vec<String>,
    /// Since when a drain has waited (the node is cordoned).
    pub waiting_since: Option<DateTime<Utc>>,
    /// When the hold ended.
    pub released: Option<DateTime<Utc>>,
}

/// The key of a node's guard: its name when short, else `h-` and a digest of it.
pub fn key(node: &str) -> String {
    if node.len() <= MAX_PLAIN {
        return node.to_string();
    }
    let digest = Sha256::digest(node.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("h-{hex}")
}

/// The name of a node's guard pod and budget.
pub fn name(node: &str) -> String {
    format!("storageos-drain-guard-{}", key(node))
}

/// The labels of a node's guard pod and budget; the budget selects the pod by them.
pub fn labels(node: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "storageos".into()),
        ("app.kubernetes.io/component".into(), COMPONENT.into()),
        ("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into()),
        (NODE_LABEL.into(), key(node)),
    ])
}

/// The blockers as one line, the first [`ANNOTATED`] of them (the annotation of the guard).
pub fn blocked_by(blockers: &[String]) -> String {
    listed(blockers, ANNOTATED)
}

/// The first `n` blockers, then how many more.
fn listed(blockers: &[String], n: usize) -> String {
    let mut s = blockers.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
    if blockers.len() > n {
        s.push_str(&format!(" (+{} more)", blockers.len() - n));
    }
    s
}

/// The budget of `node`'s guard, owned by the Kubernetes Node (deleted with it).
///
/// `minAvailable: 1` rather than `maxUnavailable: 0`: the disruption controller computes a
/// `maxUnavailable` budget from the scale of the pods' controller, which a guard pod has not
/// (its controller is this budget); `minAvailable` counts the pods, so the budget is healthy and
/// allows 0 disruptions. `IfHealthyBudget`: a guard that is not Ready still cannot be evicted.
/// A released hold (`want.released`) is `minAvailable: 0`: the eviction is allowed.
pub fn budget(namespace: &str, node: &str, want: &Want, owner: &OwnerReference) -> Value {
    let selector: BTreeMap<String, String> = labels(node)
        .into_iter()
        .filter(|(k, _)| k == NODE_LABEL || k == "app.kubernetes.io/component")
        .collect();
    let mut metadata = metadata(namespace, node, &want.blockers, owner);
    let stamp = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    if let Some(since) = &want.waiting_since {
        metadata["annotations"][WAITING_SINCE_ANNOTATION] = json!(stamp(since));
    }
    if let Some(released) = &want.released {
        metadata["annotations"][RELEASED_ANNOTATION] = json!(stamp(released));
    }
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": metadata,
        "spec": {
            "minAvailable": if want.released.is_some() { 0 } else { 1 },
            "selector": {"matchLabels": selector},
            "unhealthyPodEvictionPolicy": "IfHealthyBudget",
        }
    })
}

/// A time the budget's annotations hold, parsed (None when absent or not RFC 3339).
pub fn annotated_time(value: Option<&String>) -> Option<DateTime<Utc>> {
    value
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// The metadata a guard's pod and budget share.
fn metadata(namespace: &str, node: &str, blockers: &[String], owner: &OwnerReference) -> Value {
    json!({
        "name": name(node), "namespace": namespace, "labels": labels(node),
        "annotations": {NODE_ANNOTATION: node, BLOCKED_BY_ANNOTATION: blocked_by(blockers)},
        "ownerReferences": [owner],
    })
}

/// The guard pod of `node`: `storageos-operator drain-guard` from `image`, bound to the node
/// (no scheduler: a cordon does not keep it off), tolerating every taint (a `NoExecute` taint
/// must not evict it), tiny, unprivileged. Its controller is its budget (`budget_owner`):
/// `kubectl drain` evicts pods that have a controller, and refuses bare ones without `--force`
/// instead of waiting; and deleting the budget deletes the pod.
pub fn pod(namespace: &str, node: &str, blockers: &[String], image: &str, budget_owner: &OwnerReference) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": metadata(namespace, node, blockers, budget_owner),
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 2,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "guard",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["storageos-operator", "drain-guard"],
                "env": [{"name": "LOG_FORMAT", "value": "json"}],
                "resources": {
                    "requests": {"cpu": "1m", "memory": "8Mi"},
                    "limits": {"memory": "32Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
        }
    })
}

/// How many volumes `blockers` lists, as events say it (the names stay on the mirror: events
/// on a Node are read in `default`, by people who may not see the PVCs' namespaces).
fn counted(blockers: &[String]) -> String {
    let upgrades = blockers.iter().filter(|b| b.starts_with("StorageOSUpgrade ")).count();
    let volumes = blockers.len() - upgrades;
    let mut parts = Vec::new();
    if volumes > 0 {
        parts.push(format!("{volumes} volume{}", if volumes == 1 { "" } else { "s" }));
    }
    if upgrades > 0 {
        parts.push("the StorageOSUpgrade under way".to_string());
    }
    parts.join(" and ")
}

/// Where the volumes holding `node` are listed.
fn listed_at(node: &str) -> String {
    format!("`kubectl get nodes.api.storageos.com {node} -o yaml` lists them (status.drainBlockedBy)")
}

/// The note of the event saying the node is guarded.
pub fn blocked_note(node: &str, blockers: &[String], namespace: &str) -> String {
    note(format!(
        "draining node {node} now would take the last ready copy of {}: evictions from it wait (PodDisruptionBudget {namespace}/{}) until StorageOS reports a ready copy elsewhere; {}",
        counted(blockers),
        name(node),
        listed_at(node),
    ))
}

/// The note of the event saying a drain (the node is cordoned) waits for the guard.
pub fn waiting_note(node: &str, blockers: &[String], namespace: &str, hold_ends: Option<DateTime<Utc>>) -> String {
    let until = match hold_ends {
        Some(t) => format!(
            "until StorageOS reports a ready copy elsewhere, or at most until {} (the cluster's spec.nodeMaintenance.maxDrainHold)",
            t.to_rfc3339_opts(SecondsFormat::Secs, true)
        ),
        None => "until StorageOS reports a ready copy elsewhere (no spec.nodeMaintenance.maxDrainHold is set)".into(),
    };
    note(format!(
        "node {node} is cordoned, but its evictions are refused by PodDisruptionBudget {namespace}/{}: it holds the last ready copy of {}; the drain waits {until}; {}",
        name(node),
        counted(blockers),
        listed_at(node),
    ))
}

/// The note of the Node's event saying its hold ended and the drain may proceed.
pub fn released_note(node: &str, blockers: &[String], waited: &str) -> String {
    note(format!(
        "the drain of node {node} waited {waited}, the cluster's spec.nodeMaintenance.maxDrainHold: its guard now allows the eviction, and {} whose last ready copy is on {node} go offline with it (their PVCs have events saying so); {}",
        counted(blockers),
        listed_at(node),
    ))
}

/// The note of the event on a PVC whose volume's last ready copy is on a guarded node.
pub fn pvc_blocked_note(node: &str) -> String {
    format!(
        "the last ready copy of this volume is on node {node}: a drain of {node} waits until StorageOS reports a ready copy elsewhere"
    )
}

/// The note of the event on a PVC whose volume is at risk since its node's hold ended.
pub fn pvc_released_note(node: &str, waited: &str) -> String {
    format!(
        "the drain of node {node} waited {waited} (the cluster's maximum hold) and now proceeds: this volume's last ready copy is on {node}, so the volume is offline while the node is"
    )
}

/// An event note within the apiserver's limit.
fn note(text: String) -> String {
    crate::text::truncated(&text, crate::text::EVENT_NOTE_LIMIT)
}

/// The note of the event saying the guard is gone.
pub fn unblocked_note(node: &str) -> String {
    format!("node {node} holds no last copy of a volume a drain must wait for any more: its drain guard was removed")
}
