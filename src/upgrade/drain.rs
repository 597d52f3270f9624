//! The interlock with blocked drains (pure): an upgrade does not start while a node is
//! cordoned and a drain guard protects the last copy of a volume on it. The api-manager puts a
//! PodDisruptionBudget on each such node (labelled [`GUARD_SELECTOR`], naming the node in
//! [`GUARD_NODE_LABEL`]); an offline upgrade restarting every node then would take that copy down
//! while the drain waits on it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;

/// Label selector of the drain guards' PodDisruptionBudgets.
pub const GUARD_SELECTOR: &str = "app.kubernetes.io/component=drain-guard";
/// Label of a drain guard's PodDisruptionBudget naming the node it guards.
pub const GUARD_NODE_LABEL: &str = "storageos.com/drain-guard-node";

/// The nodes a drain guard's PodDisruptionBudget names (sorted, once each).
pub fn guarded_nodes(pdbs: &[PodDisruptionBudget]) -> BTreeSet<String> {
    pdbs.iter()
        .filter_map(|p| p.labels().get(GUARD_NODE_LABEL).cloned())
        .filter(|n| !n.is_empty())
        .collect()
}

/// Whether a node is cordoned (`spec.unschedulable`).
pub fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn guarded_nodes_come_from_the_label_and_a_cordon_is_spec_unschedulable() {
        let pdb = |labels: serde_json::Value| -> PodDisruptionBudget {
            serde_json::from_value(json!({"metadata": {"name": "g", "labels": labels}})).unwrap()
        };
        let pdbs = [
            pdb(json!({GUARD_NODE_LABEL: "b"})),
            pdb(json!({GUARD_NODE_LABEL: "a"})),
            pdb(json!({GUARD_NODE_LABEL: "a"})),
            pdb(json!({})),
        ];
        assert_eq!(guarded_nodes(&pdbs).into_iter().collect::<Vec<_>>(), ["a", "b"]);
        let node = |spec: serde_json::Value| -> Node { serde_json::from_value(json!({"spec": spec})).unwrap() };
        assert!(cordoned(&node(json!({"unschedulable": true}))));
        assert!(!cordoned(&node(json!({}))));
    }
}
