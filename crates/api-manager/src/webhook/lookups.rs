//! What the mutators read from (and the encryption mutator writes to) the cluster, behind a
//! trait so the decisions are tested without an apiserver.

use std::future::Future;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::cached_pvc::CachedPvc;

/// A failed lookup (the apiserver could not answer).
#[derive(Debug, thiserror::Error)]
#[error("lookup failed: {0}")]
pub struct LookupError(pub String);

/// What the mutators read from the cluster.
pub trait Lookups: Sync {
    /// The PVC `namespace/name` (as the cache keeps it, whether read from there or directly),
    /// or None when it does not exist.
    fn pvc(&self, namespace: &str, name: &str) -> impl Future<Output = Result<Option<CachedPvc>, LookupError>> + Send;
    /// The StorageClass `name`, or None when it does not exist.
    fn storage_class(&self, name: &str) -> impl Future<Output = Result<Option<StorageClass>, LookupError>> + Send;
    /// Every StorageClass (to find the default).
    fn storage_classes(&self) -> impl Future<Output = Result<Vec<StorageClass>, LookupError>> + Send;
    /// [`Lookups::storage_class`] read from the apiserver, never from a cache: for a decision
    /// that must fail closed (whether a PVC gets encryption keys), which a stale cache entry (a
    /// class deleted and re-created with encryption) must not make.
    fn storage_class_fresh(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<StorageClass>, LookupError>> + Send {
        self.storage_class(name)
    }
    /// [`Lookups::storage_classes`] read from the apiserver, never from a cache.
    fn storage_classes_fresh(&self) -> impl Future<Output = Result<Vec<StorageClass>, LookupError>> + Send {
        self.storage_classes()
    }
    /// The Secret `namespace/name`, or None when it does not exist. A direct read: the webhook
    /// must not cache every Secret of the cluster.
    fn secret(&self, namespace: &str, name: &str) -> impl Future<Output = Result<Option<Secret>, LookupError>> + Send;
    /// Whether the scheduler extender is known to have no available replica (its Deployment
    /// exists with none available): a pod sent to it would stay Pending, so it is left to the
    /// default scheduler. Unknown (not cached yet, no such Deployment) counts as available, as
    /// the Go api-manager always sent pods there.
    fn scheduler_unavailable(&self) -> impl Future<Output = bool> + Send {
        std::future::ready(false)
    }
    /// Creates `secret` in `namespace`; false when one of that name already exists.
    fn create_secret(&self, namespace: &str, secret: &Secret)
    -> impl Future<Output = Result<bool, LookupError>> + Send;
}
