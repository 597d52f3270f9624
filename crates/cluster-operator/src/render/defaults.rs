//! The static defaults of the StorageOSCluster schema, applied in code.
//!
//! The apiserver applies these defaults from the CRD schema, but `render` reads files that never
//! went through an apiserver, and an old CR may predate a default. Both must render the same
//! objects, so `build` resolves every optional field here first.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, ResourceRequirements, Toleration};

pub use crate::crd::contract::{DEFAULT_COOL_DOWN, DEFAULT_OFFLINE_POLLS};
use crate::crd::{DrainPolicy, StorageOSClusterSpec};

/// Namespace of the operands when `spec.namespace` is empty.
pub const DEFAULT_NAMESPACE: &str = "kube-system";
/// StorageClass name when `spec.storageClassName` is empty.
pub const DEFAULT_STORAGE_CLASS: &str = "fast";
/// API Service name when `spec.service.name` is empty.
pub const DEFAULT_SERVICE_NAME: &str = "storageos";
/// API Service type when `spec.service.type` is empty.
pub const DEFAULT_SERVICE_TYPE: &str = "ClusterIP";
/// StorageOS API port (Service and node pods) when not set.
pub const DEFAULT_API_PORT: i32 = 5705;
/// Ingress host name when `spec.ingress.hostname` is empty.
pub const DEFAULT_INGRESS_HOSTNAME: &str = "storageos.local";
/// The CSI helpers run as a Deployment unless the spec asks for a StatefulSet.
pub const DEFAULT_CSI_STRATEGY: &str = "deployment";
/// CSI socket of the node driver, as the CRD defaults it.
pub const DEFAULT_CSI_ENDPOINT: &str = "unix:///var/lib/kubelet/plugins_registry/storageos/csi.sock";
/// CSI spec version.
pub const DEFAULT_CSI_VERSION: &str = "v1";
/// Kubelet device-plugin socket directory.
pub const DEFAULT_REGISTRAR_SOCKET_DIR: &str = "/var/lib/kubelet/device-plugins/";
/// Kubelet root directory.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";
/// StorageOS CSI plugin directory.
pub const DEFAULT_PLUGIN_DIR: &str = "/var/lib/kubelet/plugins_registry/storageos";
/// Host device directory.
pub const DEFAULT_DEVICE_DIR: &str = "/dev";
/// Kubelet plugin registration directory.
pub const DEFAULT_REGISTRATION_DIR: &str = "/var/lib/kubelet/plugins_registry";
/// CSI socket path as kubelet sees it.
pub const DEFAULT_KUBELET_REGISTRATION_PATH: &str = "/var/lib/kubelet/plugins_registry/storageos/csi.sock";

/// The port the StorageOS node serves its API on. Neither operator ever configured another, so
/// it is the node's container port and the API Service's targetPort. (The Go operator used
/// `service.externalPort` as targetPort, so only 5705 worked there; see docs/adoption.md.)
pub const NODE_API_PORT: i32 = 5705;

/// A StorageOSCluster spec with every default applied: what the templates see.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// Namespace of every namespaced operand.
    pub namespace: String,
    /// StorageClass name.
    pub storage_class_name: String,
    /// API Service name.
    pub service_name: String,
    /// API Service type.
    pub service_type: String,
    /// `service.externalPort`: no effect (see [`NODE_API_PORT`]).
    pub external_port: i32,
    /// Port the API Service exposes (`service.internalPort`, as in the Go operator).
    pub internal_port: i32,
    /// Annotations of the API Service.
    pub service_annotations: BTreeMap<String, String>,
    /// Credentials Secret name and namespace.
    pub secret_ref: (String, String),
    /// Host directory shared with a containerised kubelet (None when empty).
    pub shared_dir: Option<String>,
    /// Whether the Ingress is created.
    pub ingress_enabled: bool,
    /// Ingress host name.
    pub ingress_hostname: String,
    /// Whether the Ingress serves TLS.
    pub ingress_tls: bool,
    /// Annotations of the Ingress.
    pub ingress_annotations: BTreeMap<String, String>,
    /// CSI settings.
    pub csi: ResolvedCsi,
    /// etcd endpoints (may be empty).
    pub etcd_endpoints: String,
    /// etcd client TLS Secret name and namespace, when TLS is configured.
    pub etcd_tls_secret_ref: Option<(String, String)>,
    /// Debug logging on the nodes.
    pub debug: bool,
    /// User node selector terms (empty: every node).
    pub node_selector_terms: Vec<NodeSelectorTerm>,
    /// User tolerations, merged over the defaults later.
    pub tolerations: Vec<Toleration>,
    /// The api-manager's own node selector terms (`placement.apiManager`), when set: they
    /// replace `node_selector_terms` for it.
    pub api_manager_node_selector_terms: Option<Vec<NodeSelectorTerm>>,
    /// The api-manager's own tolerations, merged over `tolerations`.
    pub api_manager_tolerations: Vec<Toleration>,
    /// The ConfigMap (key `ca.crt`) of the CA the webhook server requires of its callers.
    pub webhook_client_ca_config_map: Option<String>,
    /// The names a webhook client certificate must carry (empty: any of the CA).
    pub webhook_client_names: Vec<String>,
    /// Resources of the node container.
    pub resources: Option<ResourceRequirements>,
    /// No pod-fencer RBAC.
    pub disable_fencing: bool,
    /// `spec.nodeOutOfService` when `automatic`: the offline polls and the cool-down.
    pub node_out_of_service: Option<(u16, String)>,
    /// `spec.attachRecovery`, defaulted (on).
    pub attach_recovery: bool,
    /// `spec.nodeMaintenance.drainPolicy`, defaulted.
    pub drain_policy: DrainPolicy,
    /// `spec.nodeMaintenance.maxDrainHold` when set (a whole number of s, m or h).
    pub max_drain_hold: Option<String>,
    /// No telemetry, version checks or crash reports.
    pub disable_telemetry: bool,
    /// Disable TCMU.
    pub disable_tcmu: bool,
    /// Require TCMU.
    pub force_tcmu: bool,
    /// Kubernetes distribution, when set.
    pub k8s_distro: Option<String>,
    /// No scheduler extender.
    pub disable_scheduler: bool,
}

/// CSI settings with defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedCsi {
    /// CSI endpoint of the node driver.
    pub endpoint: String,
    /// CSI spec version.
    pub version: String,
    /// Kubelet device-plugin socket directory.
    pub registrar_socket_dir: String,
    /// Kubelet root directory.
    pub kubelet_dir: String,
    /// StorageOS CSI plugin directory.
    pub plugin_dir: String,
    /// Host device directory.
    pub device_dir: String,
    /// Kubelet plugin registration directory.
    pub registration_dir: String,
    /// CSI socket path as kubelet sees it.
    pub kubelet_registration_path: String,
    /// True when the helpers run as a StatefulSet (any strategy other than `deployment`, as in
    /// the Go operator).
    pub statefulset: bool,
    /// `spec.csi.timeout`, for every CSI helper sidecar.
    pub timeout: Option<String>,
    /// `spec.csi.workerThreads`, for every CSI helper sidecar.
    pub worker_threads: Option<i32>,
}

/// `value` unless it is absent or empty, else `default`. An empty string in a CR means "unset"
/// in the Go operator too.
fn or(value: Option<&String>, default: &str) -> String {
    match value {
        Some(v) if !v.is_empty() => v.clone(),
        _ => default.to_string(),
    }
}

/// A non-empty string, or None.
fn non_empty(value: Option<&String>) -> Option<String> {
    value.filter(|v| !v.is_empty()).cloned()
}

/// A port, or the default when absent or zero.
fn port(value: Option<i32>) -> i32 {
    value.filter(|p| *p != 0).unwrap_or(DEFAULT_API_PORT)
}

/// The etcd TLS Secret reference: TLS is on when `tlsEtcdSecretRefName` is set; the namespace
/// defaults to the credentials Secret's namespace. (The Go operator copied the Secret when either
/// field was set but mounted it only when both were, so a half-set spec half-worked.)
pub fn etcd_tls_secret_ref(spec: &StorageOSClusterSpec) -> Option<(String, String)> {
    let name = non_empty(spec.tls_etcd_secret_ref_name.as_ref())?;
    let namespace = or(spec.tls_etcd_secret_ref_namespace.as_ref(), &spec.secret_ref_namespace);
    Some((name, namespace))
}

/// Applies every static default of the schema to `spec`.
pub fn resolve(spec: &StorageOSClusterSpec) -> Resolved {
    let service = spec.service.clone().unwrap_or_default();
    let ingress = spec.ingress.clone().unwrap_or_default();
    let csi = spec.csi.clone().unwrap_or_default();
    let api_manager_placement = spec.placement.as_ref().and_then(|p| p.api_manager.as_ref());
    Resolved {
        namespace: or(spec.namespace.as_ref(), DEFAULT_NAMESPACE),
        storage_class_name: or(spec.storage_class_name.as_ref(), DEFAULT_STORAGE_CLASS),
        service_name: or(service.name.as_ref(), DEFAULT_SERVICE_NAME),
        service_type: or(service.type_.as_ref(), DEFAULT_SERVICE_TYPE),
        external_port: port(service.external_port),
        internal_port: port(service.internal_port),
        service_annotations: service.annotations.unwrap_or_default(),
        secret_ref: (spec.secret_ref_name.clone(), spec.secret_ref_namespace.clone()),
        shared_dir: non_empty(spec.shared_dir.as_ref()),
        ingress_enabled: ingress.enable.unwrap_or(false),
        ingress_hostname: or(ingress.hostname.as_ref(), DEFAULT_INGRESS_HOSTNAME),
        ingress_tls: ingress.tls.unwrap_or(false),
        ingress_annotations: ingress.annotations.unwrap_or_default(),
        csi: ResolvedCsi {
            endpoint: or(csi.endpoint.as_ref(), DEFAULT_CSI_ENDPOINT),
            version: or(csi.version.as_ref(), DEFAULT_CSI_VERSION),
            registrar_socket_dir: or(csi.registrar_socket_dir.as_ref(), DEFAULT_REGISTRAR_SOCKET_DIR),
            kubelet_dir: or(csi.kubelet_dir.as_ref(), DEFAULT_KUBELET_DIR),
            plugin_dir: or(csi.plugin_dir.as_ref(), DEFAULT_PLUGIN_DIR),
            device_dir: or(csi.device_dir.as_ref(), DEFAULT_DEVICE_DIR),
            registration_dir: or(csi.registration_dir.as_ref(), DEFAULT_REGISTRATION_DIR),
            kubelet_registration_path: or(
                csi.kubelet_registration_path.as_ref(),
                DEFAULT_KUBELET_REGISTRATION_PATH,
            ),
            statefulset: or(csi.deployment_strategy.as_ref(), DEFAULT_CSI_STRATEGY) != DEFAULT_CSI_STRATEGY,
            timeout: csi.timeout.clone().filter(|t| !t.is_empty()),
            worker_threads: csi.worker_threads,
        },
        etcd_endpoints: spec
            .kv_backend
            .as_ref()
            .and_then(|kv| kv.address.clone())
            .unwrap_or_default(),
        etcd_tls_secret_ref: etcd_tls_secret_ref(spec),
        debug: spec.debug.unwrap_or(false),
        node_selector_terms: spec.node_selector_terms.clone().unwrap_or_default(),
        tolerations: spec.tolerations.clone().unwrap_or_default(),
        api_manager_node_selector_terms: api_manager_placement
            .and_then(|p| p.node_selector_terms.clone())
            .filter(|terms| !terms.is_empty()),
        api_manager_tolerations: api_manager_placement
            .and_then(|p| p.tolerations.clone())
            .unwrap_or_default(),
        webhook_client_ca_config_map: spec
            .api_manager
            .as_ref()
            .and_then(|a| a.webhook_client_ca_config_map.clone())
            .filter(|n| !n.is_empty()),
        webhook_client_names: spec
            .api_manager
            .as_ref()
            .and_then(|a| a.webhook_client_names.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect(),
        resources: spec.resources.clone(),
        disable_fencing: spec.disable_fencing.unwrap_or(false),
        node_out_of_service: spec
            .node_out_of_service
            .as_ref()
            .filter(|o| o.automatic == Some(true))
            .map(|o| {
                (
                    o.offline_polls.unwrap_or(DEFAULT_OFFLINE_POLLS),
                    o.cool_down
                        .clone()
                        .filter(|c| !c.is_empty())
                        .unwrap_or_else(|| DEFAULT_COOL_DOWN.into()),
                )
            }),
        attach_recovery: spec.attach_recovery.unwrap_or(true),
        drain_policy: spec
            .node_maintenance
            .as_ref()
            .and_then(|m| m.drain_policy)
            .unwrap_or_default(),
        max_drain_hold: spec
            .node_maintenance
            .as_ref()
            .and_then(|m| non_empty(m.max_drain_hold.as_ref())),
        disable_telemetry: spec.disable_telemetry.unwrap_or(false),
        disable_tcmu: spec.disable_tcmu.unwrap_or(false),
        force_tcmu: spec.force_tcmu.unwrap_or(false),
        k8s_distro: non_empty(spec.k8s_distro.as_ref()),
        disable_scheduler: spec.disable_scheduler.unwrap_or(false),
    }
}

impl Resolved {
    /// The StorageOS API endpoint inside the cluster, as the api-manager and the operator reach
    /// it: the Service's port, which is `service.internalPort` (the Go operator's layout).
    pub fn api_endpoint(&self) -> String {
        format!(
            "http://{}.{}.svc:{}",
            self.service_name, self.namespace, self.internal_port
        )
    }

    /// OpenShift needs the SecurityContextConstraints role and assigns pod UIDs itself.
    pub fn is_openshift(&self) -> bool {
        self.k8s_distro
            .as_deref()
            .is_some_and(|d| d.to_ascii_lowercase().contains("openshift"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn spec() -> StorageOSClusterSpec {
        StorageOSClusterSpec {
            secret_ref_name: "s".into(),
            secret_ref_namespace: "default".into(),
            ..Default::default()
        }
    }

    #[test]
    fn empty_spec_gets_the_schema_defaults() {
        let r = resolve(&spec());
        assert_eq!(r.namespace, "kube-system");
        assert_eq!(r.storage_class_name, "fast");
        assert_eq!(
            (r.service_name.as_str(), r.service_type.as_str()),
            ("storageos", "ClusterIP")
        );
        assert_eq!((r.external_port, r.internal_port), (5705, 5705));
        assert!(!r.csi.statefulset);
        assert_eq!(r.csi.kubelet_dir, "/var/lib/kubelet");
        assert_eq!(r.api_endpoint(), "http://storageos.kube-system.svc:5705");
        assert_eq!(r.etcd_tls_secret_ref, None);
    }

    #[test]
    fn etcd_tls_namespace_defaults_to_the_credentials_namespace() {
        let mut s = spec();
        s.tls_etcd_secret_ref_name = Some("etcd".into());
        assert_eq!(etcd_tls_secret_ref(&s), Some(("etcd".into(), "default".into())));
        s.tls_etcd_secret_ref_name = None;
        s.tls_etcd_secret_ref_namespace = Some("x".into());
        assert_eq!(etcd_tls_secret_ref(&s), None);
    }

    #[test]
    fn openshift_is_detected_by_substring() {
        let mut s = spec();
        s.k8s_distro = Some("OpenShift-4.8".into());
        assert!(resolve(&s).is_openshift());
        s.k8s_distro = Some("rancher".into());
        assert!(!resolve(&s).is_openshift());
    }
}
