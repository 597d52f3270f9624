//! What every reconcile of a StorageOSCluster shares: clients, configuration, caches.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::Client;
use kube::runtime::events::EventType;

use super::api_clients::ApiClients;
use super::metrics::ClusterMetrics;
use crate::crd::StorageOSCluster;
use crate::reasons::Reason;
use crate::render::DefaultImages;
use crate::runtime::kube::apply::Applier;
use crate::runtime::kube::controller::ControllerKit;
use crate::runtime::kube::metrics::ReconcileMetrics;
use crate::runtime::kube::trusted::{SecretNamespaces, TrustedNamespaces};
use crate::runtime::kube::view_store::ViewStore;
use crate::storageos;

/// The controller name used in metrics, events and logs.
pub const CONTROLLER: &str = "storageoscluster";

/// Operator settings that shape what is rendered.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// The operator's own image; the api-manager runs from it by default.
    pub operator_image: String,
    /// Default images from `RELATED_IMAGE_*`.
    pub default_images: DefaultImages,
    /// Environment forwarded into the node ConfigMap.
    pub node_env: BTreeMap<String, String>,
    /// Talk to the StorageOS API here instead of the cluster's Service (demo, tests).
    pub storageos_endpoint: Option<String>,
    /// Timeouts of StorageOS API requests (request, login).
    pub storageos_timeouts: (Duration, Duration),
    /// The operator's own namespace (its metrics Service is scraped from there).
    pub operator_namespace: String,
    /// The Kubernetes version the operator connected to (the default kube-scheduler follows
    /// its minor); None when unknown.
    pub kubernetes_version: Option<semver::Version>,
}

/// Shared state of the cluster controller.
pub struct Context {
    pub client: Client,
    pub applier: Applier,
    /// Events, backoff and reconcile metrics.
    pub kit: ControllerKit,
    pub config: OperatorConfig,
    pub api_metrics: Option<storageos::ApiMetrics>,
    /// `storageos_cluster_ready` (unregistered unless [`Context::with_cluster_metrics`]).
    pub cluster_metrics: ClusterMetrics,
    /// One StorageOS client per (endpoint, username, password), so tokens are reused (shared
    /// with the upgrade controller).
    pub api_clients: Arc<ApiClients>,
    /// The controller's caches of Nodes and node pods, once it runs (status reads them
    /// instead of listing every Node and node pod on each pass).
    pub caches: OnceLock<NodeCaches>,
    /// The namespaces whose clusters are honoured, and that Secret references and operands may
    /// name (`run` sets `--watch-namespaces`; every namespace unless set).
    pub trusted: TrustedNamespaces,
    /// More namespaces whose Secrets a cluster may name (`--secret-namespaces`; none unless set).
    pub secret_namespaces: SecretNamespaces,
    /// Per cluster UID, the generation whose pass found no (more) Go operator leftovers: they
    /// are looked for once per generation, not on every pass.
    go_leftovers: Mutex<HashMap<String, Option<i64>>>,
    /// The kv backend's latest check per cluster UID.
    pub kv_checks: super::kv_backend::Recent,
}

/// Watch caches of every Node and of the StorageOS node pods (label `app=storageos,kind=daemonset`).
#[derive(Clone, Default)]
pub struct NodeCaches {
    pub nodes: ViewStore<super::node_cache::CachedNode>,
    pub node_pods: ViewStore<super::node_cache::NodePod>,
}

impl Context {
    /// A context writing with `client`.
    pub fn new(
        client: Client,
        config: OperatorConfig,
        metrics: ReconcileMetrics,
        api_metrics: Option<storageos::ApiMetrics>,
    ) -> Self {
        let api_clients = Arc::new(ApiClients::new(config.storageos_timeouts, api_metrics.clone()));
        Self {
            applier: Applier::new(client.clone(), crate::cluster::ownership::APPLY_OWNERSHIP),
            kit: ControllerKit::reporting_as(
                client.clone(),
                CONTROLLER,
                metrics,
                crate::cluster::ownership::FIELD_MANAGER,
            ),
            client,
            config,
            api_metrics,
            cluster_metrics: ClusterMetrics::default(),
            api_clients,
            caches: OnceLock::new(),
            trusted: TrustedNamespaces::Any,
            secret_namespaces: SecretNamespaces::default(),
            go_leftovers: Mutex::new(HashMap::new()),
            kv_checks: Default::default(),
        }
    }

    /// Honours clusters only in `trusted` namespaces, and lets their Secret references and
    /// operands name only those (see [`TrustedNamespaces`]).
    #[must_use]
    pub fn with_trusted_namespaces(mut self, trusted: TrustedNamespaces) -> Self {
        self.trusted = trusted;
        self
    }

    /// Lets clusters name Secrets in `secret_namespaces` too (see [`SecretNamespaces`]).
    #[must_use]
    pub fn with_secret_namespaces(mut self, secret_namespaces: SecretNamespaces) -> Self {
        self.secret_namespaces = secret_namespaces;
        self
    }

    /// Reports the clusters' readiness in `metrics` (registered by the process).
    pub fn with_cluster_metrics(mut self, metrics: ClusterMetrics) -> Self {
        self.cluster_metrics = metrics;
        self
    }

    /// Whether the Go operator's leftovers were already removed for this (cluster UID,
    /// generation).
    pub fn go_leftovers_checked(&self, (uid, generation): &(String, Option<i64>)) -> bool {
        self.go_leftovers
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|g| g == generation))
    }

    /// Remembers that this (cluster UID, generation) has no Go operator leftovers.
    pub fn set_go_leftovers_checked(&self, (uid, generation): (String, Option<i64>)) {
        if let Ok(mut m) = self.go_leftovers.lock() {
            m.insert(uid, generation);
        }
    }

    /// Forgets what is remembered of clusters whose UID `keep` refuses (deleted ones).
    pub fn retain_clusters(&self, keep: impl Fn(&str) -> bool) {
        if let Ok(mut m) = self.go_leftovers.lock() {
            m.retain(|uid, _| keep(uid));
        }
    }

    /// Publishes an event on `cluster`; failures are logged, never fatal.
    pub async fn event(&self, cluster: &StorageOSCluster, type_: EventType, reason: Reason, note: String) {
        self.kit.event(cluster, type_, reason, note).await;
    }
}
