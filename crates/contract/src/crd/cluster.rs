//! `StorageOSCluster`: the desired StorageOS installation.
//!
//! Every field of the Go cluster-operator v2.4.2 keeps its JSON name (including the misspelled
//! `csi.driverRegisterationMode`), so existing CRs apply unchanged. Every field is optional in
//! Rust so that a CR round-trips without gaining or losing keys; static defaults live in the
//! schema (applied by the apiserver), environment-dependent ones are resolved at reconcile time.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validation;

/// The StorageOS cluster the operator installs and keeps running.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "storageos.com",
    version = "v1",
    kind = "StorageOSCluster",
    plural = "storageosclusters",
    singular = "storageoscluster",
    shortname = "stos",
    namespaced,
    status = "StorageOSClusterStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.ready","description":"Ready StorageOS nodes out of the selected nodes."}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.phase","description":"Phase of the whole cluster."}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.images.nodeContainer","description":"StorageOS node image in use."}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A StorageOS cluster: the node DaemonSet, CSI helpers, services, scheduler extender and api-manager the operator installs."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = validation::kv_backend_address()))]
pub struct StorageOSClusterSpec {
    /// Legacy: comma-separated IPs of the nodes that join the cluster. The operator computes the
    /// member list from nodeSelectorTerms and tolerations; a value here is kept but not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<String>,

    /// CSI settings. CSI is always enabled; the paths only need changing for non-standard kubelets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub csi: Option<StorageOSClusterCsi>,

    /// Namespace where the StorageOS node DaemonSet, CSI helpers, services and api-manager run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        extend("default" = "kube-system", "x-kubernetes-validations" = validation::operand_namespace()),
        length(min = 1, max = 63)
    )]
    pub namespace: Option<String>,

    /// Name of the StorageClass created for StorageOS volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "fast"), length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,

    /// The Service in front of the StorageOS API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub service: Option<StorageOSClusterService>,

    /// Name of the Secret holding the StorageOS API credentials (keys `username` and `password`)
    /// and, optionally, CSI credentials and the ingress TLS certificate.
    #[schemars(length(min = 1))]
    pub secret_ref_name: String,

    /// Namespace of the Secret named by secretRefName.
    #[schemars(length(min = 1))]
    pub secret_ref_namespace: String,

    /// Host path shared with a containerised kubelet, typically
    /// `/var/lib/kubelet/plugins/kubernetes.io~storageos`. Empty when kubelet runs on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_dir: Option<String>,

    /// Ingress in front of the StorageOS API Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<StorageOSClusterIngress>,

    /// Container images. Empty fields use the operator's defaults (its `RELATED_IMAGE_*`
    /// environment); the images in use are shown in status.images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ContainerImages>,

    /// External etcd used by StorageOS as its key-value store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_backend: Option<StorageOSClusterKvBackend>,

    /// Stop reconciling this cluster (deletion still proceeds). Use for manual maintenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<bool>,

    /// Debug logging on every StorageOS node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug: Option<bool>,

    /// Required node affinity for StorageOS pods. Terms are ORed; expressions inside a term are
    /// ANDed. Nodes that match (and whose taints are tolerated) are the cluster's members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector_terms: Option<Vec<NodeSelectorTerm>>,

    /// Tolerations for StorageOS pods, merged over the operator's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = validation::tolerations(), "maxItems" = validation::MAX_TOLERATIONS))]
    pub tolerations: Option<Vec<Toleration>>,

    /// Compute resources of the StorageOS node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Where single components run when that differs from the StorageOS nodes. Without it every
    /// StorageOS pod follows nodeSelectorTerms and tolerations (as with the Go operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<StorageOSClusterPlacement>,

    /// Settings of the api-manager (the operator's own api-manager image only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_manager: Option<StorageOSClusterApiManager>,

    /// Do not install the pod-fencing RBAC (the api-manager then cannot fence pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_fencing: Option<bool>,

    /// The `node.kubernetes.io/out-of-service` taint, which the api-manager always honours (every
    /// pod using StorageOS volumes on a tainted node is fenced): whether it also applies it to
    /// lost nodes. Unset: it never taints a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_out_of_service: Option<StorageOSClusterNodeOutOfService>,

    /// Delete a StorageOS VolumeAttachment that StorageOS contradicts, so that a pod waiting on
    /// another node attaches the volume instead of failing with Multi-Attach: one whose node
    /// does not hold the volume in StorageOS while a pod on another node uses its PVC, or one
    /// whose node is offline in StorageOS and NotReady (or gone) with no pod of the PVC left on
    /// it. Never one StorageOS confirms, never on a partial read, while an upgrade is in
    /// progress or while more than half the StorageOS nodes are offline (docs/api-manager.md,
    /// "Attach recovery"). The api-manager's Go image ignores it. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_recovery: Option<bool>,

    /// How node drains meet StorageOS volumes: which volumes make a drain wait, and for how
    /// long at most (docs/api-manager.md, "Drain gate"). Unset: the defaults of each field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_maintenance: Option<StorageOSClusterNodeMaintenance>,

    /// Disable telemetry, version checks and crash reports on every StorageOS node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_telemetry: Option<bool>,

    /// Disable TCMU so StorageOS can coexist with other storage systems (slower).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "disableTCMU")]
    pub disable_tcmu: Option<bool>,

    /// Require TCMU; StorageOS aborts start-up when it is unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "forceTCMU")]
    pub force_tcmu: Option<bool>,

    /// Name of the Secret with the client certificate, key and CA for a TLS etcd
    /// (keys `etcd-client-ca.crt`, `etcd-client.crt`, `etcd-client.key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_etcd_secret_ref_name: Option<String>,

    /// Namespace of the Secret named by tlsEtcdSecretRefName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_etcd_secret_ref_namespace: Option<String>,

    /// Kubernetes distribution (for example `openshift`, `rancher`, `eks`). A value containing
    /// `openshift` also installs the SecurityContextConstraints role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "k8sDistro")]
    pub k8s_distro: Option<String>,

    /// Do not run the StorageOS scheduler extender (pods then use the default scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_scheduler: Option<bool>,
}

/// When the api-manager taints a lost node out of service (docs/api-manager.md, "Out of
/// service").
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterNodeOutOfService {
    /// Taint a node `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` when StorageOS
    /// has reported it offline for offlinePolls polls in a row and its Kubernetes Node is
    /// NotReady, unless it is cordoned, more than half the StorageOS nodes are offline or an
    /// upgrade is in progress; Kubernetes then force-deletes its pods and detaches its volumes.
    /// The api-manager's Go image ignores it. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automatic: Option<bool>,

    /// Consecutive StorageOS node polls (5 s apart) reporting the node offline before it is
    /// tainted. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub offline_polls: Option<u16>,

    /// How long a tainted node must be online in StorageOS and Ready again before the taint
    /// (only one the api-manager applied) is removed: a whole number of s, m or h. Default 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = validation::cool_down()))]
    pub cool_down: Option<String>,
}

/// The drain gate's settings (the api-manager's Go image has no drain gate and ignores them).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterNodeMaintenance {
    /// Which volumes make a node's drain wait. `BlockIfReplicatedVolumeAtRisk` (the default):
    /// only a volume that asked for replicas (`storageos.com/replicas` of 1 or more) and whose
    /// last ready copy is on the node (its replicas still syncing, or the only ready replica
    /// while the master is offline); a volume with 0 replicas is shown as unprotected and never
    /// makes a drain wait. `BlockLastCopy`: any volume whose last online copy is on the node, 0
    /// replicas included. `AllowAlways`: no drain ever waits (the mirrors still show what is at
    /// risk). A volume whose PersistentVolume no longer exists never makes a drain wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_policy: Option<DrainPolicy>,

    /// The longest a drain waits on StorageOS: counted from when the guarded node is first seen
    /// cordoned, after it the guard lets the drain proceed (a Warning event names what is then
    /// at risk). A whole number of s, m or h, for example 30m. Unset: the drain waits until it
    /// is safe (an alert fires when it waits long).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = validation::max_drain_hold()))]
    pub max_drain_hold: Option<String>,
}

/// Which volumes make a node's drain wait (see [`StorageOSClusterNodeMaintenance::drain_policy`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DrainPolicy {
    /// Only volumes that asked for replicas and would lose their last ready copy.
    #[default]
    BlockIfReplicatedVolumeAtRisk,
    /// Any volume that would lose its last online copy, 0 replicas included.
    BlockLastCopy,
    /// Never: drains proceed, the mirrors show what is at risk.
    AllowAlways,
}

impl DrainPolicy {
    /// Every policy, as the CRD spells it.
    pub const ALL: [DrainPolicy; 3] = [
        DrainPolicy::BlockIfReplicatedVolumeAtRisk,
        DrainPolicy::BlockLastCopy,
        DrainPolicy::AllowAlways,
    ];

    /// The name the CRD and the api-manager's `--drain-policy` use.
    pub fn as_str(self) -> &'static str {
        match self {
            DrainPolicy::BlockIfReplicatedVolumeAtRisk => "BlockIfReplicatedVolumeAtRisk",
            DrainPolicy::BlockLastCopy => "BlockLastCopy",
            DrainPolicy::AllowAlways => "AllowAlways",
        }
    }
}

impl std::fmt::Display for DrainPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DrainPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| {
            format!("unknown drain policy {s:?}: use BlockIfReplicatedVolumeAtRisk, BlockLastCopy or AllowAlways")
        })
    }
}

/// Settings of the api-manager.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterApiManager {
    /// A ConfigMap in the cluster's namespace (spec.namespace) whose key `ca.crt` holds the CA
    /// of the client certificate the kube-apiserver presents to admission webhooks. Set, the
    /// webhook server serves only callers with a certificate of that CA, so no pod can send it
    /// requests (which create encryption key Secrets); the apiserver must be configured to
    /// present the certificate (docs/security.md). Unset, any caller that reaches port 9443 is
    /// served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "webhookClientCAConfigMap")]
    #[schemars(length(min = 1, max = 253))]
    pub webhook_client_ca_config_map: Option<String>,
    /// With `webhookClientCAConfigMap`: the names (subject common name or DNS name) the
    /// apiserver's client certificate carries; a certificate of that CA with any other name (a
    /// kubelet's, when the CA is the cluster's) is refused. Unset, any certificate of the CA is
    /// served: then use a CA dedicated to the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub webhook_client_names: Option<Vec<String>>,
}

/// Placement of single components.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterPlacement {
    /// The api-manager Deployment. It reaches StorageOS through its Service and needs no
    /// StorageOS node of its own, so it can run on other nodes (for example infrastructure
    /// nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_manager: Option<ComponentPlacement>,
}

/// Where one component's pods may run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentPlacement {
    /// Required node affinity of the component, used instead of the cluster's
    /// nodeSelectorTerms. Terms are ORed; expressions inside a term are ANDed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector_terms: Option<Vec<NodeSelectorTerm>>,

    /// Tolerations of the component, merged over the cluster's tolerations (a toleration here
    /// replaces one with the same key there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = validation::tolerations(), "maxItems" = validation::MAX_TOLERATIONS))]
    pub tolerations: Option<Vec<Toleration>>,
}

/// CSI driver settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterCsi {
    /// Legacy: CSI is always enabled; false is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub enable: Option<bool>,

    /// CSI spec version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "v1"))]
    pub version: Option<String>,

    /// CSI endpoint the node driver listens on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "unix:///var/lib/kubelet/plugins_registry/storageos/csi.sock"))]
    pub endpoint: Option<String>,

    /// Legacy: provision credentials are always enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_provision_creds: Option<bool>,

    /// Legacy: controller-publish credentials are always enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_controller_publish_creds: Option<bool>,

    /// Legacy: node-publish credentials are always enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_node_publish_creds: Option<bool>,

    /// Legacy: controller-expand credentials are always enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_controller_expand_creds: Option<bool>,

    /// Host directory of the kubelet device-plugin sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "/var/lib/kubelet/device-plugins/"))]
    pub registrar_socket_dir: Option<String>,

    /// Kubelet root directory on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "/var/lib/kubelet"))]
    pub kubelet_dir: Option<String>,

    /// Host directory of the StorageOS CSI plugin socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "/var/lib/kubelet/plugins_registry/storageos"))]
    pub plugin_dir: Option<String>,

    /// Host device directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "/dev"))]
    pub device_dir: Option<String>,

    /// Host directory where kubelet discovers plugin registration sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "/var/lib/kubelet/plugins_registry"))]
    pub registration_dir: Option<String>,

    /// Path of the CSI socket as kubelet sees it, given to the node driver registrar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "/var/lib/kubelet/plugins_registry/storageos/csi.sock"))]
    pub kubelet_registration_path: Option<String>,

    /// Legacy (misspelled as in v2.4.2): driver registration mode; not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_registeration_mode: Option<String>,

    /// Legacy: whether the driver requires attachment; the CSIDriver always requires it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_requires_attachment: Option<String>,

    /// How the CSI helpers (provisioner, attacher, resizer) run: `deployment` or `statefulset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "deployment", "x-kubernetes-validations" = validation::deployment_strategy()))]
    pub deployment_strategy: Option<String>,

    /// How long the CSI provisioner, attacher and resizer wait for one call to the StorageOS
    /// driver (their `--timeout`), for example `2m` where creating or attaching a volume is
    /// slow. Unset: 30s for the provisioner, the sidecars' own defaults for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = validation::sidecar_timeout()))]
    pub timeout: Option<String>,

    /// How many volumes the CSI provisioner, attacher and resizer work on at once (their
    /// `--worker-threads`, `--workers` for the resizer). Unset: 20 for the provisioner, the
    /// sidecars' own defaults for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 1, "maximum" = 500))]
    pub worker_threads: Option<i32>,
}

/// The Service in front of the StorageOS API.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterService {
    /// Service name; also the host name the api-manager and CSI helpers use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "storageos"), length(min = 1, max = 63))]
    pub name: Option<String>,

    /// Service type: ClusterIP, NodePort, LoadBalancer or ExternalName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "type")]
    #[schemars(extend("default" = "ClusterIP", "x-kubernetes-validations" = validation::service_type()))]
    pub type_: Option<String>,

    /// Accepted for compatibility; it has no effect (1-65535). The Go operator made it the
    /// Service's targetPort, which only worked at 5705, the port the StorageOS node always
    /// listens on; the Service now always targets that port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 5705, "minimum" = 1, "maximum" = 65535))]
    pub external_port: Option<i32>,

    /// Port the Service exposes, which the api-manager, the scheduler extender and the Ingress
    /// use (1-65535). As in the Go operator: "internal" to the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 5705, "minimum" = 1, "maximum" = 65535))]
    pub internal_port: Option<i32>,

    /// Annotations copied onto the Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Ingress in front of the StorageOS API Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterIngress {
    /// Create the Ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,

    /// Host name the Ingress answers for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "storageos.local"))]
    pub hostname: Option<String>,

    /// Serve TLS with `tls.crt`/`tls.key` from the credentials Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,

    /// Annotations copied onto the Ingress (for example the ingress class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Container images. Empty means the operator's default for its release.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerImages {
    /// StorageOS node image. Change it with a StorageOSUpgrade, which restarts every node safely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_container: Option<String>,
    /// StorageOS init container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container: Option<String>,
    /// api-manager image. Empty runs `storageos-operator api-manager` from the operator's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_manager_container: Option<String>,
    /// CSI node driver registrar image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_node_driver_registrar_container: Option<String>,
    /// Legacy: CSI cluster driver registrar image (not used; the CSIDriver object replaces it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_cluster_driver_registrar_container: Option<String>,
    /// CSI external provisioner image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_external_provisioner_container: Option<String>,
    /// CSI external attacher image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_external_attacher_container: Option<String>,
    /// CSI external resizer image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_external_resizer_container: Option<String>,
    /// CSI liveness probe image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_liveness_probe_container: Option<String>,
    /// kube-scheduler image of the scheduler extender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_scheduler_container: Option<String>,
    /// Legacy: not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyperkube_container: Option<String>,
    /// Legacy: NFS server image of the retired NFSServer resource; not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs_container: Option<String>,
}

/// External key-value store.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterKvBackend {
    /// Comma-separated etcd endpoints, for example `http://etcd.etcd.svc:2379`. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub address: Option<String>,
    /// Legacy: key-value store kind; only etcd is supported and the value is not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
}

/// Observed state of a StorageOS cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSClusterStatus {
    /// Creating, Running, Degraded, Pending (another cluster is active) or Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Legacy: deprecated per-node health map; always empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_health_status: Option<BTreeMap<String, NodeHealth>>,
    /// Names of the nodes selected to run StorageOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Ready StorageOS nodes out of the selected nodes, as `ready/total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// Ready and unready members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<MembersStatus>,
    /// Ready, Progressing and Degraded, each with a reason and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The images in use, after defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ContainerImages>,
}

/// Ready and unready members of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembersStatus {
    /// Nodes whose StorageOS pod is ready and whose StorageOS node is online.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Vec<String>>,
    /// Selected nodes that are not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unready: Option<Vec<String>>,
}

/// Legacy per-node health of StorageOS v1 subsystems.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeHealth {
    /// DirectFS initiator health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directfs_initiator: Option<String>,
    /// Director health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub director: Option<String>,
    /// Key-value store health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<String>,
    /// Key-value store write health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_write: Option<String>,
    /// NATS health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<String>,
    /// Presentation health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presentation: Option<String>,
    /// RDB health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdb: Option<String>,
}

/// The kit's status writer keeps the conditions' transition times.
impl operator_kit::runtime::kube::status::WithConditions for StorageOSClusterStatus {
    fn conditions_mut(&mut self) -> &mut Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>> {
        &mut self.conditions
    }
}
