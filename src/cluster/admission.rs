//! The operator's validating webhook: a second StorageOSCluster is refused when it is created,
//! with a message naming the one that exists. A Kubernetes cluster runs one StorageOS cluster
//! (the operator already leaves a second one `Pending` with a `FailedCreation` event; this says
//! so before anything is stored).
//!
//! The webhook is registered with `failurePolicy: Ignore`, and any doubt is answered with an
//! allow: a down or unreachable operator, or a failed list, never blocks creating the first
//! cluster. The `Pending` fallback stays for what slips through (two creates racing, the
//! webhook down). Every replica serves it; it only reads.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::{Client, ResourceExt};

use crate::crd::StorageOSCluster;

/// The path the ValidatingWebhookConfiguration calls.
pub use crate::install::WEBHOOK_PATH as PATH;

/// What the webhook answers for one create.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing else exists.
    Allow,
    /// Allowed, with a warning `kubectl` prints.
    Warn(String),
    /// Refused, with the message `kubectl` prints.
    Deny(String),
}

/// The verdict on creating `namespace/name` while `existing` are stored. Clusters being deleted
/// do not count against it (the new one waits, `Pending`, until they are gone), but it says so.
pub fn verdict(existing: &[StorageOSCluster], namespace: &str, name: &str) -> Verdict {
    let others: Vec<&StorageOSCluster> = existing
        .iter()
        .filter(|c| !(c.name_any() == name && c.namespace().as_deref() == Some(namespace)))
        .collect();
    let id = |c: &StorageOSCluster| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any());
    if let Some(live) = others.iter().find(|c| c.metadata.deletion_timestamp.is_none()) {
        let (ns, n) = (live.namespace().unwrap_or_default(), live.name_any());
        return Verdict::Deny(format!(
            "StorageOSCluster {ns}/{n} already exists, and a Kubernetes cluster runs one StorageOS cluster; \
             change that one (kubectl -n {ns} edit storageoscluster {n}) or delete it first"
        ));
    }
    match others.first() {
        Some(going) => Verdict::Warn(format!(
            "StorageOSCluster {} is being deleted; this one stays Pending until it is gone",
            id(going)
        )),
        None => Verdict::Allow,
    }
}

type Review = AdmissionReview<DynamicObject>;

/// The webhook's routes: `POST` [`PATH`].
pub fn router(client: Client) -> Router {
    Router::new().route(PATH, post(validate)).with_state(Arc::new(client))
}

async fn validate(State(client): State<Arc<Client>>, Json(review): Json<Review>) -> Json<Review> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            return Json(AdmissionResponse::invalid(format!("not an AdmissionReview request: {e}")).into_review());
        }
    };
    let response = AdmissionResponse::from(&request);
    if request.operation != Operation::Create {
        return Json(response.into_review());
    }
    let namespace = request.namespace.clone().unwrap_or_default();
    let name = request
        .object
        .as_ref()
        .map(ResourceExt::name_any)
        .unwrap_or_else(|| request.name.clone());
    let api: Api<StorageOSCluster> = Api::all((*client).clone());
    let answer = match api.list(&ListParams::default()).await {
        Ok(list) => verdict(&list.items, &namespace, &name),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list StorageOSClusters; allowing the create");
            Verdict::Warn(format!(
                "the operator could not check for another StorageOSCluster ({e}); if one exists, this one stays Pending"
            ))
        }
    };
    let response = match answer {
        Verdict::Allow => response,
        Verdict::Warn(w) => {
            let mut r = response;
            r.warnings = Some(vec![w]);
            r
        }
        Verdict::Deny(message) => {
            tracing::info!(namespace = %namespace, name = %name, "refused a second StorageOSCluster");
            response.deny(message)
        }
    };
    Json(response.into_review())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn cluster(ns: &str, name: &str, deleting: bool) -> StorageOSCluster {
        let mut c: StorageOSCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"secretRefName": "s", "secretRefNamespace": ns}
        }))
        .unwrap();
        if deleting {
            c.metadata.deletion_timestamp = Some(crate::runtime::kube::conditions::now());
        }
        c
    }

    #[test]
    fn the_first_cluster_is_allowed() {
        assert_eq!(verdict(&[], "storageos", "storageos"), Verdict::Allow);
        // A retried create of the same object is not a second cluster.
        assert_eq!(
            verdict(&[cluster("storageos", "storageos", false)], "storageos", "storageos"),
            Verdict::Allow
        );
    }

    #[test]
    fn a_second_cluster_is_refused_naming_the_first_and_what_to_do() {
        let Verdict::Deny(message) = verdict(&[cluster("storageos", "first", false)], "other", "second") else {
            panic!("allowed");
        };
        assert!(message.contains("storageos/first already exists"), "{message}");
        assert!(
            message.contains("kubectl -n storageos edit storageoscluster first"),
            "{message}"
        );
    }

    #[test]
    fn a_cluster_being_deleted_does_not_count_but_is_named() {
        let existing = [cluster("storageos", "old", true)];
        let Verdict::Warn(w) = verdict(&existing, "storageos", "new") else {
            panic!("not a warning");
        };
        assert!(w.contains("storageos/old is being deleted"), "{w}");
        let both = [cluster("storageos", "old", true), cluster("x", "live", false)];
        assert!(matches!(verdict(&both, "storageos", "new"), Verdict::Deny(m) if m.contains("x/live")));
    }
}
