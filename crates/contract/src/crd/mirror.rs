//! `nodes.api.storageos.com` and `volumes.api.storageos.com`: read-only mirrors of the StorageOS
//! API, written by the api-manager leader from its shared poll, so that `kubectl get` shows what
//! StorageOS thinks (docs/observability.md). They hold status only; editing them changes nothing
//! in StorageOS (the next change the api-manager sees puts the mirror back).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Empty: the mirror holds status only. (Cluster-scoped, named after the node, owned by the
/// Kubernetes Node of that name when there is one.)
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "api.storageos.com",
    version = "v1",
    kind = "Node",
    root = "StorageOSNode",
    plural = "nodes",
    singular = "node",
    status = "NodeMirrorStatus",
    printcolumn = r#"{"name":"Health","type":"string","jsonPath":".status.health","description":"online, offline or unknown, as StorageOS reports it."}"#,
    printcolumn = r#"{"name":"Since","type":"date","jsonPath":".status.healthSince","description":"When the mirror first saw the current health."}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".status.capacity.total","description":"Storage capacity of the node."}"#,
    printcolumn = r#"{"name":"Free","type":"string","jsonPath":".status.capacity.free","description":"Free capacity, in whole GiB."}"#,
    printcolumn = r#"{"name":"Last-Online","type":"date","jsonPath":".status.lastSeenOnline","description":"The last poll that saw the node online (set once it is not)."}"#,
    printcolumn = r#"{"name":"Eligible","type":"boolean","jsonPath":".status.eligible","description":"Whether StorageOS can run on the node (its OS and architecture).","priority":1}"#,
    printcolumn = r#"{"name":"Safe-To-Drain","type":"boolean","jsonPath":".status.safeToDrain","description":"Whether draining or rebooting the node keeps a ready copy of every volume the drain policy protects (unset until a complete volume read)."}"#,
    printcolumn = r#"{"name":"Unprotected","type":"integer","jsonPath":".status.unprotectedCount","description":"Volumes with 0 replicas whose only copy is on the node: a drain or the loss of the node takes them offline."}"#,
    printcolumn = r#"{"name":"Drain-Policy","type":"string","jsonPath":".status.drainPolicy","description":"The cluster's spec.nodeMaintenance.drainPolicy, which decides Safe-To-Drain and whether a drain waits.","priority":1}"#,
    doc = "A StorageOS node as the StorageOS API reports it; written by the api-manager, read-only for users."
)]
pub struct NodeMirrorSpec {}

/// What StorageOS reports about a node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMirrorStatus {
    /// The StorageOS node ID.
    pub id: String,
    /// `online`, `offline` or `unknown`.
    pub health: String,
    /// When the api-manager first saw the current health (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_since: Option<String>,
    /// The last poll that saw the node online, set when it stops being online (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_online: Option<String>,
    /// Storage capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<NodeCapacity>,
    /// The node's StorageOS labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The StorageOS object version (changes when StorageOS changes the node's settings).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// When StorageOS registered the node (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// The cluster's drain policy (`spec.nodeMaintenance.drainPolicy`): which volumes count for
    /// `safeToDrain` and make a drain wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_policy: Option<String>,
    /// Whether draining or rebooting the node keeps a ready copy of every volume the drain
    /// policy protects: false when it holds the last ready copy of one (a master whose replicas
    /// are still syncing, or the only ready replica while the master is offline). Unset until the
    /// api-manager has read every volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safe_to_drain: Option<bool>,
    /// The PVCs (`namespace/name`) whose last ready copy is on the node and that the drain
    /// policy protects, sorted, at most [`DRAIN_BLOCKED_SHOWN`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_blocked_by: Vec<String>,
    /// How many volumes block a drain (all of them, also beyond those named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_blocked_count: Option<i64>,
    /// The PVCs with 0 replicas whose only copy is on the node, sorted, at most
    /// [`DRAIN_BLOCKED_SHOWN`]: unprotected, they go offline with the node (and make a drain
    /// wait only under `BlockLastCopy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unprotected: Vec<String>,
    /// How many volumes with 0 replicas have their only copy on the node (set once every volume
    /// was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unprotected_count: Option<i64>,
    /// Volumes (by PV name) whose last copy is on the node but that no PVC uses any more (their
    /// PVC deleted, their PersistentVolume released or deleted): they never make a drain wait.
    /// Sorted, at most [`DRAIN_BLOCKED_SHOWN`]; delete them in StorageOS when they are not wanted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphaned: Vec<String>,
    /// How many such orphaned volumes there are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphaned_count: Option<i64>,
    /// Whether StorageOS can run on this node, from the Kubernetes Node's `kubernetes.io/os` and
    /// `kubernetes.io/arch` (linux, amd64); unset while that Node is not known. The
    /// StorageOSCluster's NodesEligible condition also checks the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible: Option<bool>,
    /// Why StorageOS cannot run on this node, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ineligible_because: Option<String>,
}

/// How many blocking PVCs a node mirror names.
pub const DRAIN_BLOCKED_SHOWN: usize = 20;

/// Capacity as Kubernetes quantities; free and available in whole GiB, so that a filling disk
/// changes the mirror at most once per GiB.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeCapacity {
    /// All storage of the node.
    pub total: String,
    /// Storage not written to, in whole GiB.
    pub free: String,
    /// Storage that can still be provisioned, in whole GiB.
    pub available: String,
}

/// Empty: the mirror holds status only. (In its PVC's namespace, named after its PV, owned by
/// the PVC.)
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "api.storageos.com",
    version = "v1",
    kind = "Volume",
    root = "StorageOSVolume",
    plural = "volumes",
    singular = "volume",
    namespaced,
    status = "VolumeMirrorStatus",
    printcolumn = r#"{"name":"PVC","type":"string","jsonPath":".status.pvc","description":"The PVC the volume belongs to."}"#,
    printcolumn = r#"{"name":"Health","type":"string","jsonPath":".status.health","description":"healthy, syncing, degraded (fewer ready replicas than wanted) or unavailable (master not online)."}"#,
    printcolumn = r#"{"name":"Master","type":"string","jsonPath":".status.master.node","description":"The node holding the master."}"#,
    printcolumn = r#"{"name":"Replicas","type":"string","jsonPath":".status.replicasReady","description":"Ready replicas out of those wanted."}"#,
    printcolumn = r#"{"name":"Unprotected","type":"boolean","jsonPath":".status.unprotected","description":"0 replicas: the volume goes offline with its node.","priority":1}"#,
    printcolumn = r#"{"name":"Attached","type":"string","jsonPath":".status.attachment.type","description":"host, nfs or detached."}"#,
    printcolumn = r#"{"name":"Attached-On","type":"string","jsonPath":".status.attachment.node","description":"The node it is attached on."}"#,
    printcolumn = r#"{"name":"Size","type":"string","jsonPath":".status.size"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A StorageOS volume as the StorageOS API reports it; written by the api-manager, read-only for users."
)]
pub struct VolumeMirrorSpec {}

/// What StorageOS reports about a volume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMirrorStatus {
    /// The StorageOS volume ID.
    pub id: String,
    /// The PVC (in this namespace) the volume was provisioned for.
    pub pvc: String,
    /// `healthy`, `syncing`, `degraded` or `unavailable`.
    pub health: String,
    /// Size as a Kubernetes quantity.
    pub size: String,
    /// Size in bytes.
    pub size_bytes: i64,
    /// The master copy.
    pub master: VolumeMaster,
    /// Replicas wanted (label `storageos.com/replicas`).
    pub replicas_wanted: i32,
    /// True for a volume with 0 replicas: its only copy is the master, so a drain or the loss of
    /// its node takes it offline, and (unless the drain policy is `BlockLastCopy`) no drain
    /// waits for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unprotected: bool,
    /// `ready/wanted`, for `kubectl get`.
    pub replicas_ready: String,
    /// Every replica.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<VolumeReplica>,
    /// How and where it is attached.
    pub attachment: VolumeAttachment,
    /// The NFS endpoints of a shared (RWX) volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs: Option<VolumeNfs>,
    // No StorageOS object version: it changes with every StorageOS write to the volume, labels
    // included, which the mirror does not show (the PVC label sync's first pass would rewrite
    // every volume mirror for it), and nothing reads it.
}

/// Where the master is.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMaster {
    /// Node name (its ID when the node is not known).
    pub node: String,
    /// `online`, `offline` or `unknown`.
    pub health: String,
}

/// One replica.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeReplica {
    /// Node name (its ID when the node is not known).
    pub node: String,
    /// StorageOS replica health (`ready`, `syncing`, `unknown`, ...).
    pub health: String,
    /// Whether it can become the master.
    pub promotable: bool,
    /// Sync progress while it catches up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncProgress>,
}

/// A replica's sync progress.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncProgress {
    /// Bytes still to copy.
    pub bytes_remaining: i64,
    /// Copy rate, bytes per second.
    pub throughput_bytes: i64,
    /// Estimated time to finish, in seconds.
    pub estimated_seconds_remaining: i64,
}

/// How a volume is attached.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAttachment {
    /// `host`, `nfs` or `detached`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Node name it is attached on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// NFS endpoints of a shared volume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeNfs {
    /// Where the NFS server listens (`ip:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_endpoint: Option<String>,
    /// What clients mount (`<ClusterIP>:2049`, published by the shared volume controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_endpoint: Option<String>,
}
