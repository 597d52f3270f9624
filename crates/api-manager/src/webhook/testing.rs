//! An in-memory cluster for the webhook unit tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::StorageClass;

use super::lookups::{LookupError, Lookups};
use crate::cached_pvc::CachedPvc;

type Key = (String, String);

/// Lookups answered from maps; `broken` fails every read, `fail_create` every Secret create.
#[derive(Default)]
pub struct Fake {
    pub pvcs: Mutex<BTreeMap<Key, CachedPvc>>,
    pub classes: Vec<StorageClass>,
    pub secrets: Mutex<BTreeMap<Key, Secret>>,
    pub broken: bool,
    pub fail_create: bool,
    pub created: Arc<AtomicUsize>,
    /// Every read first waits this long (a hung apiserver).
    pub slow: Option<std::time::Duration>,
    /// Secret reads and creates first wait this long (a hung apiserver once the class is read).
    pub slow_secrets: Option<std::time::Duration>,
    /// The scheduler extender has no available replica.
    pub scheduler_down: bool,
}

impl Fake {
    pub fn add_pvc(&self, ns: &str, pvc: PersistentVolumeClaim) {
        let name = pvc.metadata.name.clone().unwrap();
        // As the cache (or a direct read) would give it.
        let cached = serde_json::from_value(serde_json::to_value(&pvc).unwrap()).unwrap();
        self.pvcs.lock().unwrap().insert((ns.into(), name), cached);
    }
    pub fn put(&self, ns: &str, secret: Secret) {
        let name = secret.metadata.name.clone().unwrap();
        self.secrets.lock().unwrap().insert((ns.into(), name), secret);
    }
    pub fn secret_now(&self, ns: &str, name: &str) -> Option<Secret> {
        self.secrets.lock().unwrap().get(&(ns.into(), name.into())).cloned()
    }
    /// Secrets created through `create_secret`.
    pub fn created(&self) -> usize {
        self.created.load(Ordering::SeqCst)
    }
    /// The live count of created Secrets, for when the Fake is moved away.
    pub fn created_counter(&self) -> Arc<AtomicUsize> {
        self.created.clone()
    }
    async fn check(&self) -> Result<(), LookupError> {
        if let Some(d) = self.slow {
            tokio::time::sleep(d).await;
        }
        match self.broken {
            true => Err(LookupError("apiserver unavailable".into())),
            false => Ok(()),
        }
    }
}

impl Lookups for Fake {
    async fn pvc(&self, ns: &str, name: &str) -> Result<Option<CachedPvc>, LookupError> {
        self.check().await?;
        Ok(self.pvcs.lock().unwrap().get(&(ns.into(), name.into())).cloned())
    }
    async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, LookupError> {
        self.check().await?;
        Ok(self
            .classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .cloned())
    }
    async fn storage_classes(&self) -> Result<Vec<StorageClass>, LookupError> {
        self.check().await?;
        Ok(self.classes.clone())
    }
    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>, LookupError> {
        if let Some(d) = self.slow_secrets {
            tokio::time::sleep(d).await;
        }
        self.check().await?;
        Ok(self.secret_now(ns, name))
    }
    async fn scheduler_unavailable(&self) -> bool {
        self.scheduler_down
    }
    async fn create_secret(&self, ns: &str, secret: &Secret) -> Result<bool, LookupError> {
        if let Some(d) = self.slow_secrets {
            tokio::time::sleep(d).await;
        }
        if self.fail_create {
            return Err(LookupError("secrets is forbidden".into()));
        }
        // As the apiserver: label values longer than 63 characters are invalid (422).
        if let Some((k, v)) = secret.metadata.labels.iter().flatten().find(|(_, v)| v.len() > 63) {
            return Err(LookupError(format!(
                "Secret is invalid: metadata.labels: Invalid value: {v:?}: must be no more than 63 characters (label {k})"
            )));
        }
        let name = secret.metadata.name.clone().unwrap();
        let mut all = self.secrets.lock().unwrap();
        if all.contains_key(&(ns.into(), name.clone())) {
            return Ok(false);
        }
        all.insert((ns.into(), name), secret.clone());
        self.created.fetch_add(1, Ordering::SeqCst);
        Ok(true)
    }
}
