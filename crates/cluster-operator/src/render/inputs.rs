//! Everything `build` needs, gathered by the caller (the reconciler's observe step, or `render`
//! from files), so that `build` itself reads nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

use super::images::DefaultImages;
use crate::crd::StorageOSCluster;

/// Operator environment variables forwarded into the node ConfigMap when set (tracing).
pub const FORWARDED_NODE_ENV: [&str; 2] = ["JAEGER_ENDPOINT", "JAEGER_SERVICE_NAME"];

/// Whether the operator's variable `key` is forwarded to the api-manager container when set:
/// every tracing variable but the service name, which each process sets for itself
/// (docs/observability.md).
pub fn forwarded_to_api_manager(key: &str) -> bool {
    key != "OTEL_SERVICE_NAME" && crate::telemetry::config::VARIABLES.contains(&key)
}

/// The inputs of one build. `Debug` shows the Secrets' names, never their data.
#[derive(Clone)]
pub struct Inputs {
    /// The cluster, with metadata (name and namespace label every child).
    pub cluster: StorageOSCluster,
    /// The credentials Secret named by `spec.secretRefName`/`secretRefNamespace`. When None, the
    /// Secrets copied from it (`init-secret`, the CSI Secrets, `tls-secret`) are left out of the
    /// result: a reconciler must wait for the Secret rather than apply (and prune) without it.
    pub secret: Option<Secret>,
    /// The etcd client TLS Secret named by `spec.tlsEtcdSecretRefName`. When TLS is configured
    /// but this is None, the pods still mount `storageos-tls-etcd` but its copy is left out.
    pub etcd_tls_secret: Option<Secret>,
    /// The cluster's Kubernetes version; older than [`super::MIN_KUBERNETES`] is refused. It
    /// selects no image.
    pub k8s_version: Option<semver::Version>,
    /// The operator's own image, which runs `storageos-operator api-manager` unless an
    /// api-manager image is configured.
    pub operator_image: String,
    /// Default images (see [`super::default_images_from_env`]).
    pub default_images: DefaultImages,
    /// Whether the ServiceMonitor CRD (monitoring.coreos.com/v1) exists.
    pub service_monitor_crd: bool,
    /// The operator's namespace: the ServiceMonitor scrapes its metrics Service there too.
    pub operator_namespace: String,
    /// Operator environment forwarded to operands: [`FORWARDED_NODE_ENV`] into the node
    /// ConfigMap, the tracing variables ([`forwarded_to_api_manager`]) into the api-manager.
    pub node_env: BTreeMap<String, String>,
}

impl std::fmt::Debug for Inputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = |s: &Option<Secret>| s.as_ref().map(|s| s.metadata.name.clone().unwrap_or_default());
        f.debug_struct("Inputs")
            .field("cluster", &self.cluster)
            .field("secret", &name(&self.secret))
            .field("etcd_tls_secret", &name(&self.etcd_tls_secret))
            .field("k8s_version", &self.k8s_version)
            .field("operator_image", &self.operator_image)
            .field("default_images", &self.default_images)
            .field("service_monitor_crd", &self.service_monitor_crd)
            .field("operator_namespace", &self.operator_namespace)
            .field("node_env", &self.node_env)
            .finish()
    }
}

impl Inputs {
    /// Inputs with built-in default images, no Secrets and no optional CRDs.
    pub fn new(cluster: StorageOSCluster, operator_image: impl Into<String>) -> Self {
        Self {
            cluster,
            secret: None,
            etcd_tls_secret: None,
            k8s_version: None,
            operator_image: operator_image.into(),
            default_images: DefaultImages::default(),
            service_monitor_crd: false,
            operator_namespace: crate::rbac::operator::NAMESPACE.into(),
            node_env: BTreeMap::new(),
        }
    }
}

/// The forwarded variables of `env` that are set and non-empty.
pub fn node_env_from(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(k, v)| !v.is_empty() && (FORWARDED_NODE_ENV.contains(&k.as_str()) || forwarded_to_api_manager(k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The forwarded variables of this process (impure; `build` takes the result).
pub fn node_env_from_process() -> BTreeMap<String, String> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    node_env_from(&env)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_names_secrets_but_never_their_data() {
        let cluster: StorageOSCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"secretRefName": "s", "secretRefNamespace": "ns"}
        }))
        .unwrap();
        let mut inputs = Inputs::new(cluster, "op");
        inputs.secret = Some(
            serde_json::from_value(serde_json::json!({"metadata": {"name": "storageos-api"},
                "stringData": {"password": "hunter2"}}))
            .unwrap(),
        );
        let shown = format!("{inputs:?}");
        assert!(shown.contains("storageos-api") && !shown.contains("hunter2"), "{shown}");
    }
}
