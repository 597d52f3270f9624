//! `storageos_cluster_ready{cluster_namespace,name}`: 1 while a StorageOSCluster's Ready
//! condition is True, else 0, so that an alert can fire on a cluster that stays not Ready; and
//! the kv backend check: `storageos_cluster_kv_backend_reachable` and
//! `storageos_operator_etcd_client_cert_expiry_timestamp_seconds`.
//!
//! The cluster's namespace is `cluster_namespace`, not `namespace`: prometheus-operator gives
//! every scraped series the `namespace` of its target (the operator's own namespace), which
//! would rename ours to `exported_namespace` unless the ServiceMonitor set `honorLabels`, and
//! that would let a target overwrite any target label.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::crd::StorageOSClusterStatus;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster_namespace: String,
    name: String,
}

/// The cluster controller's own metrics.
#[derive(Clone, Default)]
pub struct ClusterMetrics {
    ready: Family<ClusterLabels, Gauge>,
    kv_backend_reachable: Family<ClusterLabels, Gauge>,
    etcd_client_cert_expiry: Family<ClusterLabels, Gauge>,
    nodes_ineligible: Family<ClusterLabels, Gauge>,
}

impl ClusterMetrics {
    /// Registers the metric families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "storageos_cluster_ready",
            "1 while the StorageOSCluster's Ready condition is True, else 0",
            m.ready.clone(),
        );
        registry.register(
            "storageos_cluster_kv_backend_reachable",
            "1 while every etcd endpoint of the StorageOSCluster answers the operator's health check, else 0",
            m.kv_backend_reachable.clone(),
        );
        registry.register(
            "storageos_operator_etcd_client_cert_expiry_timestamp_seconds",
            "When the etcd client certificate of the StorageOSCluster expires (Unix time)",
            m.etcd_client_cert_expiry.clone(),
        );
        registry.register(
            "storageos_cluster_nodes_ineligible",
            "Selected nodes StorageOS cannot run on (operating system, architecture, kernel), named by the NodesEligible condition",
            m.nodes_ineligible.clone(),
        );
        m
    }

    /// Records the kv backend check of `namespace/name`: reachable or not, and when its
    /// client certificate expires (no series without TLS).
    pub fn observe_kv_backend(&self, namespace: &str, name: &str, reachable: bool, cert_expiry: Option<i64>) {
        let labels = ClusterLabels {
            cluster_namespace: namespace.into(),
            name: name.into(),
        };
        self.kv_backend_reachable
            .get_or_create(&labels)
            .set(i64::from(reachable));
        match cert_expiry {
            Some(at) => {
                self.etcd_client_cert_expiry.get_or_create(&labels).set(at);
            }
            None => {
                self.etcd_client_cert_expiry.remove(&labels);
            }
        }
    }

    /// Records how many selected nodes of `namespace/name` StorageOS cannot run on.
    pub fn observe_ineligible(&self, namespace: &str, name: &str, count: usize) {
        let labels = ClusterLabels {
            cluster_namespace: namespace.into(),
            name: name.into(),
        };
        self.nodes_ineligible
            .get_or_create(&labels)
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Records the Ready condition of `namespace/name` as written in `status`.
    pub fn observe(&self, namespace: &str, name: &str, status: &StorageOSClusterStatus) {
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        self.ready
            .get_or_create(&ClusterLabels {
                cluster_namespace: namespace.into(),
                name: name.into(),
            })
            .set(i64::from(ready));
    }

    /// Removes the series of `namespace/name` (a deleted cluster, or one that is not honoured),
    /// so no alert fires for a cluster that is not there.
    pub fn forget(&self, namespace: &str, name: &str) {
        let labels = ClusterLabels {
            cluster_namespace: namespace.into(),
            name: name.into(),
        };
        self.ready.remove(&labels);
        self.kv_backend_reachable.remove(&labels);
        self.etcd_client_cert_expiry.remove(&labels);
        self.nodes_ineligible.remove(&labels);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_finalized_cluster_has_no_series() {
        let mut registry = Registry::default();
        let m = ClusterMetrics::register(&mut registry);
        m.observe("ns", "a", &StorageOSClusterStatus::default());
        m.observe("ns", "b", &StorageOSClusterStatus::default());
        m.forget("ns", "a");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains(r#"name="a""#), "{text}");
        assert!(
            text.contains(r#"storageos_cluster_ready{cluster_namespace="ns",name="b"} 0"#),
            "{text}"
        );
    }
}
