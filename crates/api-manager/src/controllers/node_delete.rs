//! Node delete (controller `node-delete`): when a Kubernetes Node that ran StorageOS is deleted,
//! the StorageOS node of the same name is deleted too (docs/api-manager.md), and a
//! periodic garbage collection deletes StorageOS nodes that no Kubernetes Node is named after.
//!
//! StorageOS refuses while the node is online (409), while its lock has not expired (423, about
//! 30 s after it went offline) and while it hosts volume masters (409): those are retried with
//! backoff until the API accepts. Nothing is deleted while an upgrade is in progress.
//!
//! A deleted Node counts when its `csi.volume.kubernetes.io/nodeid` annotation registers the
//! StorageOS driver (a malformed annotation does not), or when it did at any time the watch saw
//! it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;

use super::Context;
use super::config::DeleteSyncConfig;
use super::delete_sync::{self, DeleteSync, Entry};
use crate::storageos;
use crate::storageos::kube::runs_storageos;

/// The controller name (metrics, logs).
pub const CONTROLLER: &str = "node-delete";
struct Nodes;

impl DeleteSync for Nodes {
    type Object = Node;
    const CONTROLLER: &'static str = CONTROLLER;
    const KIND: &'static str = "node";
    const SUSPENDED_IN_MAINTENANCE: bool = true;

    fn mirrored(obj: &PartialObjectMeta<Node>) -> bool {
        runs_storageos(obj.annotations())
    }

    fn config(ctx: &Context) -> DeleteSyncConfig {
        ctx.config.node_delete
    }

    async fn list(ctx: &Context) -> Result<Vec<Entry>, storageos::Error> {
        let nodes = ctx.metrics.track("list_nodes", ctx.api.list_nodes()).await?;
        Ok(nodes.into_iter().map(Entry::from).collect())
    }

    async fn delete(ctx: &Context, entry: &Entry) -> Result<(), storageos::Error> {
        ctx.metrics
            .track("delete_node", ctx.api.delete_node(&entry.id, &entry.version))
            .await
    }
}

/// Runs the controller until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    delete_sync::run::<Nodes>(ctx).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn node(annotation: Option<&str>) -> PartialObjectMeta<Node> {
        let mut meta = serde_json::json!({"metadata": {"name": "n1"}});
        if let Some(a) = annotation {
            meta["metadata"]["annotations"] = serde_json::json!({ "csi.volume.kubernetes.io/nodeid": a });
        }
        serde_json::from_value(meta).unwrap()
    }

    #[test]
    fn only_nodes_registered_with_the_storageos_driver_count() {
        assert!(!Nodes::mirrored(&node(None)));
        assert!(Nodes::mirrored(&node(Some(
            r#"{"csi.storageos.com":"n1","other":"x"}"#
        ))));
        assert!(!Nodes::mirrored(&node(Some(r#"{"ebs.csi.aws.com":"i-1"}"#))));
        assert!(!Nodes::mirrored(&node(Some("csi.storageos.com"))), "malformed");
    }
}
