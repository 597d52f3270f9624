//! How a cluster marks what it owns and what holds it: its finalizer, the label selector of its
//! children and the kinds it may prune (the annotations that change its reconcile are in
//! [`crate::crd`]).

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::crd::StorageOSCluster;
use crate::render::{self, labels};
use crate::runtime::kube::apply::{Ownership, PruneKind};

/// Finalizer that holds a cluster until everything it created is deleted.
pub const FINALIZER: &str = "finalizer.storageoscluster.storageos.com";

/// The operator's field manager; and the Go operator v2.4.2's (a controller-runtime client's
/// plain creates), whose objects are adopted (docs/adoption.md).
pub use crate::crd::contract::{
    GO_OPERATOR_FIELD_MANAGER as GO_FIELD_MANAGER, OPERATOR_FIELD_MANAGER as FIELD_MANAGER,
};

/// What the operator's appliers (cluster, Job, upgrade) may take over besides what they wrote:
/// objects the Go operator wrote, objects labelled as managed by this operator (as the Go
/// operator labelled most children), and the StorageOS CSIDriver, which belongs to StorageOS
/// whoever created it (the Go operator created it without labels).
pub const APPLY_OWNERSHIP: Ownership = Ownership {
    field_manager: FIELD_MANAGER,
    adoptable_managers: &[GO_FIELD_MANAGER],
    managed_by: labels::MANAGED_BY,
    adoptable_names: &[crate::storageos::CSI_DRIVER],
};

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
