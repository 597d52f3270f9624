//! StorageOS API clients, one per (endpoint, username, password), so a login token is reused
//! across reconciles; shared by the cluster and upgrade controllers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;

use crate::render;
use crate::storageos;

/// The client cache, with the settings every client is made with.
pub struct ApiClients {
    /// Timeouts of StorageOS API requests (request, login).
    timeouts: (Duration, Duration),
    metrics: Option<storageos::ApiMetrics>,
    cache: Mutex<HashMap<(String, String, String), storageos::Client>>,
}

impl ApiClients {
    pub fn new(timeouts: (Duration, Duration), metrics: Option<storageos::ApiMetrics>) -> Self {
        Self {
            timeouts,
            metrics,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// A (cached) client for `endpoint` with these credentials.
    pub fn get(&self, endpoint: &str, username: &str, password: &str) -> Result<storageos::Client, storageos::Error> {
        let key = (endpoint.to_string(), username.to_string(), password.to_string());
        if let Ok(cache) = self.cache.lock()
            && let Some(c) = cache.get(&key)
        {
            return Ok(c.clone());
        }
        let (request, login) = self.timeouts;
        let config = storageos::Config::new(endpoint, username, password).with_timeouts(request, login);
        let client = match &self.metrics {
            Some(m) => storageos::Client::with_shared_metrics(config, m.clone())?,
            None => storageos::Client::new(config)?,
        };
        if let Ok(mut cache) = self.cache.lock() {
            // Credentials or endpoint changed: forget clients of older settings.
            cache.retain(|(e, _, _), _| e != endpoint);
            cache.insert(key, client.clone());
        }
        Ok(client)
    }

    /// A client for `endpoint` with the credentials in a cluster's API Secret.
    pub fn for_secret(&self, endpoint: &str, secret: &Secret) -> Result<storageos::Client, storageos::Error> {
        let data = secret
            .data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let (username, password) = render::secrets::api_credentials(&data);
        self.get(
            endpoint,
            &String::from_utf8_lossy(&username),
            &String::from_utf8_lossy(&password),
        )
    }
}
