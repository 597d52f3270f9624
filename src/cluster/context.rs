//! What every reconcile of a StorageOSCluster shares: clients, configuration, caches.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};

use crate::crd::StorageOSCluster;
use crate::render::DefaultImages;
use crate::runtime::apply::Applier;
use crate::runtime::metrics::ReconcileMetrics;
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
}

/// Shared state of the cluster controller.
pub struct Context {
    pub client: Client,
    pub applier: Applier,
    pub recorder: Recorder,
    pub metrics: ReconcileMetrics,
    pub config: OperatorConfig,
    pub api_metrics: Option<storageos::ApiMetrics>,
    /// One StorageOS client per (endpoint, username, password), so tokens are reused.
    api_clients: Mutex<HashMap<(String, String, String), storageos::Client>>,
    /// Consecutive failures per cluster (namespace, name), for exponential backoff.
    failures: Mutex<HashMap<(String, String), u32>>,
}

impl Context {
    /// A context writing with `client`.
    pub fn new(
        client: Client,
        config: OperatorConfig,
        metrics: ReconcileMetrics,
        api_metrics: Option<storageos::ApiMetrics>,
    ) -> Self {
        let reporter = Reporter {
            controller: "storageos-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            applier: Applier::new(client.clone()),
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            config,
            api_metrics,
            api_clients: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// A (cached) StorageOS API client for `endpoint` with these credentials.
    pub fn api_client(
        &self,
        endpoint: &str,
        username: &str,
        password: &str,
    ) -> Result<storageos::Client, storageos::Error> {
        let key = (endpoint.to_string(), username.to_string(), password.to_string());
        if let Ok(cache) = self.api_clients.lock()
            && let Some(c) = cache.get(&key)
        {
            return Ok(c.clone());
        }
        let (request, login) = self.config.storageos_timeouts;
        let config = storageos::Config::new(endpoint, username, password).with_timeouts(request, login);
        let client = match &self.api_metrics {
            Some(m) => storageos::Client::with_shared_metrics(config, m.clone())?,
            None => storageos::Client::new(config)?,
        };
        if let Ok(mut cache) = self.api_clients.lock() {
            // Credentials or endpoint changed: forget clients of older settings.
            cache.retain(|(e, _, _), _| e != endpoint);
            cache.insert(key, client.clone());
        }
        Ok(client)
    }

    /// Publishes an event on `cluster`; failures are logged, never fatal.
    pub async fn event(&self, cluster: &StorageOSCluster, warning: bool, reason: &str, note: String) {
        let ev = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &cluster.object_ref(&())).await {
            tracing::warn!(cluster = %cluster.name_any(), error = %e, "cannot publish event");
        }
    }

    /// Records a failure of `key` and returns how long to wait before retrying:
    /// 100 ms doubling up to 5 minutes.
    pub fn backoff(&self, key: (String, String)) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry(key).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        backoff_delay(n)
    }

    /// Forgets the failures of `key` after a success.
    pub fn reset_backoff(&self, key: &(String, String)) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}

/// The delay after `failures` consecutive failures.
pub fn backoff_delay(failures: u32) -> Duration {
    const MAX: Duration = Duration::from_secs(300);
    let exp = failures.saturating_sub(1).min(20);
    Duration::from_millis(100).saturating_mul(1 << exp).min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_100ms_to_5min() {
        assert_eq!(backoff_delay(1), Duration::from_millis(100));
        assert_eq!(backoff_delay(2), Duration::from_millis(200));
        assert_eq!(backoff_delay(5), Duration::from_millis(1600));
        assert_eq!(backoff_delay(13), Duration::from_secs(300));
        assert_eq!(backoff_delay(u32::MAX), Duration::from_secs(300));
    }
}
