//! The interlock with blocked drains (pure): an upgrade does not start while a node is
//! cordoned and a drain guard protects the last copy of a volume on it. The api-manager puts a
//! PodDisruptionBudget on each such node (selected by [`guard_selector`], naming the node in
//! [`NODE_ANNOTATION`]); an offline upgrade restarting every node then would take that copy down
//! while the drain waits on it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;

pub use crate::crd::{DRAIN_GUARD_NODE_ANNOTATION as NODE_ANNOTATION, drain_guard_selector as guard_selector};

/// The nodes the drain guards' PodDisruptionBudgets name (in full, in their annotation; the
/// label holds a digest of a long name), sorted, once each.
pub fn guarded_nodes(pdbs: &[PodDisruptionBudget]) -> BTreeSet<String> {
    pdbs.iter()
        .filter_map(|p| p.annotations().get(NODE_ANNOTATION).cloned())
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
    fn guarded_nodes_come_from_the_annotation_and_a_cordon_is_spec_unschedulable() {
        let pdb = |labels: serde_json::Value| -> PodDisruptionBudget {
            serde_json::from_value(json!({"metadata": {"name": "g", "annotations": labels}})).unwrap()
        };
        let pdbs = [
            pdb(json!({NODE_ANNOTATION: "b"})),
            pdb(json!({NODE_ANNOTATION: "a"})),
            pdb(json!({NODE_ANNOTATION: "a"})),
            pdb(json!({})),
        ];
        assert_eq!(guarded_nodes(&pdbs).into_iter().collect::<Vec<_>>(), ["a", "b"]);
        let node = |spec: serde_json::Value| -> Node { serde_json::from_value(json!({"spec": spec})).unwrap() };
        assert!(cordoned(&node(json!({"unschedulable": true}))));
        assert!(!cordoned(&node(json!({}))));
    }
}
