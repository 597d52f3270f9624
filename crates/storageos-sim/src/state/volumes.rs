//! The simulator's state: volumes: create, seed, replicas, failure mode, attach, NFS, delete.

use super::*;

impl State {
    pub(super) fn vol_index(&self, ns_id: &str, id: &str) -> Result<usize, ApiError> {
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

    pub(super) fn touch(&mut self, vi: usize) -> &mut Volume {
        let version = self.bump();
        let now = self.now();
        let v = &mut self.volumes[vi];
        v.version = version.into();
        v.updated_at = now;
        v
    }

    pub(super) fn new_volume(
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
            labels: labels.into(),
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
            version: self.bump().into(),
        };
        self.volumes.push(vol);
        let vi = self.volumes.len() - 1;
        self.converge(vi);
        Ok(vi)
    }

    /// Places or removes replicas until the count matches the replicas label (instantly ready).
    pub(super) fn converge(&mut self, vi: usize) {
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
            v.fs_type = fs.into();
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
        let labels = merge_reserved(&self.volumes[vi].labels.to_map(), &b.labels, is_reserved_volume_label)?;
        let description = b.description.clone().unwrap_or_default();
        let v = self.touch(vi);
        v.labels = labels.into();
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
    pub(super) fn vol_index_by_name(&self, namespace: &str, name: &str) -> Result<usize, ApiError> {
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
        Ok(self.touch(vi).version.to_string())
    }

    /// Test knob: sets the health of every replica of a volume (`syncing` while a replica
    /// catches up, `ready` once it has), as a rebuild does. A syncing replica reports its
    /// progress as StorageOS does (the whole volume left at 64 MiB/s); any other health none.
    pub fn set_replica_health(&mut self, namespace: &str, name: &str, health: &str) -> Result<Volume, ApiError> {
        const THROUGHPUT: u64 = 64 << 20;
        let vi = self.vol_index_by_name(namespace, name)?;
        let v = self.touch(vi);
        let progress = if health == "syncing" {
            SyncProgress {
                bytes_remaining: v.size_bytes,
                throughput_bytes: THROUGHPUT,
                estimated_seconds_remaining: v.size_bytes.div_ceil(THROUGHPUT),
            }
        } else {
            SyncProgress::default()
        };
        for r in &mut v.replicas {
            r.health = health.into();
            r.sync_progress = progress;
        }
        Ok(v.clone())
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
}
