//! The operator's validating webhook, on creating a StorageOSCluster, StorageOSUpgrade or Job:
//! - one outside the watched namespaces is refused (`NamespaceNotAllowed`): the operator would
//!   only mark it so, and a tenant's early cluster must not stand in the admin's way;
//! - a second StorageOSCluster in the watched namespaces is refused, naming the one that exists.
//!   A Kubernetes cluster runs one StorageOS cluster (the operator already leaves a second one
//!   `Pending` with a `FailedCreation` event; this says so before anything is stored). Clusters
//!   outside the watched namespaces do not count.
//!
//! The webhook is registered with `failurePolicy: Ignore`, and any doubt is answered with an
//! allow: a down or unreachable operator, or a failed list, never blocks creating the first
//! cluster. The `Pending` fallback stays for what slips through (two creates racing, the
//! webhook down). Every replica serves it; it only reads.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::{Client, Resource, ResourceExt};

use crate::crd::StorageOSCluster;
use crate::reasons;
use crate::runtime::kube::trusted::TrustedNamespaces;

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

/// The verdict on creating a StorageOSCluster `namespace/name` while `existing` are stored, for an
/// operator watching `trusted`. Clusters being deleted do not count against it (the new one
/// waits, `Pending`, until they are gone), but it says so.
pub fn verdict<K: Resource>(existing: &[K], namespace: &str, name: &str, trusted: &TrustedNamespaces) -> Verdict {
    if let Some(refusal) = outside(trusted, "StorageOSCluster", namespace) {
        return refusal;
    }
    let others: Vec<&K> = existing
        .iter()
        .filter(|c| c.namespace().is_some_and(|ns| trusted.allows(&ns)))
        .filter(|c| !(c.name_any() == name && c.namespace().as_deref() == Some(namespace)))
        .collect();
    let id = |c: &K| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any());
    if let Some(live) = others.iter().find(|c| c.meta().deletion_timestamp.is_none()) {
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

/// The refusal of a `kind` in `namespace` when the operator does not watch it.
pub fn outside(trusted: &TrustedNamespaces, kind: &str, namespace: &str) -> Option<Verdict> {
    (!trusted.allows(namespace)).then(|| {
        Verdict::Deny(format!(
            "{}: {}",
            reasons::NAMESPACE_NOT_ALLOWED,
            trusted.refusal(kind, namespace)
        ))
    })
}

type Review = AdmissionReview<DynamicObject>;

/// The webhook's routes: `POST` [`PATH`].
pub fn router(client: Client, trusted: TrustedNamespaces) -> Router {
    Router::new()
        .route(PATH, post(validate))
        .with_state(Arc::new((client, trusted)))
}

async fn validate(State(state): State<Arc<(Client, TrustedNamespaces)>>, Json(review): Json<Review>) -> Json<Review> {
    let (client, trusted) = (&state.0, &state.1);
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
    let kind = request.kind.kind.clone();
    let answer = if kind != "StorageOSCluster" {
        outside(trusted, &kind, &namespace).unwrap_or(Verdict::Allow)
    } else if let Some(refusal) = outside(trusted, &kind, &namespace) {
        refusal
    } else {
        clusters(client, trusted, &namespace, &name).await
    };
    let response = match answer {
        Verdict::Allow => response,
        Verdict::Warn(w) => {
            let mut r = response;
            r.warnings = Some(vec![w]);
            r
        }
        Verdict::Deny(message) => {
            tracing::info!(kind = %kind, namespace = %namespace, name = %name, %message, "refused at admission");
            response.deny(message)
        }
    };
    Json(response.into_review())
}

/// The one-cluster verdict from the clusters in the watched namespaces.
async fn clusters(client: &Client, trusted: &TrustedNamespaces, namespace: &str, name: &str) -> Verdict {
    // Metadata is all the verdict reads: a cluster whose spec no longer decodes still counts.
    match trusted.list::<PartialObjectMeta<StorageOSCluster>>(client).await {
        Ok(list) => verdict(&list, namespace, name, trusted),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list StorageOSClusters; allowing the create");
            Verdict::Warn(format!(
                "the operator could not check for another StorageOSCluster ({e}); if one exists, this one stays Pending"
            ))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn any() -> TrustedNamespaces {
        TrustedNamespaces::Any
    }

    #[test]
    fn outside_the_watched_namespaces_nothing_is_admitted_and_nothing_counts() {
        let watched = TrustedNamespaces::only("storageos");
        let Verdict::Deny(m) = verdict::<StorageOSCluster>(&[], "team-a", "x", &watched) else {
            panic!("a cluster outside the watched namespaces was admitted");
        };
        assert!(m.starts_with("NamespaceNotAllowed: "), "{m}");
        assert!(m.contains("\"team-a\""), "{m}");
        // A tenant's early cluster (stored before the gate, or while the webhook was down) does
        // not stand in the admin's way.
        let tenants = [cluster("team-a", "x", false)];
        assert_eq!(verdict(&tenants, "storageos", "storageos", &watched), Verdict::Allow);
        assert!(
            matches!(outside(&watched, "Job", "team-a"), Some(Verdict::Deny(m)) if m.contains("Jobs only in: storageos"))
        );
        assert_eq!(outside(&watched, "Job", "storageos"), None);
    }

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
        assert_eq!(
            verdict::<StorageOSCluster>(&[], "storageos", "storageos", &any()),
            Verdict::Allow
        );
        // A retried create of the same object is not a second cluster.
        assert_eq!(
            verdict(
                &[cluster("storageos", "storageos", false)],
                "storageos",
                "storageos",
                &any()
            ),
            Verdict::Allow
        );
    }

    #[test]
    fn a_second_cluster_is_refused_naming_the_first_and_what_to_do() {
        let Verdict::Deny(message) = verdict(&[cluster("storageos", "first", false)], "other", "second", &any()) else {
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
        let Verdict::Warn(w) = verdict(&existing, "storageos", "new", &any()) else {
            panic!("not a warning");
        };
        assert!(w.contains("storageos/old is being deleted"), "{w}");
        let both = [cluster("storageos", "old", true), cluster("x", "live", false)];
        assert!(matches!(verdict(&both, "storageos", "new", &any()), Verdict::Deny(m) if m.contains("x/live")));
    }
}
