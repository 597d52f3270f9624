//! Namespace delete (controller `namespace-delete`): when a Kubernetes Namespace is deleted, the
//! StorageOS namespace of the same name is deleted too (docs/api-manager.md), and a
//! periodic garbage collection deletes StorageOS namespaces that no Kubernetes Namespace is named
//! after. StorageOS creates namespaces when volumes are provisioned and never removes them.
//!
//! StorageOS refuses while the namespace holds volumes (409); that is retried with backoff until
//! the volumes are gone.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;

use super::Context;
use super::config::DeleteSyncConfig;
use super::delete_sync::{self, DeleteSync, Entry};
use crate::storageos;

/// The controller name (metrics, logs).
pub const CONTROLLER: &str = "namespace-delete";

struct Namespaces;

impl DeleteSync for Namespaces {
    type Object = Namespace;
    const CONTROLLER: &'static str = CONTROLLER;
    const KIND: &'static str = "namespace";
    const SUSPENDED_IN_MAINTENANCE: bool = false;

    fn mirrored(_: &PartialObjectMeta<Namespace>) -> bool {
        true
    }

    fn config(ctx: &Context) -> DeleteSyncConfig {
        ctx.config.namespace_delete
    }

    async fn list(ctx: &Context) -> Result<Vec<Entry>, storageos::Error> {
        let namespaces = ctx.metrics.track("list_namespaces", ctx.api.list_namespaces()).await?;
        Ok(namespaces.into_iter().map(Entry::from).collect())
    }

    async fn delete(ctx: &Context, entry: &Entry) -> Result<(), storageos::Error> {
        ctx.metrics
            .track("delete_namespace", ctx.api.delete_namespace(&entry.id, &entry.version))
            .await
    }
}

/// Runs the controller until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    delete_sync::run::<Namespaces>(ctx).await;
}
