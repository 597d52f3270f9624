//! The typed objects `build` returns: one variant per Kubernetes kind the operator applies.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::{Metadata, NamespaceResourceScope, Resource};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The prometheus-operator ServiceMonitor (monitoring.coreos.com/v1), reduced to the fields the
/// operator sets. Unknown fields are rejected, like a typo in a template would be.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceMonitor {
    /// Always `monitoring.coreos.com/v1`.
    pub api_version: String,
    /// Always `ServiceMonitor`.
    pub kind: String,
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What to scrape.
    pub spec: ServiceMonitorSpec,
}

/// What a ServiceMonitor scrapes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceMonitorSpec {
    /// Services to scrape.
    pub selector: LabelSelector,
    /// Namespaces to look for them in (default: the ServiceMonitor's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<ServiceMonitorNamespaces>,
    /// Ports of those Services.
    pub endpoints: Vec<ServiceMonitorEndpoint>,
}

/// The namespaces a ServiceMonitor selects Services in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceMonitorNamespaces {
    /// These namespaces only.
    pub match_names: Vec<String>,
}

/// A scraped port.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceMonitorEndpoint {
    /// Service port name.
    pub port: String,
    /// HTTP path, when not `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl Resource for ServiceMonitor {
    const API_VERSION: &'static str = "monitoring.coreos.com/v1";
    const GROUP: &'static str = "monitoring.coreos.com";
    const KIND: &'static str = "ServiceMonitor";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "servicemonitors";
    type Scope = NamespaceResourceScope;
}

impl Metadata for ServiceMonitor {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

macro_rules! objects {
    ($($variant:ident($ty:ty, namespaced = $ns:expr)),* $(,)?) => {
        /// A desired object, typed. `to_value` gives the JSON (with apiVersion and kind) to
        /// server-side apply as a dynamic object.
        #[derive(Clone, Debug, PartialEq)]
        #[allow(clippy::large_enum_variant)] // built once per reconcile; boxing buys nothing
        pub enum Object {
            $(
                #[doc = concat!("A ", stringify!($variant), ".")]
                $variant($ty),
            )*
        }

        /// Every (apiVersion, kind, namespaced) `build` can return: what a pruner lists.
        pub const KINDS: &[(&str, &str, bool)] = &[
            $((<$ty as Resource>::API_VERSION, <$ty as Resource>::KIND, $ns),)*
        ];

        impl Object {
            /// `apiVersion`, for example `apps/v1`.
            pub fn api_version(&self) -> &'static str {
                match self { $(Object::$variant(_) => <$ty as Resource>::API_VERSION,)* }
            }

            /// API group (empty for the core group).
            pub fn group(&self) -> &'static str {
                match self { $(Object::$variant(_) => <$ty as Resource>::GROUP,)* }
            }

            /// `kind`, for example `DaemonSet`.
            pub fn kind(&self) -> &'static str {
                match self { $(Object::$variant(_) => <$ty as Resource>::KIND,)* }
            }

            /// Plural resource name, for example `daemonsets`.
            pub fn plural(&self) -> &'static str {
                match self { $(Object::$variant(_) => <$ty as Resource>::URL_PATH_SEGMENT,)* }
            }

            /// Whether the kind is namespaced (cluster-scoped kinds get no owner reference).
            pub fn is_namespaced(&self) -> bool {
                match self { $(Object::$variant(_) => $ns,)* }
            }

            /// The object's metadata.
            pub fn metadata(&self) -> &ObjectMeta {
                match self { $(Object::$variant(o) => o.metadata(),)* }
            }

            /// The object's metadata, to add owner references or labels.
            pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
                match self { $(Object::$variant(o) => o.metadata_mut(),)* }
            }

            /// The object as JSON, including apiVersion and kind.
            pub fn to_value(&self) -> Result<Value, serde_json::Error> {
                match self { $(Object::$variant(o) => serde_json::to_value(o),)* }
            }

            /// Parses a document of a known apiVersion and kind into its typed variant; None for
            /// any other kind.
            pub fn from_value(doc: Value) -> Option<Result<Object, serde_json::Error>> {
                let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
                let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
                $(
                    if api_version == <$ty as Resource>::API_VERSION && kind == <$ty as Resource>::KIND {
                        return Some(serde_json::from_value::<$ty>(doc).map(Object::$variant));
                    }
                )*
                None
            }
        }
    };
}

objects! {
    Namespace(Namespace, namespaced = false),
    ServiceAccount(ServiceAccount, namespaced = true),
    ClusterRole(ClusterRole, namespaced = false),
    ClusterRoleBinding(ClusterRoleBinding, namespaced = false),
    Role(Role, namespaced = true),
    RoleBinding(RoleBinding, namespaced = true),
    Secret(Secret, namespaced = true),
    ConfigMap(ConfigMap, namespaced = true),
    DaemonSet(DaemonSet, namespaced = true),
    Deployment(Deployment, namespaced = true),
    StatefulSet(StatefulSet, namespaced = true),
    Service(Service, namespaced = true),
    Ingress(Ingress, namespaced = true),
    CSIDriver(CSIDriver, namespaced = false),
    StorageClass(StorageClass, namespaced = false),
    MutatingWebhookConfiguration(MutatingWebhookConfiguration, namespaced = false),
    ValidatingAdmissionPolicy(ValidatingAdmissionPolicy, namespaced = false),
    ValidatingAdmissionPolicyBinding(ValidatingAdmissionPolicyBinding, namespaced = false),
    ServiceMonitor(ServiceMonitor, namespaced = true),
}

impl Object {
    /// `metadata.name` (every rendered object has one).
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace`, None for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        self.metadata().namespace.as_deref()
    }

    /// `Kind/name` or `Kind namespace/name`, for messages.
    pub fn describe(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{} {ns}/{}", self.kind(), self.name()),
            None => format!("{} {}", self.kind(), self.name()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_known_kinds_and_reports_identity() {
        let doc = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": "ns"}});
        let obj = Object::from_value(doc.clone()).unwrap().unwrap();
        assert_eq!(
            (obj.api_version(), obj.kind(), obj.name()),
            ("v1", "ServiceAccount", "sa")
        );
        assert_eq!(obj.namespace(), Some("ns"));
        assert!(obj.is_namespaced());
        assert_eq!(obj.to_value().unwrap(), doc);
        assert_eq!(obj.describe(), "ServiceAccount ns/sa");
        assert!(Object::from_value(json!({"apiVersion": "v1", "kind": "Pod"})).is_none());
    }

    #[test]
    fn service_monitor_rejects_unknown_fields() {
        let bad = json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "m"}, "spec": {"selector": {}, "endpoints": [{"port": "metrics", "intervall": "5s"}]}});
        assert!(Object::from_value(bad).unwrap().is_err());
    }

    #[test]
    fn every_rendered_kind_can_be_applied_and_pruned() {
        let held = crate::rbac::operator::cluster_role_rules();
        for &(api_version, kind, _) in KINDS {
            if kind == "Namespace" {
                continue;
            }
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let plural =
                kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, version, kind)).plural;
            let rule = |verbs: &[&str], names: Option<&[&str]>| k8s_openapi::api::rbac::v1::PolicyRule {
                api_groups: Some(vec![group.to_string()]),
                resources: Some(vec![plural.clone()]),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
                resource_names: names.map(|n| n.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            };
            // Admission objects are changed only by the names the operator renders.
            let named = match kind {
                "MutatingWebhookConfiguration" => Some(crate::rbac::operator::WEBHOOK_CONFIGS),
                "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => {
                    Some(crate::rbac::operator::ADMISSION_POLICIES)
                }
                _ => None,
            };
            let needed = match named {
                Some(names) => vec![
                    rule(&["list", "watch", "create"], None),
                    rule(&["get", "patch", "delete"], Some(names)),
                ],
                None => vec![rule(crate::rbac::operator::MANAGE, None)],
            };
            assert!(
                crate::rbac::missing(&held, &needed).is_empty(),
                "{kind}: {:?}",
                crate::rbac::missing(&held, &needed)
            );
        }
    }
}
