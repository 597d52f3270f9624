//! The mutating webhooks served on every api-manager replica: pods (scheduler name) and PVCs
//! (encryption keys, StorageClass UID). Requests are decoded as AdmissionReview v1; a body that
//! is not one is answered 400; an object this webhook cannot decode, a mutator's own lookup
//! failure, or a mutator slower than [`DEADLINE`] admits the object unchanged
//! (fail open), logged and counted, except for a PVC that asks for encryption, which is denied
//! with a message to retry (never admitted without its keys); user errors in a PVC's encryption
//! settings are denied.

pub mod encryption;
pub mod keys;
pub mod lookups;
pub mod mutate;
#[cfg(test)]
mod testing;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::post;
use axum::{Json, Router};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rand::rngs::OsRng;
use tracing::Instrument;

use crate::cached_pvc::CachedPvc;
use crate::runtime::kube::cache::{self, Shared};
use crate::telemetry::spans;

use lookups::{LookupError, Lookups};

/// Lookups through the Kubernetes API, at most [`LOOKUPS_IN_FLIGHT`] at once.
///
/// Each read in flight holds a connection to the apiserver of its own (HTTP/1.1): when the
/// apiserver queues the api-manager's reads (a saturated plane, API Priority and Fairness), an
/// admission rate of 200/s left hundreds of reads and connections open, and the api-manager went
/// from 59 to 149 MiB at 5,000 nodes (docs/benchmarks.md). Past the bound an admission waits for
/// a turn within its [`DEADLINE`], as it would have waited for the apiserver.
#[derive(Clone)]
pub struct KubeLookups {
    client: kube::Client,
    in_flight: InFlight,
}

/// Reads and writes of the webhooks to the apiserver at once, at most: normally one takes a few
/// milliseconds, so this serves thousands of admissions a second.
pub const LOOKUPS_IN_FLIGHT: usize = 16;

impl KubeLookups {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            in_flight: InFlight::new(LOOKUPS_IN_FLIGHT),
        }
    }
}

/// A bound on futures run at once; the rest wait for a turn, first come first served.
#[derive(Clone)]
struct InFlight(Arc<tokio::sync::Semaphore>);

impl InFlight {
    fn new(limit: usize) -> Self {
        Self(Arc::new(tokio::sync::Semaphore::new(limit)))
    }

    /// Runs `work` once fewer than the limit are running.
    async fn run<T>(&self, work: impl Future<Output = T>) -> T {
        // The semaphore is never closed, so a permit always comes.
        let _permit = self.0.acquire().await.ok();
        work.await
    }
}

fn lookup_err(e: kube::Error) -> LookupError {
    LookupError(e.to_string())
}

impl Lookups for KubeLookups {
    async fn pvc(&self, namespace: &str, name: &str) -> Result<Option<CachedPvc>, LookupError> {
        let api = Api::<CachedPvc>::namespaced(self.client.clone(), namespace);
        self.in_flight.run(api.get_opt(name)).await.map_err(lookup_err)
    }
    async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, LookupError> {
        let api = Api::<StorageClass>::all(self.client.clone());
        self.in_flight.run(api.get_opt(name)).await.map_err(lookup_err)
    }
    async fn storage_classes(&self) -> Result<Vec<StorageClass>, LookupError> {
        let api = Api::<StorageClass>::all(self.client.clone());
        let list = self.in_flight.run(api.list(&ListParams::default())).await;
        Ok(list.map_err(lookup_err)?.items)
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, LookupError> {
        let api = Api::<Secret>::namespaced(self.client.clone(), namespace);
        self.in_flight.run(api.get_opt(name)).await.map_err(lookup_err)
    }
    async fn create_secret(&self, namespace: &str, secret: &Secret) -> Result<bool, LookupError> {
        let api = Api::<Secret>::namespaced(self.client.clone(), namespace);
        match self.in_flight.run(api.create(&PostParams::default(), secret)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(lookup_err(e)),
        }
    }
}

/// Lookups served from watch caches of PVCs and StorageClasses, falling back to a direct
/// read when the cache does not hold the object (not yet listed, or created a moment ago): an
/// admission then costs no apiserver round trip (docs/benchmarks.md). Secrets are always read
/// directly.
#[derive(Clone)]
pub struct CachedLookups {
    pub pvcs: Store<CachedPvc>,
    pub storage_classes: Store<StorageClass>,
    pub direct: KubeLookups,
    /// The scheduler extender's Deployment, watched by name (None: not watched).
    pub scheduler: Option<Store<Deployment>>,
}

/// Whether the scheduler extender's Deployment, as cached, has no available replica; false
/// when it is not cached (not listed yet, or no such Deployment).
pub fn no_available_replica(cached: &[Arc<Deployment>]) -> bool {
    cached
        .first()
        .is_some_and(|d| d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0) == 0)
}

impl CachedLookups {
    /// Starts the caches (the PVCs in `pvcs`, shared with the controllers); the future keeps the
    /// StorageClasses filled and runs for the life of the process.
    ///
    /// `scheduler`, the namespace and name of the scheduler extender's Deployment, is watched
    /// too, so that pods are not sent to a scheduler with no available replica.
    pub fn start(
        client: kube::Client,
        pvcs: &Shared<CachedPvc>,
        scheduler: Option<(&str, &str)>,
    ) -> (Self, impl Future<Output = ()> + use<>) {
        let (storage_classes, classes) =
            cache::reflect(Api::<StorageClass>::all(client.clone()), cache::every(), "webhook");
        let (scheduler, deployment) = match scheduler {
            Some((namespace, name)) => {
                let config = cache::every().fields(&format!("metadata.name={name}"));
                let (store, drive) = cache::reflect(
                    Api::<Deployment>::namespaced(client.clone(), namespace),
                    config,
                    "webhook",
                );
                (Some(store), Some(drive))
            }
            None => (None, None),
        };
        let drive = async move {
            match deployment {
                Some(deployment) => {
                    futures::join!(classes, deployment);
                }
                None => classes.await,
            }
        };
        (
            Self {
                pvcs: pvcs.get(&client, "webhook"),
                storage_classes,
                direct: KubeLookups::new(client),
                scheduler,
            },
            drive,
        )
    }
}

impl Lookups for CachedLookups {
    async fn pvc(&self, namespace: &str, name: &str) -> Result<Option<CachedPvc>, LookupError> {
        match self.pvcs.get(&ObjectRef::new(name).within(namespace)) {
            Some(pvc) => Ok(Some(pvc.as_ref().clone())),
            None => self.direct.pvc(namespace, name).await,
        }
    }
    async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, LookupError> {
        match self.storage_classes.get(&ObjectRef::new(name)) {
            Some(sc) => Ok(Some(sc.as_ref().clone())),
            None => self.direct.storage_class(name).await,
        }
    }
    async fn storage_class_fresh(&self, name: &str) -> Result<Option<StorageClass>, LookupError> {
        self.direct.storage_class(name).await
    }
    async fn storage_classes_fresh(&self) -> Result<Vec<StorageClass>, LookupError> {
        self.direct.storage_classes().await
    }
    async fn storage_classes(&self) -> Result<Vec<StorageClass>, LookupError> {
        let cached = self.storage_classes.state();
        if cached.is_empty() {
            return self.direct.storage_classes().await;
        }
        Ok(cached.iter().map(|sc| sc.as_ref().clone()).collect())
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, LookupError> {
        self.direct.secret(namespace, name).await
    }
    async fn create_secret(&self, namespace: &str, secret: &Secret) -> Result<bool, LookupError> {
        self.direct.create_secret(namespace, secret).await
    }
    async fn scheduler_unavailable(&self) -> bool {
        self.scheduler
            .as_ref()
            .is_some_and(|s| no_available_replica(&s.state()))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

/// Requests admitted unchanged because a mutator's lookup failed, encrypted PVCs denied
/// because their keys could not be made, and how long each request took here.
#[derive(Clone)]
pub struct WebhookMetrics {
    failed_open: Family<WebhookLabels, Counter>,
    failed_closed: Family<WebhookLabels, Counter>,
    duration: Family<WebhookLabels, Histogram>,
}

/// Buckets of the webhook duration, in seconds: fine around the 10 ms a mutator should take.
const DURATION_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1.0, 4.0,
];

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            failed_open: Family::default(),
            failed_closed: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS)),
        }
    }
}

impl WebhookMetrics {
    /// New webhook metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "storageos_webhook_failed_open",
            "Admission requests admitted unchanged because a lookup failed",
            m.failed_open.clone(),
        );
        registry.register(
            "storageos_webhook_failed_closed",
            "Encrypted PVCs denied (to be retried) because their keys could not be made",
            m.failed_closed.clone(),
        );
        // At zero from the start, so that an alert on `increase()` sees the first one.
        for webhook in ["pod", "pvc"] {
            let _ = m.failed_open.get_or_create(&WebhookLabels {
                webhook: webhook.into(),
            });
        }
        let _ = m.failed_closed.get_or_create(&WebhookLabels { webhook: "pvc".into() });
        registry.register(
            "storageos_webhook_duration_seconds",
            "Time a mutator took to answer an admission request (after its body is parsed), by webhook",
            m.duration.clone(),
        );
        m
    }

    fn observe(&self, webhook: &str, since: Instant) {
        self.duration
            .get_or_create(&WebhookLabels {
                webhook: webhook.into(),
            })
            .observe(since.elapsed().as_secs_f64());
    }
}

/// How long a mutator may take before the request is answered without it: below the
/// configuration's 5 s timeout, so the apiserver gets our answer rather than its own timeout.
pub const DEADLINE: Duration = Duration::from_secs(4);
/// The largest request body read (as [`crate::runtime::process::https::Limits::body`]): an
/// AdmissionReview of a Pod or PVC CREATE (no old object) of the largest size etcd stores
/// (1.5 MiB) fits.
pub const MAX_BODY: usize = 2 << 20;

/// What the handlers share.
pub struct WebhookState<L> {
    /// Cluster lookups.
    pub lookups: L,
    /// The scheduler set on StorageOS pods; None disables the pod mutator.
    pub scheduler: Option<String>,
    /// Fail-open counter.
    pub metrics: WebhookMetrics,
    /// How long a mutator may take ([`DEADLINE`]).
    pub deadline: Duration,
}

impl<L> WebhookState<L> {
    /// State with the default [`DEADLINE`].
    pub fn new(lookups: L, scheduler: Option<String>, metrics: WebhookMetrics) -> Self {
        Self {
            lookups,
            scheduler,
            metrics,
            deadline: DEADLINE,
        }
    }
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

/// The request and its object as `T`, or the answer to send when they do not decode: a body that
/// is no AdmissionReview request is answered as invalid; an object this webhook cannot decode
/// is admitted unchanged and counted (our own limit, never the user's fault).
fn decode<T: serde::de::DeserializeOwned, L>(
    state: &WebhookState<L>,
    webhook: &str,
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
        // A PVC whose label asks for encryption is never admitted without keys, not even one
        // the webhook cannot read.
        Err(message) if webhook == "pvc" && request.object.as_ref().is_some_and(labelled_encrypted) => {
            tracing::warn!(name = %request.name, %message, "denied an encrypted PVC the webhook cannot decode");
            state
                .metrics
                .failed_closed
                .get_or_create(&WebhookLabels { webhook: "pvc".into() })
                .inc();
            let answer = AdmissionResponse::from(&request).deny(format!(
                "{message}; a PVC that asks for encryption is not admitted without keys"
            ));
            Err(Box::new(Json(answer.into_review())))
        }
        Err(message) => {
            failed_open(state, webhook, &request, &message);
            Err(Box::new(respond(&request, None)))
        }
    }
}

/// Whether `object`'s own label asks for encryption (read without decoding it as a PVC).
fn labelled_encrypted(object: &DynamicObject) -> bool {
    object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(encryption::ENCRYPTION))
        .and_then(|v| crate::go::parse_bool(v))
        == Some(true)
}

fn failed_open<L>(
    state: &WebhookState<L>,
    webhook: &str,
    request: &AdmissionRequest<DynamicObject>,
    e: &dyn std::fmt::Display,
) {
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
    let (request, pod): (_, Pod) = match decode(&state, "pod", review) {
        Ok(v) => v,
        Err(answer) => return *answer,
    };
    let ns = request.namespace.clone().unwrap_or_default();
    let mutation = mutate::pod_scheduler_patch(&pod, &ns, state.scheduler.as_deref(), &state.lookups);
    match tokio::time::timeout(state.deadline, mutation).await {
        Ok(Ok(patch)) => respond(&request, patch),
        Ok(Err(e)) => {
            failed_open(&state, "pod", &request, &e);
            respond(&request, None)
        }
        Err(_) => {
            failed_open(&state, "pod", &request, &"lookups took too long");
            respond(&request, None)
        }
    }
}

async fn mutate_pvc<L: Lookups>(State(state): State<Arc<WebhookState<L>>>, Json(review): Json<Review>) -> Json<Review> {
    let (request, pvc): (_, PersistentVolumeClaim) = match decode(&state, "pvc", review) {
        Ok(v) => v,
        Err(answer) => return *answer,
    };
    let ns = request.namespace.clone().unwrap_or_default();
    let mut rng = OsRng;
    let asks_encryption = std::sync::atomic::AtomicBool::new(false);
    let mutation = mutate::pvc_patch_noting(&pvc, &ns, request.dry_run, &state.lookups, &mut rng, &asks_encryption);
    let outcome = match tokio::time::timeout(state.deadline, mutation).await {
        Ok(outcome) => outcome,
        Err(_) => Err(encryption::Error::Lookup(LookupError("lookups took too long".into()))),
    };
    // A PVC asking for encryption, by its label or (once its class was read) by its class's
    // parameter, is never admitted without keys: any failure, the deadline included, denies it.
    let asks = encryption::asked_by_label(&pvc) || asks_encryption.load(std::sync::atomic::Ordering::SeqCst);
    let outcome = match outcome {
        Err(e) if asks => Err(e.for_encrypted()),
        other => other,
    };
    match outcome {
        Ok(patch) => respond(&request, patch),
        Err(encryption::Error::Denied(message)) => {
            tracing::info!(namespace = %ns, name = %request.name, %message, "denied a PVC");
            Json(AdmissionResponse::from(&request).deny(message).into_review())
        }
        Err(e @ encryption::Error::Retry(_)) => {
            tracing::warn!(namespace = %ns, name = %request.name, error = %e, "denied an encrypted PVC for now");
            state
                .metrics
                .failed_closed
                .get_or_create(&WebhookLabels { webhook: "pvc".into() })
                .inc();
            Json(AdmissionResponse::from(&request).deny(e.to_string()).into_review())
        }
        Err(e) => {
            failed_open(&state, "pvc", &request, &e);
            respond(&request, None)
        }
    }
}

/// Answers `review` with `handle` in the admission's trace span, records the verdict and times
/// the answer.
async fn traced<F: Future<Output = Json<Review>>>(
    metrics: WebhookMetrics,
    webhook: &str,
    review: Review,
    handle: impl FnOnce(Review) -> F,
) -> Json<Review> {
    let started = Instant::now();
    let (operation, namespace, name) = review
        .request
        .as_ref()
        .map(|r| {
            let op = format!("{:?}", r.operation).to_uppercase();
            (op, r.namespace.clone().unwrap_or_default(), r.name.clone())
        })
        .unwrap_or_default();
    let span = spans::admission(webhook, &operation, &namespace, &name);
    let answer = handle(review).instrument(span.clone()).await;
    let verdict = match &answer.0.response {
        Some(r) if !r.allowed => "denied",
        Some(r) if r.patch.is_some() => "patched",
        _ => "allowed",
    };
    spans::verdict(&span, verdict);
    metrics.observe(webhook, started);
    answer
}

async fn pod_admission<L: Lookups>(state: State<Arc<WebhookState<L>>>, Json(review): Json<Review>) -> Json<Review> {
    traced(state.metrics.clone(), "pod", review, |r| mutate_pod(state, Json(r))).await
}

async fn pvc_admission<L: Lookups>(state: State<Arc<WebhookState<L>>>, Json(review): Json<Review>) -> Json<Review> {
    traced(state.metrics.clone(), "pvc", review, |r| mutate_pvc(state, Json(r))).await
}

/// The webhook routes at the configured paths.
pub fn router<L: Lookups + Send + 'static>(state: WebhookState<L>, pods_path: &str, pvcs_path: &str) -> Router {
    Router::new()
        .route(pods_path, post(pod_admission::<L>))
        .route(pvcs_path, post(pvc_admission::<L>))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(Arc::new(state))
}

#[cfg(test)]
mod tests;
