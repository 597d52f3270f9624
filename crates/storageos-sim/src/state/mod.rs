//! The simulator's in-memory state and every behaviour rule, free of HTTP so it can be tested
//! directly. One mutex (in the server) guards one [`State`].

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use storageos_client::models::{
    self, Capacity, Cluster, Health, LABEL_COMPUTE_ONLY, LABEL_CSI_PV_NAME, LABEL_CSI_PVC_NAME,
    LABEL_CSI_PVC_NAMESPACE, LABEL_FAILURE_MODE, LABEL_NFS_MOUNT_ENDPOINT, LABEL_REPLICAS, Labels, Master, Namespace,
    Nfs, Node, Replica, SyncProgress, UserSession, Volume, is_reserved_node_label, is_reserved_volume_label,
};

use super::Config;

mod auth;
mod faults;
mod namespaces;
mod nodes;
mod volumes;

/// An error answer of the API: status code and the text of `{"error": ...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
    pub fn not_found(what: &str) -> Self {
        Self::new(404, format!("{what} not found"))
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }
    pub fn unauthenticated() -> Self {
        Self::new(401, "authentication required")
    }
    fn stale() -> Self {
        Self::new(412, "attempting to write stale object")
    }
}

/// Injected faults, as set by `PUT /_sim/faults`. Only requests whose method and path match
/// (when given) are affected; `/_sim/` requests never are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Faults {
    /// How many matching requests fail with `status`.
    pub fail_next: u32,
    /// Status of the injected failures (500 if 0).
    pub status: u16,
    /// Delay before each matching request is handled.
    pub latency_ms: u64,
    /// Only requests whose path contains this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Only requests with this method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Text of the injected `{"error"}` body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A node whose StorageOS pod (re)starts running this image stays offline (the
    /// `--kubeconfig` sync; not a request fault).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offline_with_image: Option<String>,
    /// The `fail_next` requests lose their connection instead of getting `status`: before
    /// they are handled, or after (the change is made, the answer never arrives).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_connection: Option<DropPoint>,
}

/// Where a dropped connection is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DropPoint {
    /// The request is never handled.
    BeforeHandling,
    /// The request is handled; its answer is lost.
    AfterHandling,
}

/// What an injected fault does to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Injected {
    /// It is answered with this error.
    Fail(ApiError),
    /// Its connection is dropped.
    Drop(DropPoint),
}

impl Faults {
    fn matches(&self, method: &str, path: &str) -> bool {
        self.path.as_deref().is_none_or(|p| path.contains(p))
            && self.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method))
    }
}

/// One entry of the request log (`GET /_sim/requests`). Login bodies are never recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    pub seq: u64,
    pub time: DateTime<Utc>,
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
    pub duration_ms: u64,
    /// Whether the answer was an injected fault (an error, or a dropped connection).
    pub injected: bool,
    /// The connection was dropped: `status` is 0 if it was dropped before the request was
    /// handled, else the status of the answer that was lost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dropped: bool,
    pub body: Option<serde_json::Value>,
}

/// A volume to seed, as `POST /_sim/volumes` takes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeSeed {
    /// StorageOS (= Kubernetes) namespace name; created if missing.
    pub namespace: String,
    /// Volume (= PV) name.
    pub name: String,
    pub pvc_name: String,
    pub pvc_namespace: String,
    /// Name of the node holding the master.
    pub master_node: String,
    /// Desired replicas (placed at once on other online nodes).
    pub replicas: u8,
    /// Makes the volume NFS-attached on its master node with this `ip:port`.
    pub nfs_service_endpoint: Option<String>,
    /// Extra labels.
    pub labels: Labels,
    pub size_bytes: u64,
}

/// A node to register, as `POST /_sim/nodes` takes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSeed {
    pub name: String,
    pub health: Option<Health>,
    /// IP of its endpoints; allocated from 10.0.0.0/16 if absent.
    pub ip: Option<String>,
    pub labels: Labels,
}

struct SimNode {
    node: Node,
    ip: String,
    offline_since: Option<DateTime<Utc>>,
}

struct SessionEntry {
    expires_at: DateTime<Utc>,
}

/// Body fields of writes, all optional (the Go client omits zero values).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WriteBody {
    pub version: Option<String>,
    #[serde(deserialize_with = "models::null_as_default")]
    pub labels: Labels,
    pub description: Option<String>,
    pub compute_only: bool,
    pub replicas: Option<i64>,
    pub mode: Option<String>,
    pub failure_threshold: Option<i64>,
    pub mount_endpoint: Option<String>,
    #[serde(rename = "nodeID")]
    pub node_id: Option<String>,
    pub name: Option<String>,
    pub fs_type: Option<String>,
    pub size_bytes: Option<u64>,
    pub disable_telemetry: bool,
    pub disable_crash_reporting: bool,
    pub disable_version_check: bool,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
}

/// Version of a DELETE: the `version` and `ignore-version` query parameters.
#[derive(Debug, Default, Clone)]
pub struct DeleteVersion {
    pub version: Option<String>,
    pub ignore: bool,
}

/// All simulated state.
pub struct State {
    cfg: Config,
    clock_offset: chrono::Duration,
    revision: u64,
    cluster: Cluster,
    user_id: String,
    user_created: DateTime<Utc>,
    sessions: HashMap<String, SessionEntry>,
    namespaces: Vec<Namespace>,
    nodes: Vec<SimNode>,
    volumes: Vec<Volume>,
    next_ip: u32,
    next_nfs_port: u16,
    faults: Faults,
    log: Vec<RequestRecord>,
    seq: u64,
}

/// Bounded so that a long demo does not grow without end.
const MAX_LOG: usize = 10_000;

pub(crate) fn new_id() -> String {
    let n: u128 = rand::random();
    let h = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn new_token() -> String {
    let a: u128 = rand::random();
    let b: u128 = rand::random();
    format!("sim.{a:032x}{b:032x}")
}

fn ready_replica(node_id: &str) -> Replica {
    Replica {
        id: new_id(),
        node_id: node_id.to_string(),
        promotable: true,
        health: "ready".into(),
        sync_progress: SyncProgress::default(),
    }
}

impl State {
    pub fn new(cfg: Config) -> Self {
        let now = Utc::now();
        let mut s = Self {
            cfg,
            clock_offset: chrono::Duration::zero(),
            revision: 0,
            cluster: Cluster::default(),
            user_id: new_id(),
            user_created: now,
            sessions: HashMap::new(),
            namespaces: Vec::new(),
            nodes: Vec::new(),
            volumes: Vec::new(),
            next_ip: 0,
            next_nfs_port: 25000,
            faults: Faults::default(),
            log: Vec::new(),
            seq: 0,
        };
        let version = s.bump();
        s.cluster = Cluster {
            id: new_id(),
            disable_telemetry: false,
            disable_crash_reporting: false,
            disable_version_check: false,
            log_level: "info".into(),
            log_format: "default".into(),
            created_at: now,
            updated_at: now,
            version,
        };
        s
    }

    /// The simulated clock: wall time plus whatever tests advanced it by.
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.clock_offset
    }

    /// Moves the simulated clock forward (token expiry, node lock).
    pub fn advance_clock(&mut self, by: Duration) {
        self.clock_offset += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::zero());
    }

    /// Next global revision, as an opaque version string.
    fn bump(&mut self) -> String {
        self.revision += 1;
        base64::engine::general_purpose::STANDARD.encode(self.revision.to_string())
    }

    fn check_body_version(&self, current: &str, given: Option<&str>, ignore: bool) -> Result<(), ApiError> {
        if ignore {
            return Ok(());
        }
        match given {
            None | Some("") if self.cfg.accept_missing_version => Ok(()),
            Some(v) if v == current => Ok(()),
            _ => Err(ApiError::stale()),
        }
    }

    fn check_delete_version(&self, current: &str, v: &DeleteVersion) -> Result<(), ApiError> {
        if v.ignore {
            return Ok(());
        }
        match v.version.as_deref() {
            None if !self.cfg.accept_missing_version => {
                Err(ApiError::bad_request("query parameter \"version\" is required"))
            }
            other => self.check_body_version(current, other, false),
        }
    }
}

/// The label set a PUT produces: reserved keys from `current` (a reserved key in the request
/// with another value, or a new reserved key, is rejected), unreserved keys from `requested`.
fn merge_reserved(current: &Labels, requested: &Labels, reserved: fn(&str) -> bool) -> Result<Labels, ApiError> {
    for (k, v) in requested.iter().filter(|(k, _)| reserved(k)) {
        if current.get(k) != Some(v) {
            return Err(ApiError::bad_request(format!(
                "label {k:?} is reserved by StorageOS and cannot be changed here; use its own endpoint"
            )));
        }
    }
    Ok(current
        .iter()
        .filter(|(k, _)| reserved(k))
        .chain(requested.iter().filter(|(k, _)| !reserved(k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect())
}
