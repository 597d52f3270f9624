//! The simulator's state: nodes: registration, health (with fail-over), labels, compute-only, delete.

use super::*;

impl State {
    pub fn nodes(&self) -> Vec<Node> {
        self.nodes.iter().map(|n| n.node.clone()).collect()
    }

    pub(super) fn node_index(&self, id: &str) -> Result<usize, ApiError> {
        self.nodes
            .iter()
            .position(|n| n.node.id == id)
            .ok_or_else(|| ApiError::not_found("node"))
    }

    pub(super) fn node_index_by_name(&self, name: &str) -> Result<usize, ApiError> {
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
            name: seed.name.into(),
            health,
            capacity: Capacity {
                total: 100 << 30,
                free: 90 << 30,
                available: 90 << 30,
            },
            io_endpoint: format!("{ip}:5703").into(),
            supervisor_endpoint: format!("{ip}:5704").into(),
            gossip_endpoint: format!("{ip}:5711").into(),
            clustering_endpoint: format!("{ip}:5710").into(),
            labels: seed.labels.into(),
            created_at: now,
            updated_at: now,
            version: self.bump().into(),
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
    pub(super) fn fail_over(&mut self, node_id: &str, health: Health) {
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
                v.version = version.into();
                v.updated_at = now;
            }
        }
    }

    /// `PUT /nodes/{id}`: unreserved labels become exactly the request's; reserved ones must
    /// not change (absent ones are kept).
    pub fn update_node(&mut self, id: &str, b: &WriteBody, ignore: bool) -> Result<Node, ApiError> {
        let i = self.node_index(id)?;
        self.check_body_version(&self.nodes[i].node.version, b.version.as_deref(), ignore)?;
        let labels = merge_reserved(&self.nodes[i].node.labels.to_map(), &b.labels, is_reserved_node_label)?;
        let version = self.bump();
        let now = self.now();
        let n = &mut self.nodes[i].node;
        n.labels = labels.into();
        n.version = version.into();
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
        n.version = version.into();
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
}
