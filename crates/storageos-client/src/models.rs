//! Wire types of the StorageOS v2 API subset the operator and api-manager use.
//!
//! Every field is `#[serde(default)]` and `null` collections read as empty, because the Go server
//! serialises nil maps and slices as `null` and clients must read a missing field as its zero value.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use smol_str::SmolStr;

pub use crate::label_set::LabelSet;

/// Label keys prefixed with this are reserved to StorageOS and change only through their own
/// endpoints (compute-only, replicas, failure-mode, mount-endpoint).
pub const RESERVED_PREFIX: &str = "storageos.com/";
/// Reserved node label that marks a node as compute-only.
pub const LABEL_COMPUTE_ONLY: &str = "storageos.com/computeonly";
/// Reserved volume label: desired replica count.
pub const LABEL_REPLICAS: &str = "storageos.com/replicas";
/// Reserved volume label: failure mode (intent name or decimal threshold).
pub const LABEL_FAILURE_MODE: &str = "storageos.com/failure-mode";
/// Reserved volume label: the NFS mount endpoint published by the shared-volume controller.
pub const LABEL_NFS_MOUNT_ENDPOINT: &str = "storageos.com/nfs/mount-endpoint";
/// CSI provisioner labels set at volume creation; reserved on volumes.
pub const LABEL_CSI_PVC_NAME: &str = "csi.storage.k8s.io/pvc/name";
/// See [`LABEL_CSI_PVC_NAME`].
pub const LABEL_CSI_PVC_NAMESPACE: &str = "csi.storage.k8s.io/pvc/namespace";
/// See [`LABEL_CSI_PVC_NAME`].
pub const LABEL_CSI_PV_NAME: &str = "csi.storage.k8s.io/pv/name";

/// Whether `key` is reserved on a node.
pub fn is_reserved_node_label(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX)
}

/// Whether `key` is reserved on a volume (StorageOS keys plus the three CSI keys).
pub fn is_reserved_volume_label(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX)
        || key == LABEL_CSI_PVC_NAME
        || key == LABEL_CSI_PVC_NAMESPACE
        || key == LABEL_CSI_PV_NAME
}

/// Labels as the API carries them (sorted, so bodies and comparisons are stable).
pub type Labels = BTreeMap<String, String>;

/// Reads `null` as the type's default (Go nil maps and slices).
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Health of a node or of a volume's master deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Serving.
    Online,
    /// Lost; the fencer acts only on this.
    Offline,
    /// Anything else the server reports.
    #[default]
    #[serde(other)]
    Unknown,
}

impl Health {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Online => "online",
            Health::Offline => "offline",
            Health::Unknown => "unknown",
        }
    }
}

impl std::str::FromStr for Health {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "online" => Ok(Health::Online),
            "offline" => Ok(Health::Offline),
            "unknown" => Ok(Health::Unknown),
            other => Err(format!("health {other:?} is not one of online, offline, unknown")),
        }
    }
}

/// `GET /cluster`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Cluster {
    pub id: String,
    pub disable_telemetry: bool,
    pub disable_crash_reporting: bool,
    pub disable_version_check: bool,
    pub log_level: String,
    pub log_format: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: String,
}

/// Body of `PUT /cluster`: a full replacement of the five settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateCluster {
    pub disable_telemetry: bool,
    pub disable_crash_reporting: bool,
    pub disable_version_check: bool,
    /// `debug|info|warn|error`; empty means the default (`info`).
    pub log_level: String,
    /// `default|json`; empty means `default`.
    pub log_format: String,
    /// The version read from `GET /cluster`.
    pub version: String,
}

impl Cluster {
    /// The update that keeps every setting as it is; change fields, then send it.
    pub fn to_update(&self) -> UpdateCluster {
        UpdateCluster {
            disable_telemetry: self.disable_telemetry,
            disable_crash_reporting: self.disable_crash_reporting,
            disable_version_check: self.disable_version_check,
            log_level: self.log_level.clone(),
            log_format: self.log_format.clone(),
            version: self.version.clone(),
        }
    }
}

/// Storage capacity of a node, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Capacity {
    pub total: u64,
    pub free: u64,
    pub available: u64,
}

/// A StorageOS node; `name` is the Kubernetes node name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Node {
    pub id: String,
    pub name: SmolStr,
    pub health: Health,
    pub capacity: Capacity,
    pub io_endpoint: SmolStr,
    pub supervisor_endpoint: SmolStr,
    pub gossip_endpoint: SmolStr,
    pub clustering_endpoint: SmolStr,
    #[serde(deserialize_with = "null_as_default")]
    pub labels: LabelSet,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: SmolStr,
}

impl Node {
    /// Whether the reserved compute-only label is set to a true value.
    pub fn compute_only(&self) -> bool {
        self.labels
            .get(LABEL_COMPUTE_ONLY)
            .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
    }
}

/// A node's name and health: what a cluster's status reads of every node, parsed from the same
/// `GET /nodes` answer without the rest (at 5,000 nodes the full models are ~2.5 MB, on every
/// status pass of the operator).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct NodeHealth {
    pub name: String,
    pub health: Health,
}

/// A StorageOS namespace; `name` is the Kubernetes namespace name, `id` is distinct from it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Namespace {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub labels: LabelSet,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: String,
}

/// NFS state of a volume; `service_endpoint` is `ip:port` while the volume is shared.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Nfs {
    pub exports: Option<Vec<serde_json::Value>>,
    pub service_endpoint: Option<String>,
}

/// The master deployment of a volume.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Master {
    pub id: String,
    #[serde(rename = "nodeID")]
    pub node_id: String,
    pub promotable: bool,
    pub health: Health,
}

/// Progress of a syncing replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncProgress {
    pub bytes_remaining: u64,
    pub throughput_bytes: u64,
    pub estimated_seconds_remaining: u64,
}

/// A replica deployment; `health` is one of recovering, provisioning, provisioned, syncing,
/// ready, deleted, failed, unknown.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Replica {
    pub id: String,
    #[serde(rename = "nodeID")]
    pub node_id: String,
    pub promotable: bool,
    pub health: SmolStr,
    pub sync_progress: SyncProgress,
}

/// A StorageOS volume; `name` is the PV name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Volume {
    pub id: String,
    pub name: String,
    pub description: String,
    /// Node ID the volume is attached on; empty when detached.
    pub attached_on: String,
    pub nfs: Nfs,
    #[serde(rename = "namespaceID")]
    pub namespace_id: String,
    #[serde(deserialize_with = "null_as_default")]
    pub labels: LabelSet,
    pub fs_type: SmolStr,
    /// `unknown|detached|nfs|host`.
    pub attachment_type: SmolStr,
    pub master: Master,
    #[serde(deserialize_with = "null_as_default")]
    pub replicas: Vec<Replica>,
    pub size_bytes: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: SmolStr,
}

impl Volume {
    /// Healthy in the api-manager's sense: the master is online (replicas do not count).
    pub fn is_healthy(&self) -> bool {
        self.master.health == Health::Online
    }

    /// The NFS service endpoint while the volume is shared.
    pub fn nfs_endpoint(&self) -> Option<&str> {
        self.nfs.service_endpoint.as_deref().filter(|s| !s.is_empty())
    }

    /// The labels that are not reserved.
    pub fn unreserved_labels(&self) -> Labels {
        self.labels
            .iter()
            .filter(|(k, _)| !is_reserved_volume_label(k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// How a volume behaves when replicas fail: an intent, or a minimum number of replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    Hard,
    Soft,
    AlwaysOn,
    /// Minimum healthy replicas, 0..=5.
    Threshold(u8),
}

impl FailureMode {
    /// The value of the `storageos.com/failure-mode` label this mode produces.
    pub fn label_value(&self) -> String {
        match self {
            FailureMode::Hard => "hard".into(),
            FailureMode::Soft => "soft".into(),
            FailureMode::AlwaysOn => "alwayson".into(),
            FailureMode::Threshold(n) => n.to_string(),
        }
    }
}

impl std::str::FromStr for FailureMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hard" => Ok(FailureMode::Hard),
            "soft" => Ok(FailureMode::Soft),
            "alwayson" => Ok(FailureMode::AlwaysOn),
            n => n
                .parse::<u8>()
                .map(FailureMode::Threshold)
                .map_err(|_| format!("failure mode {n:?} is not hard, soft, alwayson or a number 0..5")),
        }
    }
}

/// Body of `PUT .../failure-mode`; the Go client omits whichever field is empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SetFailureModeBody {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub failure_threshold: u64,
    pub version: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Session part of a login or refresh response.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Session {
    pub expires_in_seconds: u64,
    pub token: String,
}

/// Body of a login or refresh response. The token clients use comes from the header.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UserSession {
    pub id: String,
    pub username: String,
    pub is_admin: bool,
    pub groups: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: String,
    pub session: Session,
}

/// Body of a 202 response.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AcceptedMessage {
    pub msg: String,
}

/// Error body of every 4xx/5xx response.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    pub error: String,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn null_collections_and_unknown_health_read_as_defaults() {
        let v: Volume = serde_json::from_str(
            r#"{"id":"v","labels":null,"replicas":null,"master":{"health":"weird"},"nfs":{"exports":null,"serviceEndpoint":null}}"#,
        )
        .unwrap();
        assert!(v.labels.is_empty());
        assert!(v.replicas.is_empty());
        assert_eq!(v.master.health, Health::Unknown);
        assert_eq!(v.nfs_endpoint(), None);
    }

    #[test]
    fn failure_mode_round_trips_through_its_label() {
        for m in [
            FailureMode::Hard,
            FailureMode::Soft,
            FailureMode::AlwaysOn,
            FailureMode::Threshold(3),
        ] {
            assert_eq!(m.label_value().parse::<FailureMode>().unwrap(), m);
        }
        assert!("sometimes".parse::<FailureMode>().is_err());
    }

    #[test]
    fn reserved_labels_are_recognised() {
        assert!(is_reserved_volume_label(LABEL_CSI_PV_NAME));
        assert!(is_reserved_volume_label(LABEL_REPLICAS));
        assert!(!is_reserved_node_label(LABEL_CSI_PV_NAME));
        assert!(!is_reserved_volume_label("app"));
    }

    #[test]
    fn failure_mode_body_omits_empty_fields() {
        let b = SetFailureModeBody {
            mode: String::new(),
            failure_threshold: 0,
            version: "v".into(),
        };
        assert_eq!(serde_json::to_string(&b).unwrap(), r#"{"version":"v"}"#);
    }
}
