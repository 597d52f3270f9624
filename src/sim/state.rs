//! The simulator's in-memory state and every behaviour rule, free of HTTP so it can be tested
//! directly. One mutex (in the server) guards one [`State`].

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::storageos::models::{
    self, Capacity, Cluster, Health, LABEL_COMPUTE_ONLY, LABEL_CSI_PV_NAME, LABEL_CSI_PVC_NAME,
    LABEL_CSI_PVC_NAMESPACE, LABEL_FAILURE_MODE, LABEL_NFS_MOUNT_ENDPOINT, LABEL_REPLICAS, Labels, Master, Namespace,
    Nfs, Node, Replica, SyncProgress, UserSession, Volume, is_reserved_node_label, is_reserved_volume_label,
};

use super::Config;

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
    /// Whether the answer was an injected fault.
    pub injected: bool,
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

    // ---------------------------------------------------------------- auth

    fn session(&self, token: &str, expires_in: u64) -> UserSession {
        UserSession {
            id: self.user_id.clone(),
            username: self.cfg.username.clone(),
            is_admin: true,
            groups: None,
            created_at: self.user_created,
            updated_at: self.user_created,
            version: "MQ==".into(),
            session: models::Session {
                expires_in_seconds: expires_in,
                token: token.to_string(),
            },
        }
    }

    fn issue_token(&mut self) -> (String, u64) {
        let token = new_token();
        let ttl = self.cfg.token_ttl;
        let expires_at = self.now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::zero());
        self.sessions.insert(token.clone(), SessionEntry { expires_at });
        (token, ttl.as_secs())
    }

    /// `POST /auth/login`: a new token, or 401 for wrong credentials.
    pub fn login(&mut self, username: &str, password: &str) -> Result<(String, u64, UserSession), ApiError> {
        if username != self.cfg.username || password != self.cfg.password {
            return Err(ApiError::new(401, "invalid credentials"));
        }
        let (token, ttl) = self.issue_token();
        let session = self.session(&token, ttl);
        Ok((token, ttl, session))
    }

    /// Whether `token` is valid now.
    pub fn authenticate(&self, token: Option<&str>) -> Result<(), ApiError> {
        let now = self.now();
        match token.and_then(|t| self.sessions.get(t)) {
            Some(s) if s.expires_at > now => Ok(()),
            _ => Err(ApiError::unauthenticated()),
        }
    }

    /// `POST /auth/refresh`: a new token; the old one stays valid until its own expiry.
    pub fn refresh(&mut self, token: Option<&str>) -> Result<(String, u64, UserSession), ApiError> {
        self.authenticate(token)?;
        let (token, ttl) = self.issue_token();
        let session = self.session(&token, ttl);
        Ok((token, ttl, session))
    }

    /// Expires every issued token; returns how many were still valid.
    pub fn expire_tokens(&mut self) -> usize {
        let now = self.now();
        let past = now - chrono::Duration::seconds(1);
        let mut n = 0;
        for s in self.sessions.values_mut() {
            if s.expires_at > now {
                n += 1;
            }
            s.expires_at = past;
        }
        n
    }

    /// `DELETE /users/self/sessions`: revokes all tokens of the (single) user.
    pub fn revoke_sessions(&mut self) {
        self.sessions.clear();
    }

    // ---------------------------------------------------------------- cluster

    pub fn cluster(&self) -> Cluster {
        self.cluster.clone()
    }

    /// `PUT /cluster`: full replacement of the five settings.
    pub fn update_cluster(&mut self, b: &WriteBody, ignore: bool) -> Result<Cluster, ApiError> {
        self.check_body_version(&self.cluster.version, b.version.as_deref(), ignore)?;
        let log_level = match b.log_level.as_deref().unwrap_or("") {
            "" => "info",
            l @ ("debug" | "info" | "warn" | "error") => l,
            other => {
                return Err(ApiError::bad_request(format!(
                    "logLevel {other:?} is not one of debug, info, warn, error"
                )));
            }
        };
        let log_format = match b.log_format.as_deref().unwrap_or("") {
            "" => "default",
            f @ ("default" | "json") => f,
            other => {
                return Err(ApiError::bad_request(format!(
                    "logFormat {other:?} is not one of default, json"
                )));
            }
        };
        let version = self.bump();
        let now = self.now();
        let c = &mut self.cluster;
        c.disable_telemetry = b.disable_telemetry;
        c.disable_crash_reporting = b.disable_crash_reporting;
        c.disable_version_check = b.disable_version_check;
        c.log_level = log_level.into();
        c.log_format = log_format.into();
        c.updated_at = now;
        c.version = version;
        Ok(c.clone())
    }

    /// Forces the next cluster write with the old version to fail with 412.
    pub fn bump_cluster_version(&mut self) -> String {
        let v = self.bump();
        self.cluster.version = v.clone();
        v
    }

    // ---------------------------------------------------------------- namespaces

    pub fn namespaces(&self) -> Vec<Namespace> {
        self.namespaces.clone()
    }

    fn ns_index(&self, id: &str) -> Result<usize, ApiError> {
        self.namespaces
            .iter()
            .position(|n| n.id == id)
            .ok_or_else(|| ApiError::not_found("namespace"))
    }

    pub fn namespace(&self, id: &str) -> Result<Namespace, ApiError> {
        Ok(self.namespaces[self.ns_index(id)?].clone())
    }

    /// `POST /namespaces`.
    pub fn create_namespace(&mut self, name: &str, labels: Labels) -> Result<Namespace, ApiError> {
        let valid = !name.is_empty()
            && name.len() <= 253
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
        if !valid {
            return Err(ApiError::bad_request(format!(
                "namespace name {name:?} must match ^[a-z0-9.\\-]{{1,253}}$"
            )));
        }
        if self.namespaces.iter().any(|n| n.name == name) {
            return Err(ApiError::new(409, "already exists"));
        }
        let now = self.now();
        let ns = Namespace {
            id: new_id(),
            name: name.to_string(),
            labels,
            created_at: now,
            updated_at: now,
            version: self.bump(),
        };
        self.namespaces.push(ns.clone());
        Ok(ns)
    }

    fn ensure_namespace(&mut self, name: &str) -> Result<String, ApiError> {
        match self.namespaces.iter().find(|n| n.name == name) {
            Some(n) => Ok(n.id.clone()),
            None => self.create_namespace(name, Labels::new()).map(|n| n.id),
        }
    }

    /// `PUT /namespaces/{id}`.
    pub fn update_namespace(&mut self, id: &str, b: &WriteBody, ignore: bool) -> Result<Namespace, ApiError> {
        let i = self.ns_index(id)?;
        self.check_body_version(&self.namespaces[i].version, b.version.as_deref(), ignore)?;
        let version = self.bump();
        let now = self.now();
        let ns = &mut self.namespaces[i];
        ns.labels = b.labels.clone();
        ns.version = version;
        ns.updated_at = now;
        Ok(ns.clone())
    }

    /// `DELETE /namespaces/{id}`: 404, 412, 409 while it holds volumes.
    pub fn delete_namespace(&mut self, id: &str, v: &DeleteVersion) -> Result<(), ApiError> {
        let i = self.ns_index(id)?;
        self.check_delete_version(&self.namespaces[i].version, v)?;
        if self.volumes.iter().any(|vol| vol.namespace_id == id) {
            return Err(ApiError::new(409, "in use: the namespace still holds volumes"));
        }
        self.namespaces.remove(i);
        Ok(())
    }

    // ---------------------------------------------------------------- nodes

    pub fn nodes(&self) -> Vec<Node> {
        self.nodes.iter().map(|n| n.node.clone()).collect()
    }

    fn node_index(&self, id: &str) -> Result<usize, ApiError> {
        self.nodes
            .iter()
            .position(|n| n.node.id == id)
            .ok_or_else(|| ApiError::not_found("node"))
    }

    fn node_index_by_name(&self, name: &str) -> Result<usize, ApiError> {
        self.nodes
            .iter()
            .position(|n| n.node.name == name)
            .ok_or_else(|| ApiError::not_found(&format!("node {name:?}")))
    }

    pub fn node(&self, id: &str) -> Result<Node, ApiError> {
        Ok(self.nodes[self.node_index(id)?].node.clone())
    }

    /// Registers a node, as a joining StorageOS node does. 409 if the name is taken.
    pub fn add_node(&mut self, seed: NodeSeed) -> Result<Node, ApiError> {
        if seed.name.is_empty() {
            return Err(ApiError::bad_request("node name is required"));
        }
        if self.nodes.iter().any(|n| n.node.name == seed.name) {
            return Err(ApiError::new(409, format!("node {:?} already exists", seed.name)));
        }
        let ip = match seed.ip {
            Some(ip) => ip,
            None => {
                self.next_ip += 1;
                format!("10.0.{}.{}", self.next_ip / 250, self.next_ip % 250 + 1)
            }
        };
        let health = seed.health.unwrap_or(Health::Online);
        let now = self.now();
        let node = Node {
            id: new_id(),
            name: seed.name,
            health,
            capacity: Capacity {
                total: 100 << 30,
                free: 90 << 30,
                available: 90 << 30,
            },
            io_endpoint: format!("{ip}:5703"),
            supervisor_endpoint: format!("{ip}:5704"),
            gossip_endpoint: format!("{ip}:5711"),
            clustering_endpoint: format!("{ip}:5710"),
            labels: seed.labels,
            created_at: now,
            updated_at: now,
            version: self.bump(),
        };
        self.nodes.push(SimNode {
            node: node.clone(),
            ip,
            offline_since: (health == Health::Offline).then_some(now),
        });
        Ok(node)
    }

    /// Sets a node's health, failing volumes over when it goes offline. Health alone does not
    /// bump the node's version; volumes that fail over do get a new version.
    pub fn set_health(&mut self, name: &str, health: Health) -> Result<Node, ApiError> {
        let i = self.node_index_by_name(name)?;
        let now = self.now();
        let before = self.nodes[i].node.health;
        let node_id = self.nodes[i].node.id.clone();
        {
            let n = &mut self.nodes[i];
            n.node.health = health;
            if health == Health::Offline && before != Health::Offline {
                n.offline_since = Some(now);
            } else if health != Health::Offline {
                n.offline_since = None;
            }
        }
        if health == Health::Online {
            for v in &mut self.volumes {
                if v.master.node_id == node_id && v.master.health != Health::Online {
                    v.master.health = Health::Online;
                }
                for r in v.replicas.iter_mut().filter(|r| r.node_id == node_id) {
                    r.health = "ready".into();
                }
            }
        } else if before == Health::Online {
            self.fail_over(&node_id, health);
        }
        Ok(self.nodes[i].node.clone())
    }

    /// Moves masters off a node that stopped being online, where a ready replica on an online
    /// node exists; otherwise the master takes the node's health.
    fn fail_over(&mut self, node_id: &str, health: Health) {
        let online: HashMap<String, String> = self
            .nodes
            .iter()
            .filter(|n| n.node.health == Health::Online)
            .map(|n| (n.node.id.clone(), n.ip.clone()))
            .collect();
        let now = self.now();
        for vi in 0..self.volumes.len() {
            let mut changed = false;
            {
                let v = &mut self.volumes[vi];
                for r in v.replicas.iter_mut().filter(|r| r.node_id == node_id) {
                    r.health = "unknown".into();
                }
                if v.master.node_id == node_id {
                    let candidate = if self.cfg.auto_failover {
                        v.replicas
                            .iter()
                            .position(|r| r.promotable && r.health == "ready" && online.contains_key(&r.node_id))
                    } else {
                        None
                    };
                    match candidate {
                        Some(ri) => {
                            let r = v.replicas.remove(ri);
                            v.master = Master {
                                id: r.id,
                                node_id: r.node_id.clone(),
                                promotable: true,
                                health: Health::Online,
                            };
                            if v.attachment_type == "nfs" {
                                v.attached_on = r.node_id.clone();
                                let port = v
                                    .nfs
                                    .service_endpoint
                                    .as_deref()
                                    .and_then(|e| e.rsplit_once(':'))
                                    .map(|(_, p)| p.to_string())
                                    .unwrap_or_else(|| "2049".into());
                                let ip = online.get(&r.node_id).cloned().unwrap_or_default();
                                v.nfs.service_endpoint = Some(format!("{ip}:{port}"));
                            }
                            changed = true;
                        }
                        None => v.master.health = health,
                    }
                }
            }
            if changed {
                let version = self.bump();
                let v = &mut self.volumes[vi];
                v.version = version;
                v.updated_at = now;
            }
        }
    }

    /// `PUT /nodes/{id}`: unreserved labels become exactly the request's; reserved ones must
    /// not change (absent ones are kept).
    pub fn update_node(&mut self, id: &str, b: &WriteBody, ignore: bool) -> Result<Node, ApiError> {
        let i = self.node_index(id)?;
        self.check_body_version(&self.nodes[i].node.version, b.version.as_deref(), ignore)?;
        let labels = merge_reserved(&self.nodes[i].node.labels, &b.labels, is_reserved_node_label)?;
        let version = self.bump();
        let now = self.now();
        let n = &mut self.nodes[i].node;
        n.labels = labels;
        n.version = version;
        n.updated_at = now;
        Ok(n.clone())
    }

    /// `PUT /nodes/{id}/compute-only`: sets label `storageos.com/computeonly=true`, or removes it.
    pub fn set_compute_only(&mut self, id: &str, b: &WriteBody, ignore: bool) -> Result<Node, ApiError> {
        let i = self.node_index(id)?;
        self.check_body_version(&self.nodes[i].node.version, b.version.as_deref(), ignore)?;
        let version = self.bump();
        let now = self.now();
        let n = &mut self.nodes[i].node;
        if b.compute_only {
            n.labels.insert(LABEL_COMPUTE_ONLY.into(), "true".into());
        } else {
            n.labels.remove(LABEL_COMPUTE_ONLY);
        }
        n.version = version;
        n.updated_at = now;
        Ok(n.clone())
    }

    /// `DELETE /nodes/{id}`: 404, 412, 409 unless offline, 423 while locked, 409 while it hosts
    /// a master; then the node and its replicas go.
    pub fn delete_node(&mut self, id: &str, v: &DeleteVersion) -> Result<(), ApiError> {
        let i = self.node_index(id)?;
        let n = &self.nodes[i];
        self.check_delete_version(&n.node.version, v)?;
        if n.node.health != Health::Offline {
            return Err(ApiError::new(409, "node still in use"));
        }
        let lock = chrono::Duration::from_std(self.cfg.node_lock_ttl).unwrap_or(chrono::Duration::zero());
        if n.offline_since.is_none_or(|t| self.now() - t < lock) {
            return Err(ApiError::new(423, "entity locked"));
        }
        if self.volumes.iter().any(|vol| vol.master.node_id == id) {
            return Err(ApiError::new(409, "in use: the node hosts volume masters"));
        }
        self.nodes.remove(i);
        for vol in &mut self.volumes {
            vol.replicas.retain(|r| r.node_id != id);
        }
        Ok(())
    }

    // ---------------------------------------------------------------- volumes

    fn vol_index(&self, ns_id: &str, id: &str) -> Result<usize, ApiError> {
        self.ns_index(ns_id)?;
        self.volumes
            .iter()
            .position(|v| v.namespace_id == ns_id && v.id == id)
            .ok_or_else(|| ApiError::not_found("volume"))
    }

    /// `GET /namespaces/{ns}/volumes`; 404 for an unknown namespace.
    pub fn volumes(&self, ns_id: &str) -> Result<Vec<Volume>, ApiError> {
        self.ns_index(ns_id)?;
        Ok(self
            .volumes
            .iter()
            .filter(|v| v.namespace_id == ns_id)
            .cloned()
            .collect())
    }

    /// Every volume of every namespace.
    pub fn all_volumes(&self) -> Vec<Volume> {
        self.volumes.clone()
    }

    pub fn volume(&self, ns_id: &str, id: &str) -> Result<Volume, ApiError> {
        Ok(self.volumes[self.vol_index(ns_id, id)?].clone())
    }

    fn touch(&mut self, vi: usize) -> &mut Volume {
        let version = self.bump();
        let now = self.now();
        let v = &mut self.volumes[vi];
        v.version = version;
        v.updated_at = now;
        v
    }

    fn new_volume(
        &mut self,
        ns_id: &str,
        name: &str,
        labels: Labels,
        master_node: Option<&str>,
    ) -> Result<usize, ApiError> {
        if name.is_empty() {
            return Err(ApiError::bad_request("volume name is required"));
        }
        if self.volumes.iter().any(|v| v.namespace_id == ns_id && v.name == name) {
            return Err(ApiError::new(409, "already exists"));
        }
        let master = match master_node {
            Some(m) => self.nodes[self.node_index_by_name(m).map_err(|_| {
                ApiError::bad_request(format!(
                    "master node {m:?} is not registered; register it first (POST /_sim/nodes)"
                ))
            })?]
            .node
            .clone(),
            None => self
                .nodes
                .iter()
                .find(|n| n.node.health == Health::Online && !n.node.compute_only())
                .map(|n| n.node.clone())
                .ok_or_else(|| ApiError::new(507, "insufficient storage capacity available: no online node"))?,
        };
        let now = self.now();
        let vol = Volume {
            id: new_id(),
            name: name.to_string(),
            description: String::new(),
            attached_on: String::new(),
            nfs: Nfs::default(),
            namespace_id: ns_id.to_string(),
            labels,
            fs_type: "ext4".into(),
            attachment_type: "detached".into(),
            master: Master {
                id: new_id(),
                node_id: master.id.clone(),
                promotable: true,
                health: if master.health == Health::Online {
                    Health::Online
                } else {
                    master.health
                },
            },
            replicas: Vec::new(),
            size_bytes: 5 << 30,
            created_at: now,
            updated_at: now,
            version: self.bump(),
        };
        self.volumes.push(vol);
        let vi = self.volumes.len() - 1;
        self.converge(vi);
        Ok(vi)
    }

    /// Places or removes replicas until the count matches the replicas label (instantly ready).
    fn converge(&mut self, vi: usize) {
        let desired = self.volumes[vi]
            .labels
            .get(LABEL_REPLICAS)
            .and_then(|r| r.parse::<usize>().ok())
            .unwrap_or(0);
        let v = &self.volumes[vi];
        let mut candidates: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.node.health == Health::Online && !n.node.compute_only())
            .map(|n| n.node.id.clone())
            .filter(|id| *id != v.master.node_id && !v.replicas.iter().any(|r| r.node_id == *id))
            .collect();
        candidates.reverse();
        let v = &mut self.volumes[vi];
        while v.replicas.len() < desired {
            match candidates.pop() {
                Some(id) => v.replicas.push(ready_replica(&id)),
                None => break,
            }
        }
        v.replicas.truncate(desired);
    }

    /// `POST /namespaces/{ns}/volumes` (201).
    pub fn create_volume(&mut self, ns_id: &str, b: &WriteBody) -> Result<Volume, ApiError> {
        self.ns_index(ns_id)?;
        let name = b.name.clone().unwrap_or_default();
        let vi = self.new_volume(ns_id, &name, b.labels.clone(), None)?;
        let v = &mut self.volumes[vi];
        if let Some(fs) = b.fs_type.clone().filter(|f| !f.is_empty()) {
            v.fs_type = fs;
        }
        if let Some(size) = b.size_bytes.filter(|s| *s > 0) {
            v.size_bytes = size;
        }
        v.description = b.description.clone().unwrap_or_default();
        Ok(v.clone())
    }

    /// Seeds a volume the way CSI provisioning would (namespace created if missing).
    pub fn seed_volume(&mut self, s: VolumeSeed) -> Result<Volume, ApiError> {
        if s.namespace.is_empty() {
            return Err(ApiError::bad_request("namespace is required"));
        }
        let ns_id = self.ensure_namespace(&s.namespace)?;
        let mut labels = s.labels.clone();
        labels.insert(LABEL_CSI_PV_NAME.into(), s.name.clone());
        if !s.pvc_name.is_empty() {
            labels.insert(LABEL_CSI_PVC_NAME.into(), s.pvc_name.clone());
        }
        let pvc_ns = if s.pvc_namespace.is_empty() {
            s.namespace.clone()
        } else {
            s.pvc_namespace.clone()
        };
        labels.insert(LABEL_CSI_PVC_NAMESPACE.into(), pvc_ns);
        labels.insert(LABEL_REPLICAS.into(), s.replicas.to_string());
        let master = (!s.master_node.is_empty()).then_some(s.master_node.as_str());
        let vi = self.new_volume(&ns_id, &s.name, labels, master)?;
        let v = &mut self.volumes[vi];
        if s.size_bytes > 0 {
            v.size_bytes = s.size_bytes;
        }
        if let Some(ep) = s.nfs_service_endpoint.filter(|e| !e.is_empty()) {
            v.attachment_type = "nfs".into();
            v.attached_on = v.master.node_id.clone();
            v.nfs.service_endpoint = Some(ep);
            v.nfs.exports = Some(Vec::new());
        }
        Ok(v.clone())
    }

    /// Removes a volume by namespace and volume name, attached or not, as a test or demo control
    /// (the API's delete refuses an attached volume).
    pub fn remove_volume(&mut self, namespace: &str, name: &str) -> Result<Volume, ApiError> {
        let ns_id = self
            .namespaces
            .iter()
            .find(|n| n.name == namespace)
            .map(|n| n.id.clone())
            .ok_or_else(|| ApiError::not_found(&format!("namespace {namespace:?}")))?;
        let vi = self
            .volumes
            .iter()
            .position(|v| v.namespace_id == ns_id && v.name == name)
            .ok_or_else(|| ApiError::not_found(&format!("volume {namespace}/{name}")))?;
        Ok(self.volumes.remove(vi))
    }

    /// `PUT /namespaces/{ns}/volumes/{id}`: description and unreserved labels.
    pub fn update_volume(&mut self, ns_id: &str, id: &str, b: &WriteBody, ignore: bool) -> Result<Volume, ApiError> {
        let vi = self.vol_index(ns_id, id)?;
        self.check_body_version(&self.volumes[vi].version, b.version.as_deref(), ignore)?;
        let labels = merge_reserved(&self.volumes[vi].labels, &b.labels, is_reserved_volume_label)?;
        let description = b.description.clone().unwrap_or_default();
        let v = self.touch(vi);
        v.labels = labels;
        v.description = description;
        Ok(v.clone())
    }

    /// `PUT .../replicas` (0..=5): label now, replicas converge (instantly here).
    pub fn set_replicas(&mut self, ns_id: &str, id: &str, b: &WriteBody, ignore: bool) -> Result<(), ApiError> {
        let vi = self.vol_index(ns_id, id)?;
        self.check_body_version(&self.volumes[vi].version, b.version.as_deref(), ignore)?;
        let n = b.replicas.unwrap_or(0);
        if !(0..=5).contains(&n) {
            return Err(ApiError::bad_request(format!(
                "replicas must be between 0 and 5, got {n}"
            )));
        }
        self.touch(vi).labels.insert(LABEL_REPLICAS.into(), n.to_string());
        self.converge(vi);
        Ok(())
    }

    /// `PUT .../failure-mode`: an intent (`mode`) or a threshold (`failureThreshold`).
    pub fn set_failure_mode(&mut self, ns_id: &str, id: &str, b: &WriteBody, ignore: bool) -> Result<Volume, ApiError> {
        let vi = self.vol_index(ns_id, id)?;
        self.check_body_version(&self.volumes[vi].version, b.version.as_deref(), ignore)?;
        let label = match b.mode.as_deref().filter(|m| !m.is_empty()) {
            Some(m @ ("hard" | "soft" | "alwayson")) => m.to_string(),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "mode {other:?} is not one of hard, soft, alwayson"
                )));
            }
            None => {
                let t = b.failure_threshold.unwrap_or(0);
                if !(0..=5).contains(&t) {
                    return Err(ApiError::bad_request(format!(
                        "failureThreshold must be between 0 and 5, got {t}"
                    )));
                }
                let v = &self.volumes[vi];
                let desired = v
                    .labels
                    .get(LABEL_REPLICAS)
                    .and_then(|r| r.parse::<i64>().ok())
                    .unwrap_or(0);
                if t > desired {
                    return Err(ApiError::new(
                        409,
                        format!("failure threshold {t} exceeds the desired replica count {desired}"),
                    ));
                }
                let ready = v.replicas.iter().filter(|r| r.health == "ready").count();
                if usize::try_from(t).unwrap_or(usize::MAX) > ready {
                    return Err(ApiError::new(
                        422,
                        format!("invalid state for operation: only {ready} replicas are ready"),
                    ));
                }
                t.to_string()
            }
        };
        let v = self.touch(vi);
        v.labels.insert(LABEL_FAILURE_MODE.into(), label);
        Ok(v.clone())
    }

    /// `PUT .../nfs/mount-endpoint`: stores the reserved label; 409 unless NFS-attached.
    pub fn set_mount_endpoint(&mut self, ns_id: &str, id: &str, b: &WriteBody, ignore: bool) -> Result<(), ApiError> {
        let vi = self.vol_index(ns_id, id)?;
        self.check_body_version(&self.volumes[vi].version, b.version.as_deref(), ignore)?;
        let ep = b
            .mount_endpoint
            .clone()
            .filter(|e| !e.is_empty())
            .ok_or_else(|| ApiError::bad_request("mountEndpoint is required"))?;
        if self.volumes[vi].attachment_type != "nfs" {
            return Err(ApiError::new(
                409,
                "in use: the volume is not attached as a shared (NFS) volume",
            ));
        }
        self.touch(vi).labels.insert(LABEL_NFS_MOUNT_ENDPOINT.into(), ep);
        Ok(())
    }

    /// `DELETE .../volumes/{id}`: 409 while attached.
    pub fn delete_volume(&mut self, ns_id: &str, id: &str, v: &DeleteVersion) -> Result<(), ApiError> {
        let vi = self.vol_index(ns_id, id)?;
        self.check_delete_version(&self.volumes[vi].version, v)?;
        if !self.volumes[vi].attached_on.is_empty() {
            return Err(ApiError::new(409, "in use: the volume is attached"));
        }
        self.volumes.remove(vi);
        Ok(())
    }

    /// `POST .../attach` `{nodeID}`: host attachment; 409 when attached elsewhere.
    pub fn attach(&mut self, ns_id: &str, id: &str, b: &WriteBody) -> Result<Volume, ApiError> {
        let vi = self.vol_index(ns_id, id)?;
        let node = b
            .node_id
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::bad_request("nodeID is required"))?;
        self.node_index(&node)?;
        let cur = &self.volumes[vi].attached_on;
        if !cur.is_empty() && *cur != node {
            return Err(ApiError::new(409, "in use: attached on another node"));
        }
        let v = self.touch(vi);
        v.attached_on = node;
        v.attachment_type = "host".into();
        Ok(v.clone())
    }

    /// `DELETE .../attach?version=`: detaches (host or NFS).
    pub fn detach(&mut self, ns_id: &str, id: &str, dv: &DeleteVersion) -> Result<(), ApiError> {
        let vi = self.vol_index(ns_id, id)?;
        self.check_delete_version(&self.volumes[vi].version, dv)?;
        let v = self.touch(vi);
        v.attached_on.clear();
        v.attachment_type = "detached".into();
        v.nfs = Nfs::default();
        Ok(())
    }

    /// `POST .../nfs/attach` `{version}`: shared attachment on the master node, with an
    /// allocated NFS port.
    pub fn nfs_attach(&mut self, ns_id: &str, id: &str, b: &WriteBody, ignore: bool) -> Result<Volume, ApiError> {
        let vi = self.vol_index(ns_id, id)?;
        self.check_body_version(&self.volumes[vi].version, b.version.as_deref(), ignore)?;
        let master = self.volumes[vi].master.node_id.clone();
        let ip = self
            .nodes
            .iter()
            .find(|n| n.node.id == master)
            .map(|n| n.ip.clone())
            .ok_or_else(|| ApiError::new(422, "invalid state for operation: master node is gone"))?;
        let port = self.next_nfs_port;
        self.next_nfs_port = self.next_nfs_port.wrapping_add(1).max(25000);
        let v = self.touch(vi);
        v.attachment_type = "nfs".into();
        v.attached_on = master;
        v.nfs.service_endpoint = Some(format!("{ip}:{port}"));
        v.nfs.exports = Some(Vec::new());
        Ok(v.clone())
    }

    /// The index of the volume named `name` in the namespace named `namespace`.
    fn vol_index_by_name(&self, namespace: &str, name: &str) -> Result<usize, ApiError> {
        let ns = self
            .namespaces
            .iter()
            .find(|n| n.name == namespace)
            .map(|n| n.id.clone())
            .ok_or_else(|| ApiError::not_found("namespace"))?;
        self.volumes
            .iter()
            .position(|v| v.namespace_id == ns && v.name == name)
            .ok_or_else(|| ApiError::not_found("volume"))
    }

    /// Test knob: gives a volume (found by namespace and volume name) a new version.
    pub fn bump_volume_version(&mut self, namespace: &str, name: &str) -> Result<String, ApiError> {
        let vi = self.vol_index_by_name(namespace, name)?;
        Ok(self.touch(vi).version.clone())
    }

    /// Test knob: moves a volume's NFS server to `endpoint` (`ip:port`), as a failover or an NFS
    /// restart does, making it NFS-attached on its master; `None` clears the endpoint (the
    /// attachment type is kept, as while the NFS server restarts).
    pub fn set_nfs_endpoint(
        &mut self,
        namespace: &str,
        name: &str,
        endpoint: Option<String>,
    ) -> Result<Volume, ApiError> {
        let vi = self.vol_index_by_name(namespace, name)?;
        let v = self.touch(vi);
        match endpoint.filter(|e| !e.is_empty()) {
            Some(ep) => {
                v.attachment_type = "nfs".into();
                v.attached_on = v.master.node_id.clone();
                v.nfs.service_endpoint = Some(ep);
                v.nfs.exports.get_or_insert_with(Vec::new);
            }
            None => v.nfs.service_endpoint = None,
        }
        Ok(v.clone())
    }

    // ---------------------------------------------------------------- faults and log

    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    pub fn set_faults(&mut self, f: Faults) {
        self.faults = f;
    }

    /// For a request about to be handled: the latency to add and, if it must fail, the
    /// status and text to fail with.
    pub fn take_fault(&mut self, method: &str, path: &str) -> (Duration, Option<ApiError>) {
        let f = &mut self.faults;
        if !f.matches(method, path) {
            return (Duration::ZERO, None);
        }
        let latency = Duration::from_millis(f.latency_ms);
        if f.fail_next == 0 {
            return (latency, None);
        }
        f.fail_next -= 1;
        let status = if f.status == 0 { 500 } else { f.status };
        let text = f
            .error
            .clone()
            .unwrap_or_else(|| format!("injected fault (status {status})"));
        (latency, Some(ApiError::new(status, text)))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        time: DateTime<Utc>,
        method: &str,
        path: &str,
        query: &str,
        status: u16,
        duration: Duration,
        injected: bool,
        body: Option<serde_json::Value>,
    ) {
        self.seq += 1;
        if self.log.len() >= MAX_LOG {
            self.log.remove(0);
        }
        self.log.push(RequestRecord {
            seq: self.seq,
            time,
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            status,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            injected,
            body,
        });
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.log.clone()
    }

    pub fn clear_requests(&mut self) {
        self.log.clear();
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
