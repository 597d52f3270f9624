//! The typed routes of the StorageOS v2 API, one method each, over the transport in
//! [`super`] (login, re-login on 401, size cap, metrics).

use reqwest::Method;
use serde::Serialize;
use serde_json::json;

use super::Client;
use crate::error::Error;
use crate::models::{
    Cluster, FailureMode, LabelSet, Labels, Namespace, Node, NodeHealth, SetFailureModeBody, UpdateCluster, Volume,
    is_reserved_node_label, is_reserved_volume_label,
};

impl Client {
    // ---- cluster ----

    /// `GET /cluster`.
    pub async fn get_cluster(&self) -> Result<Cluster, Error> {
        self.get_json(&["cluster"]).await
    }

    /// `PUT /cluster`; `update.version` must be the version read.
    pub async fn update_cluster(&self, update: &UpdateCluster) -> Result<Cluster, Error> {
        self.put_json(&["cluster"], update).await
    }

    // ---- namespaces ----

    /// `GET /namespaces`.
    pub async fn list_namespaces(&self) -> Result<Vec<Namespace>, Error> {
        self.list(&["namespaces"]).await
    }

    /// `GET /namespaces/{id}`.
    pub async fn get_namespace(&self, id: &str) -> Result<Namespace, Error> {
        self.get_json(&["namespaces", id]).await
    }

    /// The namespace with this (Kubernetes) name; [`Error::NotFound`] if none.
    pub async fn namespace_by_name(&self, name: &str) -> Result<Namespace, Error> {
        self.list_namespaces()
            .await?
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| Error::lookup_not_found("namespace", name))
    }

    /// `DELETE /namespaces/{id}?version=`; 409 while it holds volumes.
    pub async fn delete_namespace(&self, id: &str, version: &str) -> Result<(), Error> {
        self.delete(&["namespaces", id], version).await
    }

    // ---- nodes ----

    /// `GET /nodes`.
    pub async fn list_nodes(&self) -> Result<Vec<Node>, Error> {
        self.list(&["nodes"]).await
    }

    /// `GET /nodes`, each node's name and health only.
    pub async fn list_node_health(&self) -> Result<Vec<NodeHealth>, Error> {
        self.list(&["nodes"]).await
    }

    /// `GET /nodes/{id}`.
    pub async fn get_node(&self, id: &str) -> Result<Node, Error> {
        self.get_json(&["nodes", id]).await
    }

    /// The node with this (Kubernetes) name; [`Error::NotFound`] if none.
    pub async fn node_by_name(&self, name: &str) -> Result<Node, Error> {
        self.list_nodes()
            .await?
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| Error::lookup_not_found("node", name))
    }

    /// `PUT /nodes/{id}` with exactly these labels (reserved ones must be unchanged).
    pub async fn update_node_labels(&self, id: &str, labels: &Labels, version: &str) -> Result<Node, Error> {
        self.put_json(&["nodes", id], &LabelsBody::new(labels, None, version))
            .await
    }

    /// Makes the node's unreserved labels exactly `unreserved` (reserved keys in it are ignored),
    /// keeping its reserved labels, with the node's own version.
    pub async fn set_node_unreserved_labels(&self, node: &Node, unreserved: &Labels) -> Result<Node, Error> {
        let labels = merge_labels(&node.labels, unreserved, is_reserved_node_label);
        self.update_node_labels(&node.id, &labels, &node.version).await
    }

    /// `PUT /nodes/{id}/compute-only`.
    pub async fn set_compute_only(&self, id: &str, compute_only: bool, version: &str) -> Result<Node, Error> {
        let body = if compute_only {
            json!({"computeOnly": true, "version": version})
        } else {
            json!({"version": version})
        };
        self.put_json(&["nodes", id, "compute-only"], &body).await
    }

    /// `DELETE /nodes/{id}?version=`; 409 while online or hosting a master, 423 while locked.
    pub async fn delete_node(&self, id: &str, version: &str) -> Result<(), Error> {
        self.delete(&["nodes", id], version).await
    }

    // ---- volumes ----

    /// `GET /namespaces/{nsID}/volumes`.
    pub async fn list_volumes(&self, namespace_id: &str) -> Result<Vec<Volume>, Error> {
        self.list(&["namespaces", namespace_id, "volumes"]).await
    }

    /// `GET /namespaces/{nsID}/volumes/{id}`.
    pub async fn get_volume(&self, namespace_id: &str, id: &str) -> Result<Volume, Error> {
        self.get_json(&["namespaces", namespace_id, "volumes", id]).await
    }

    /// The volume named `pv_name` in the namespace named `namespace_name`.
    pub async fn volume_by_name(&self, namespace_name: &str, pv_name: &str) -> Result<Volume, Error> {
        let ns = self.namespace_by_name(namespace_name).await?;
        self.list_volumes(&ns.id)
            .await?
            .into_iter()
            .find(|v| v.name == pv_name)
            .ok_or_else(|| Error::lookup_not_found("volume", &format!("{namespace_name}/{pv_name}")))
    }

    /// `PUT /namespaces/{nsID}/volumes/{id}` with exactly these labels and description (an empty
    /// description is omitted, which clears it).
    pub async fn update_volume(
        &self,
        namespace_id: &str,
        id: &str,
        labels: &Labels,
        description: &str,
        version: &str,
    ) -> Result<Volume, Error> {
        self.put_json(
            &["namespaces", namespace_id, "volumes", id],
            &LabelsBody::new(labels, Some(description), version),
        )
        .await
    }

    /// Makes the volume's unreserved labels exactly `unreserved`, re-sending its reserved labels
    /// and description unchanged, with the volume's own version.
    pub async fn set_volume_unreserved_labels(&self, volume: &Volume, unreserved: &Labels) -> Result<Volume, Error> {
        let labels = merge_labels(&volume.labels, unreserved, is_reserved_volume_label);
        self.update_volume(
            &volume.namespace_id,
            &volume.id,
            &labels,
            &volume.description,
            &volume.version,
        )
        .await
    }

    /// `PUT .../replicas` (0..=5). The server answers 202: the label changes now, the replicas
    /// follow.
    pub async fn set_replicas(&self, namespace_id: &str, id: &str, replicas: u8, version: &str) -> Result<(), Error> {
        let body = if replicas == 0 {
            json!({"version": version})
        } else {
            json!({"replicas": replicas, "version": version})
        };
        self.write(
            Method::PUT,
            &["namespaces", namespace_id, "volumes", id, "replicas"],
            &body,
        )
        .await
        .map(|_| ())
    }

    /// `PUT .../failure-mode` with an intent or a threshold.
    pub async fn set_failure_mode(
        &self,
        namespace_id: &str,
        id: &str,
        mode: FailureMode,
        version: &str,
    ) -> Result<Volume, Error> {
        let body = match mode {
            FailureMode::Threshold(n) => SetFailureModeBody {
                mode: String::new(),
                failure_threshold: u64::from(n),
                version: version.into(),
            },
            intent => SetFailureModeBody {
                mode: intent.label_value(),
                failure_threshold: 0,
                version: version.into(),
            },
        };
        self.put_json(&["namespaces", namespace_id, "volumes", id, "failure-mode"], &body)
            .await
    }

    /// `PUT .../nfs/mount-endpoint`; stored as label `storageos.com/nfs/mount-endpoint`.
    pub async fn set_nfs_mount_endpoint(
        &self,
        namespace_id: &str,
        id: &str,
        mount_endpoint: &str,
        version: &str,
    ) -> Result<(), Error> {
        self.write(
            Method::PUT,
            &["namespaces", namespace_id, "volumes", id, "nfs", "mount-endpoint"],
            &json!({"mountEndpoint": mount_endpoint, "version": version}),
        )
        .await
        .map(|_| ())
    }
}

/// `{labels, description?, version}` with Go's omitempty.
#[derive(Serialize)]
struct LabelsBody<'a> {
    #[serde(skip_serializing_if = "Labels::is_empty")]
    labels: &'a Labels,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    version: &'a str,
}

impl<'a> LabelsBody<'a> {
    fn new(labels: &'a Labels, description: Option<&'a str>, version: &'a str) -> Self {
        Self {
            labels,
            description: description.filter(|d| !d.is_empty()),
            version,
        }
    }
}

pub(super) fn merge_labels(current: &LabelSet, unreserved: &Labels, reserved: fn(&str) -> bool) -> Labels {
    current
        .iter()
        .filter(|(k, _)| reserved(k))
        .chain(
            unreserved
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .filter(|(k, _)| !reserved(k)),
        )
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn merged_labels_keep_reserved_and_take_only_unreserved() {
        let current: LabelSet = [("storageos.com/replicas", "2"), ("old", "x")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let wanted: Labels = [("new", "y"), ("storageos.com/replicas", "5")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let got = merge_labels(&current, &wanted, is_reserved_volume_label);
        assert_eq!(got.len(), 2);
        assert_eq!(got["storageos.com/replicas"], "2");
        assert_eq!(got["new"], "y");
    }
}
