//! How a cluster marks what it owns and what holds it: its finalizer, the annotations that
//! change its reconcile, the label selector of its children and the kinds it may prune.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::crd::StorageOSCluster;
use crate::render::{self, labels};
use crate::runtime::apply::PruneKind;

/// Finalizer that holds a cluster until everything it created is deleted.
pub const FINALIZER: &str = "finalizer.storageoscluster.storageos.com";
/// Annotation that lets a cluster be deleted while pods still use StorageOS volumes.
pub const FORCE_DELETE_ANNOTATION: &str = "storageos.com/force-delete";
/// Annotation a StorageOSUpgrade sets (to its name) to pause the cluster reconciler.
pub const PAUSED_BY_ANNOTATION: &str = "storageos.com/paused-by-upgrade";

/// Every kind the operator creates and may prune or delete: the kinds `render` can produce,
/// except the Namespace, which is never deleted (the control plane may own objects in it).
pub fn owned_kinds() -> Vec<PruneKind> {
    render::KINDS
        .iter()
        .filter(|(_, kind, _)| *kind != "Namespace")
        .map(|&(api_version, kind, namespaced)| PruneKind {
            api_version,
            kind,
            namespaced,
        })
        .collect()
}

/// The label selector of everything created for `cluster`.
pub fn children_selector(cluster: &StorageOSCluster) -> String {
    let ns = cluster.namespace().unwrap_or_default();
    selector(&labels::pruning(&cluster.name_any(), &ns))
}

/// `labels` as a label selector (`k=v,k=v`).
pub fn selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(ns: &str, name: &str) -> StorageOSCluster {
        serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"secretRefName": "s", "secretRefNamespace": "default"}
        }))
        .unwrap()
    }

    #[test]
    fn owned_kinds_cover_every_rendered_kind_but_the_namespace() {
        let kinds: Vec<_> = owned_kinds().iter().map(|k| k.kind).collect();
        assert!(!kinds.contains(&"Namespace"));
        for k in [
            "DaemonSet",
            "CSIDriver",
            "MutatingWebhookConfiguration",
            "ClusterRoleBinding",
            "Ingress",
            "Secret",
        ] {
            assert!(kinds.contains(&k), "{k} is not pruned");
        }
    }

    #[test]
    fn children_selector_uses_the_pruning_labels() {
        let s = children_selector(&cluster("ns1", "c1"));
        assert!(s.contains("storageos.com/cluster=c1"));
        assert!(s.contains("storageos.com/cluster-namespace=ns1"));
        assert!(s.contains("app.kubernetes.io/managed-by=storageos-operator"));
    }
}
