//! The mutating webhooks served on every api-manager replica: pods (scheduler name) and PVCs
//! (StorageClass UID). Requests are decoded as AdmissionReview v1; a body that does not decode
//! is answered 400; a mutator's own lookup failure admits the object unchanged (fail open),
//! logged and counted.

pub mod mutate;

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use mutate::{LookupError, Lookups};

/// Lookups through the Kubernetes API.
#[derive(Clone)]
pub struct KubeLookups(pub kube::Client);

fn lookup_err(e: kube::Error) -> LookupError {
    LookupError(e.to_string())
}

impl Lookups for KubeLookups {
    async fn pvc(&self, namespace: &str, name: &str) -> Result<Option<PersistentVolumeClaim>, LookupError> {
        Api::<PersistentVolumeClaim>::namespaced(self.0.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(lookup_err)
    }
    async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, LookupError> {
        Api::<StorageClass>::all(self.0.clone())
            .get_opt(name)
            .await
            .map_err(lookup_err)
    }
    async fn storage_classes(&self) -> Result<Vec<StorageClass>, LookupError> {
        Ok(Api::<StorageClass>::all(self.0.clone())
            .list(&ListParams::default())
            .await
            .map_err(lookup_err)?
            .items)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

/// Requests admitted unchanged because a mutator's lookup failed.
#[derive(Clone, Default)]
pub struct WebhookMetrics {
    failed_open: Family<WebhookLabels, Counter>,
}

impl WebhookMetrics {
    /// Registers `storageos_webhook_failed_open_total{webhook}`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "storageos_webhook_failed_open",
            "Admission requests admitted unchanged because a lookup failed",
            m.failed_open.clone(),
        );
        m
    }
}

/// What the handlers share.
pub struct WebhookState<L> {
    /// Cluster lookups.
    pub lookups: L,
    /// The scheduler set on StorageOS pods; None disables the pod mutator.
    pub scheduler: Option<String>,
    /// Fail-open counter.
    pub metrics: WebhookMetrics,
}

type Review = AdmissionReview<DynamicObject>;

fn respond(request: &AdmissionRequest<DynamicObject>, patch: Option<serde_json::Value>) -> Json<Review> {
    let response = AdmissionResponse::from(request);
    let response = match patch.map(serde_json::from_value::<json_patch::Patch>) {
        None => response,
        Some(Ok(p)) => match response.clone().with_patch(p) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "cannot serialise a patch; admitting unchanged");
                response
            }
        },
        Some(Err(e)) => {
            tracing::error!(error = %e, "built an invalid patch; admitting unchanged");
            response
        }
    };
    Json(response.into_review())
}

/// The request and its object as `T`, or the answer to send when they do not decode.
fn decode<T: serde::de::DeserializeOwned>(
    review: Review,
) -> Result<(AdmissionRequest<DynamicObject>, T), Box<Json<Review>>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            let answer = AdmissionResponse::invalid(format!("not an AdmissionReview request: {e}"));
            return Err(Box::new(Json(answer.into_review())));
        }
    };
    let decoded = request
        .object
        .as_ref()
        .ok_or_else(|| "the request carries no object".to_string())
        .and_then(|o| {
            serde_json::to_value(o)
                .and_then(serde_json::from_value)
                .map_err(|e| format!("cannot decode the object: {e}"))
        });
    match decoded {
        Ok(object) => Ok((request, object)),
        Err(message) => Err(Box::new(Json(
            AdmissionResponse::from(&request).deny(message).into_review(),
        ))),
    }
}

fn failed_open<L>(state: &WebhookState<L>, webhook: &str, request: &AdmissionRequest<DynamicObject>, e: &LookupError) {
    tracing::warn!(webhook, namespace = ?request.namespace, name = %request.name, error = %e,
        "lookup failed; admitting unchanged");
    state
        .metrics
        .failed_open
        .get_or_create(&WebhookLabels {
            webhook: webhook.into(),
        })
        .inc();
}

async fn mutate_pod<L: Lookups>(State(state): State<Arc<WebhookState<L>>>, Json(review): Json<Review>) -> Json<Review> {
    let (request, pod): (_, Pod) = match decode(review) {
        Ok(v) => v,
        Err(answer) => return *answer,
    };
    let ns = request.namespace.clone().unwrap_or_default();
    match mutate::pod_scheduler_patch(&pod, &ns, state.scheduler.as_deref(), &state.lookups).await {
        Ok(patch) => respond(&request, patch),
        Err(e) => {
            failed_open(&state, "pod", &request, &e);
            respond(&request, None)
        }
    }
}

async fn mutate_pvc<L: Lookups>(State(state): State<Arc<WebhookState<L>>>, Json(review): Json<Review>) -> Json<Review> {
    let (request, pvc): (_, PersistentVolumeClaim) = match decode(review) {
        Ok(v) => v,
        Err(answer) => return *answer,
    };
    match mutate::pvc_storage_class_patch(&pvc, &state.lookups).await {
        Ok(patch) => respond(&request, patch),
        Err(e) => {
            failed_open(&state, "pvc", &request, &e);
            respond(&request, None)
        }
    }
}

/// The webhook routes at the configured paths.
pub fn router<L: Lookups + Send + 'static>(state: WebhookState<L>, pods_path: &str, pvcs_path: &str) -> Router {
    Router::new()
        .route(pods_path, post(mutate_pod::<L>))
        .route(pvcs_path, post(mutate_pvc::<L>))
        .with_state(Arc::new(state))
}
