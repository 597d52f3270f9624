//! What the mutators read from (and the encryption mutator writes to) the cluster, behind a
//! trait so the decisions are tested without an apiserver.

use std::future::Future;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::StorageClass;

/// A failed lookup (the apiserver could not answer).
#[derive(Debug, thiserror::Error)]
#[error("lookup failed: {0}")]
pub struct LookupError(pub String);

/// What the mutators read from the cluster.
pub trait Lookups: Sync {
    /// The PVC `namespace/name`, or None when it does not exist.
    fn pvc(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<PersistentVolumeClaim>, LookupError>> + Send;
    /// The StorageClass `name`, or None when it does not exist.
    fn storage_class(&self, name: &str) -> impl Future<Output = Result<Option<StorageClass>, LookupError>> + Send;
    /// Every StorageClass (to find the default).
    fn storage_classes(&self) -> impl Future<Output = Result<Vec<StorageClass>, LookupError>> + Send;
    /// The Secret `namespace/name`, or None when it does not exist. A direct read: the webhook
    /// must not cache every Secret of the cluster.
    fn secret(&self, namespace: &str, name: &str) -> impl Future<Output = Result<Option<Secret>, LookupError>> + Send;
    /// Creates `secret` in `namespace`; false when one of that name already exists.
    fn create_secret(&self, namespace: &str, secret: &Secret)
    -> impl Future<Output = Result<bool, LookupError>> + Send;
}
